"""HTML report of the contextuality study: one section per model setting, then a comparison across settings."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .stats import CONTEXTS, ONE_SETTING, SETTING  # noqa: E402
from ...warehouse.catalog import model_title, with_model_names  # noqa: E402
from ..html_report import (MIN_POINTS, image_html, nothing_to_show, save_figure, section_title, start_page, table_html,
                           write_page)


def setting_label(row) -> str:
    """The settings of one collection (everything in SETTING but the model), e.g.
    "exact · T=0.5 · top_k=40 · top_p=1 · max_new=6 · prompt test"."""
    return (f"{row['mode']} · T={row['temperature']:g} · top_k={int(row['top_k'])} · top_p={row['top_p']:g} · "
            f"max_new={int(row['max_new_tokens'])} · prompt {row['prompt_version']}")


def _stars(p: float) -> str:
    if not np.isfinite(p):
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


#: The report's flags (written at the top of the report and in docs/decisions.md, "Reports").
INVALID_MASS_LIMIT = 0.5
FLAG_RULES = (f"invalid mass: flagged when the mean over prompts of 1 - p_valid (probability not on either valid "
              f"answer) is above {INVALID_MASS_LIMIT}; position bias: flagged when the order gap (mean over "
              "templates and contexts of |p(f) in order MF - p(f) in order FM|, the same template and context in "
              "both orders) is larger than the context gap (mean over templates, orders and the four other contexts "
              "of |p(f) in that context - p(f) unprimed|)")


def setting_flags(pf: pd.DataFrame) -> pd.DataFrame:
    """Per collection setting: mean invalid mass, order gap and context gap (see FLAG_RULES) and the two flags.

    Parameters
    ----------
    pf : `winopron_pf` rows (SETTING, item_id, context, option_order, p_f, p_valid).

    Returns
    -------
    DataFrame: SETTING, prompts, mean_invalid_mass, order_gap, order_pairs, context_gap, context_pairs,
    invalid_flag, position_flag (NaN gaps never flag).
    """
    rows = []
    for key, part in pf.groupby(SETTING, sort=True, dropna=False):
        by_order = part.pivot_table(index=["item_id", "context"], columns="option_order", values="p_f",
                                    aggfunc="mean").reindex(columns=["MF", "FM"]).dropna()
        order_diff = (by_order["MF"] - by_order["FM"]).abs()
        by_context = part.pivot_table(index=["item_id", "option_order"], columns="context", values="p_f",
                                      aggfunc="mean").reindex(columns=CONTEXTS)
        context_diff = by_context[CONTEXTS[1:]].sub(by_context["unprimed"], axis=0).abs().stack().dropna()
        invalid = float((1 - part["p_valid"]).mean())
        order_gap = float(order_diff.mean()) if len(order_diff) else np.nan
        context_gap = float(context_diff.mean()) if len(context_diff) else np.nan
        rows.append({**dict(zip(SETTING, key)), "prompts": len(part), "mean_invalid_mass": invalid,
                     "order_gap": order_gap, "order_pairs": len(order_diff), "context_gap": context_gap,
                     "context_pairs": len(context_diff), "invalid_flag": bool(invalid > INVALID_MASS_LIMIT),
                     "position_flag": bool(np.isfinite(order_gap) and np.isfinite(context_gap)
                                           and order_gap > context_gap)})
    return pd.DataFrame(rows)


def flags_html(flags: pd.DataFrame, titles: dict[tuple, str]) -> str:
    """The box at the top of the report: one line per raised flag (with its numbers), then the rules.

    Parameters
    ----------
    flags : `setting_flags` output.
    titles : setting key (tuple of SETTING values) -> the section's plain-text title.
    """
    lines = []
    for _, row in flags.iterrows():
        title = html.escape(titles[tuple(row[c] for c in SETTING)])
        if row["invalid_flag"]:
            lines.append(f"<li><b>{title}</b>: invalid mass dominates: mean invalid mass "
                         f"{row['mean_invalid_mass']:.3f} &gt; {INVALID_MASS_LIMIT} over {row['prompts']} prompts; "
                         "p(feminine) is renormalized over a minority of the probability.</li>")
        if row["position_flag"]:
            lines.append(f"<li><b>{title}</b>: position bias dominates: order gap {row['order_gap']:.3f} "
                         f"(n = {row['order_pairs']}) &gt; context gap {row['context_gap']:.3f} "
                         f"(n = {row['context_pairs']}); the option order moves p(feminine) more than the context."
                         "</li>")
    head = "<b>Flags</b><ul>" + "".join(lines) + "</ul>" if lines else "<b>Flags</b>: none raised."
    return f'<div class="flags">{head}<p><small>Rules: {html.escape(FLAG_RULES)}.</small></p></div>'


def _pick(frame: pd.DataFrame, sel: dict) -> pd.DataFrame:
    """The rows of one collection setting."""
    if frame.empty:
        return frame
    mask = np.ones(len(frame), dtype=bool)
    for k, v in sel.items():
        mask &= (frame[k] == v).to_numpy()
    return frame[mask]


def headline_figure(pf: pd.DataFrame, titles: dict[tuple, str], out: Path) -> str:
    """The study's headline: mean p(feminine) per context (both option orders pooled, over templates), one series per
    collection setting (model and sampler settings), with 95% t-intervals over templates,
    mean +- t_{0.975, n-1} * sd / sqrt(n), and the most templates a point rests on in each series' name; or why
    there is nothing.

    Parameters
    ----------
    pf : the `pf` table (`pf_table`: one row per setting, option order and context; mean_p_f, sd_p_f, templates).
    titles : setting key (the SETTING values) -> its name as the report's sections name it.
    out : the report folder.

    Returns
    -------
    The figure's HTML.
    """
    from scipy.stats import t as student_t

    pooled = pf[(pf["option_order"] == "pooled") & pf["mean_p_f"].notna()] if not pf.empty else pf
    if pooled.empty:
        return nothing_to_show("p(feminine) per context and setting", "no template with a defined p(feminine)")
    groups = list(pooled.groupby(SETTING, sort=True, dropna=False))
    fig, ax = plt.subplots(figsize=(8.5, 4.2 + 0.22 * len(groups)))  # the legend below, a line per setting
    width = 0.7 / max(1, len(groups))
    for i, (key, part) in enumerate(groups):
        part = part.set_index("context").reindex(CONTEXTS)
        n = part["templates"].to_numpy(dtype=float)
        mean, sd = part["mean_p_f"].to_numpy(dtype=float), part["sd_p_f"].to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            half = np.where(n > 1, student_t.ppf(0.975, np.maximum(n - 1, 1)) * sd / np.sqrt(n), np.nan)
        x = np.arange(len(CONTEXTS)) - 0.35 + width * (i + 0.5)
        most = int(np.nanmax(n)) if np.isfinite(n).any() else 0
        ax.errorbar(x, mean, yerr=half, fmt="o", capsize=3,
                    label=f"{titles.get(key, str(key))} (up to {most} templates)")
    ax.set_xticks(range(len(CONTEXTS)), CONTEXTS)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("context")
    ax.set_ylabel("mean p(feminine) over templates")
    ax.set_title("p(feminine | context) per setting, option orders pooled; 95% t-interval over templates",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    return image_html(save_figure(fig, out, "headline_pf.png"))


def _pf_figure(pf: pd.DataFrame, out: Path, slug: str) -> str:
    """Box plots of p(feminine) per context, one panel per option order, n per box; or why there is nothing."""
    data = {order: [pf[(pf["context"] == c) & (pf["option_order"] == order)]["p_f"].dropna() for c in CONTEXTS]
            for order in ("MF", "FM")}
    total = sum(len(d) for parts in data.values() for d in parts)
    if total < MIN_POINTS:
        return nothing_to_show("p(feminine | context)", f"{total} prompts with a defined p(feminine); a figure needs "
                               f"at least {MIN_POINTS}")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, order in zip(axes, ("MF", "FM")):
        parts = data[order]
        ax.boxplot([d if len(d) else [np.nan] for d in parts],
                   tick_labels=[f"{c}\nn={len(d)}" for c, d in zip(CONTEXTS, parts)])
        ax.set_title(f"p(feminine | context), order {order}, n = {sum(len(d) for d in parts)} prompts", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("context (n = prompts)")
    axes[0].set_ylabel("p(feminine)")
    return image_html(save_figure(fig, out, f"{slug}_pf.png"))


#: bar groups of the KL and Spearman figures: both orders pooled (the paper's), then each order
ORDER_BARS = ("pooled", "MF", "FM")


def _kl_figure(kl: pd.DataFrame, out: Path, slug: str) -> str:
    """Mean KL to unprimed per context, pooled over orders and per order, n templates over each bar; or why there is
    nothing."""
    defined = kl[kl["mean_kl_bits"].notna()] if not kl.empty else kl
    n = int(defined["templates"].max()) if len(defined) else 0
    if n < MIN_POINTS:
        return nothing_to_show("mean KL to unprimed", f"{n} templates with p(feminine) defined in all five "
                               f"contexts; a figure needs at least {MIN_POINTS}")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.8 / len(ORDER_BARS)
    for i, order in enumerate(ORDER_BARS):
        part = kl[kl["option_order"] == order].set_index("context").reindex(CONTEXTS[1:])
        bars = ax.bar(np.arange(4) + width * i, part["mean_kl_bits"], width=width, label=order)
        for bar, count in zip(bars, part["templates"]):
            if np.isfinite(bar.get_height()):
                ax.annotate(f"n={int(count)}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            fontsize=6)
    ax.set_xticks(np.arange(4) + width, CONTEXTS[1:])
    ax.set_xlabel("context (compared with unprimed; n = templates)")
    ax.set_ylabel("mean KL to unprimed (bits)")
    ax.legend(title="option order")
    return image_html(save_figure(fig, out, f"{slug}_kl.png"))


def _spearman_figure(sp: pd.DataFrame, out: Path, slug: str) -> str:
    """Spearman rho per context, pooled over orders and per order, with significance stars and n; undefined
    correlations are not drawn."""
    defined = sp[sp["spearman_rho"].notna()] if not sp.empty else sp
    if defined.empty or int(defined["n"].max()) < MIN_POINTS:
        n = int(sp["n"].max()) if len(sp) else 0
        return nothing_to_show("Spearman rho with Misersky ratings", f"no defined correlation (at most {n} "
                               f"templates per context and order; a correlation needs at least {MIN_POINTS} and "
                               "non-constant values)")
    fig, ax = plt.subplots(figsize=(8.5, 3.8))
    width = 0.8 / len(ORDER_BARS)
    for i, order in enumerate(ORDER_BARS):
        part = sp[sp["option_order"] == order].set_index("context").reindex(CONTEXTS)
        bars = ax.bar(np.arange(5) + width * i, part["spearman_rho"], width=width, label=order)
        for bar, p, count in zip(bars, part["p_value"], part["n"]):
            if np.isfinite(bar.get_height()):
                ax.annotate(f"{_stars(p)}\nn={int(count)}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", fontsize=6)
    ax.set_xticks(np.arange(5) + width, CONTEXTS)
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xlabel("context (n = rated templates; * p<0.05, ** p<0.01, *** p<0.001)")
    ax.set_ylabel("Spearman rho with Misersky rating")
    ax.legend(title="option order")
    return image_html(save_figure(fig, out, f"{slug}_spearman.png"))


def _mi_figure(mi: pd.DataFrame, prompts: int, out: Path, slug: str) -> str:
    """Mutual information per context group and feature with bootstrap SE bars and n measurements; nothing to show
    when fewer than MIN_POINTS prompts have a defined p(feminine) (exact-mode measurements are draws from them) or
    no estimate is defined."""
    defined = mi[mi["mi_bits"].notna()] if not mi.empty else mi
    if prompts < MIN_POINTS or defined.empty:
        return nothing_to_show("mutual information", f"{prompts} prompts with a defined p(feminine) and "
                               f"{len(defined)} defined estimates; a figure needs at least {MIN_POINTS} prompts")
    fig, ax = plt.subplots(figsize=(8, 3.8))
    per_template = "templates" in mi.columns
    counts = mi["templates"] if per_template else mi["measurements"]
    labels = mi["context_group"] + ": " + mi["feature"] + " (n=" + counts.astype(int).astype(str) + ")"
    ax.bar(np.arange(len(mi)), mi["mi_bits"], yerr=mi["mi_se_bits"].fillna(0), capsize=3)
    ax.set_xticks(np.arange(len(mi)), labels, rotation=60, ha="right", fontsize=7)
    if per_template:
        ax.set_title("I[X_i; F_i] per template, mean over templates (bars: standard error)", fontsize=9)
    ax.set_xlabel(f"context group: feature (n = {'templates' if per_template else 'measurements'})")
    ax.set_ylabel("mutual information (bits)")
    return image_html(save_figure(fig, out, f"{slug}_mi.png"))


def _cbd_figure(fr: pd.DataFrame, out: Path, slug: str) -> str:
    """Fraction of template pairs contextual per order and variant, n pairs over each bar."""
    n = int(fr["pairs"].max()) if len(fr) else 0
    if n < MIN_POINTS:
        return nothing_to_show("contextual fractions (CbD)", f"{n} template pairs with p(feminine) defined where "
                               f"needed; a figure needs at least {MIN_POINTS}")
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, variant in enumerate(fr["variant"].unique()):
        part = fr[fr["variant"] == variant].set_index("option_order").reindex(["MF", "FM", "either"])
        bars = ax.bar(np.arange(3) + 0.38 * i, part["fraction"], width=0.38, label=variant)
        for bar, count in zip(bars, part["pairs"]):
            if np.isfinite(bar.get_height()):
                ax.annotate(f"n={int(count)}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            fontsize=7)
    ax.set_xticks(np.arange(3) + 0.19, ["MF", "FM", "either"])
    ax.set_xlabel("option order (n = template pairs)")
    ax.legend(title="variant")
    ax.set_ylabel("fraction of pairs contextual")
    if (fr["variant"] == "marginal-product").any():
        ax.set_title("marginal-product: never contextual by construction (Delta C <= 0 always)", fontsize=8)
    return image_html(save_figure(fig, out, f"{slug}_cbd.png"))


def _figures_for_setting(tables: dict[str, pd.DataFrame], key: tuple, out: Path, slug: str) -> list[str]:
    """The five figures of one collection setting, as HTML (an image, or the sentence saying why there is none)."""
    sel = dict(zip(SETTING, key))
    both = {name: pd.concat([tables[name], tables.get(f"{name}_by_order", pd.DataFrame())], ignore_index=True)
            for name in ("kl", "spearman")}
    mi = tables.get("mutual_information", tables.get("mutual_information_pooled", pd.DataFrame()))
    return [_pf_figure(_pick(tables["_pf"], sel), out, slug), _kl_figure(_pick(both["kl"], sel), out, slug),
            _spearman_figure(_pick(both["spearman"], sel), out, slug),
            _mi_figure(_pick(mi, sel), int(_pick(tables["_pf"], sel)["p_f"].notna().sum()), out, slug),
            _cbd_figure(_pick(tables["cbd_fractions"], sel), out, slug)]


def too_small(tables: dict[str, pd.DataFrame], key: tuple) -> str | None:
    """Why a collection setting is too small to estimate anything, or None. Every estimate of the study compares a
    template's contexts, so a collection needs at least one template with p(feminine) defined in every context
    (the KL to unprimed exists for it); below that its figures would be empty or single points."""
    sel = dict(zip(SETTING, key))
    kl = pd.concat([_pick(tables[name], sel) for name in ("kl", "kl_by_order") if name in tables],
                   ignore_index=True)
    if not kl.empty and kl["mean_kl_bits"].notna().any():
        return None
    pf = _pick(tables["_pf"], sel)
    return (f"Too small to estimate anything: {len(pf)} prompts, {int(pf['p_f'].notna().sum())} with a defined "
            "p(feminine), and no template measured in every context (each estimate compares a template's "
            "contexts). Collect more of this setting (a larger --limit, or without it) for figures and tables.")


def _setting_table(frame: pd.DataFrame, key: tuple) -> str:
    """The rows of one collection setting, without the setting columns."""
    if not frame.empty:
        for k, v in zip(SETTING, key):
            frame = frame[frame[k] == v]
        frame = frame.drop(columns=[c for c in SETTING if c in frame.columns])
    return table_html(frame)


#: (title, table) of each setting's section, in order; tables absent from the input are skipped
SETTING_TABLES = (
    ("Valid measurements per context and order (the paper's Table 3)", "validity"),
    ("p(feminine), both option orders pooled per template (as the paper)", "pf"),
    ("p(feminine) per option order", "pf_by_order"),
    ("Mean KL to unprimed, both orders pooled (as the paper)", "kl"),
    ("Mean KL to unprimed per option order", "kl_by_order"),
    ("Spearman with Misersky ratings, both orders pooled (as the paper)", "spearman"),
    ("Spearman with Misersky ratings per option order", "spearman_by_order"),
    ("Mutual information per template, averaged over templates (as the paper)", "mutual_information"),
    ("Mutual information, templates pooled (not the paper's)", "mutual_information_pooled"),
    ("Contextual fractions (CbD, per option order)", "cbd_fractions"),
)


def _temperature_panel(ax, frame: pd.DataFrame, series: str, values, y: str, n_column: str, title: str,
                       ylabel: str) -> None:
    """One panel of the temperature figure: a line of `y` against the temperature per value of column `series` (in
    the order of `values`; values without rows are left out), titled `title` with {n} = the largest `n_column`
    (0 for an empty frame)."""
    for value in values:
        part = frame[frame[series] == value].sort_values("at_temperature") if len(frame) else frame
        if len(part):
            ax.plot(part["at_temperature"], part[y], marker="o", label=value)
    n = int(frame[n_column].max()) if len(frame) else 0
    ax.set_title(title.format(n=n), fontsize=9)
    ax.set_ylabel(ylabel)


def _temperature_figure(tables: dict[str, pd.DataFrame], sel: dict, out: Path, slug: str) -> str:
    """The paper's Figures 8 and 9 for one collection: mean KL to unprimed, Spearman rho (both orders pooled) and
    the contextual fraction (joint CbD) against the temperature they were re-derived at, n on every point."""
    kl = _pick(tables["temperature_kl"], sel)
    sp = _pick(tables["temperature_spearman"], sel)
    cbd = _pick(tables["temperature_cbd_fractions"], sel)
    temps = sorted(set(kl["at_temperature"]) if len(kl) else set())
    if len(temps) < 2 or kl["mean_kl_bits"].notna().sum() == 0:
        return nothing_to_show("temperature robustness", f"{len(temps)} temperature(s) with a defined mean KL; a "
                               "comparison needs at least 2 (and exact-mode trie evidence)")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for context in CONTEXTS[1:]:
        part = kl[kl["context"] == context].sort_values("at_temperature")
        axes[0].plot(part["at_temperature"], part["mean_kl_bits"], marker="o", label=context)
    axes[0].set_title(f"mean KL to unprimed (pooled orders), n = {int(kl['templates'].max())} templates", fontsize=9)
    axes[0].set_ylabel("mean KL to unprimed (bits)")
    _temperature_panel(axes[1], sp, "context", CONTEXTS, "spearman_rho", "n",
                       "Spearman rho with Misersky rating (pooled orders), n = {n} templates", "Spearman rho")
    axes[1].axhline(0, color="black", lw=0.5)
    joint = cbd[cbd["variant"] == "joint"] if len(cbd) else cbd
    _temperature_panel(axes[2], joint, "option_order", ("MF", "FM", "either"), "fraction", "pairs",
                       "fraction of pairs contextual (CbD, joint), n = {n} pairs", "fraction contextual")
    for ax, title in zip(axes, ("context", "context", "option order")):
        ax.set_xlabel("temperature (re-derived from one exact collection)")
        ax.set_xticks(temps)
        ax.legend(title=title, fontsize=7)
    return image_html(save_figure(fig, out, f"{slug}_temperature.png"))


def _temperature_section(tables: dict[str, pd.DataFrame], key: tuple, out: Path, slug: str) -> str:
    """Temperature robustness of one collection: the figure, then the overlap of contextual pairs and the tables."""
    sel = dict(zip(SETTING, key))
    parts = ["<h3>Temperature robustness (the paper's Figures 8 and 9), re-derived from this collection</h3>",
             _temperature_figure(tables, sel, out, slug)]
    for title, table in (("Overlap of contextual pairs across temperatures (CbD, joint)", "temperature_overlap"),
                         ("Mean KL to unprimed by temperature", "temperature_kl"),
                         ("Spearman by temperature", "temperature_spearman"),
                         ("Mutual information by temperature", "temperature_mutual_information"),
                         ("Contextual fractions by temperature", "temperature_cbd_fractions")):
        frame = tables.get(table, pd.DataFrame())
        parts.append(f"<h4>{title}</h4>" + (_setting_table(frame, key) if not frame.empty
                                            else "<p>no exact-mode trie evidence for this collection</p>"))
    return "".join(parts)


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str,
                 model_table: pd.DataFrame | None = None) -> Path:
    """Write `out/index.html` and its PNG figures; returns the index path.

    Parameters
    ----------
    tables : `contextuality_report` output (with the private `_pf`).
    out, db : the report folder and the warehouse path (as `html_report.start_page`).
    model_table : `catalog.models(...)` executed, to name models; None names them by key.
    """
    parts = start_page(out, "Contextual invariance (WinoPron)", db,
                       "Every number is computed from stored evidence; no model was run for this report.")
    settings = tables["_pf"][SETTING].drop_duplicates().sort_values(SETTING).reset_index(drop=True)
    keys = [tuple(row[c] for c in SETTING) for _, row in settings.iterrows()]
    titles = {key: f"{model_title(row['model_key'], model_table)} — {setting_label(row)}"
              for key, (_, row) in zip(keys, settings.iterrows())}
    overlap_labels = dict(zip(settings[SETTING].astype(str).agg(" ".join, axis=1), titles.values()))
    flags = setting_flags(tables["_pf"])
    parts.append(flags_html(flags, titles))
    drawn = [key for key in keys if too_small(tables, key) is None]  # the others' sections say why they have none
    if drawn:
        pf = tables["pf"]
        chosen = pd.Series([tuple(r) in drawn for r in pf[SETTING].itertuples(index=False)], index=pf.index, dtype=bool)
        parts.append("<h2>p(feminine) per context and setting</h2>" + headline_figure(pf[chosen], titles, out))
    for n, (key, (_, row)) in enumerate(zip(keys, settings.iterrows())):
        slug = f"s{n}"
        parts.append(section_title(row["model_key"], model_table, setting_label(row)))
        small = too_small(tables, key)
        if small:
            parts.append(f'<p class="empty">{html.escape(small)}</p>')
            continue
        parts.extend(_figures_for_setting(tables, key, out, slug))
        parts.append("<h3>Flags</h3>" + table_html(_pick(flags, dict(zip(SETTING, key))).drop(columns=SETTING)))
        for title, table in SETTING_TABLES:
            if table in tables:
                parts.append(f"<h3>{title}</h3>" + _setting_table(tables[table], key))
        if "temperature_overlap" in tables and row["mode"] == "exact":
            parts.append(_temperature_section(tables, key, out, slug))
    overlap = tables["model_overlap"]
    parts.append("<h2>Comparison across models and settings</h2>")
    if overlap.empty or len(keys) < 2:
        parts.append(nothing_to_show("comparison", f"{len(keys)} collection setting; {ONE_SETTING}"))
    else:
        overlap = overlap.assign(setting_a=overlap["setting_a"].map(overlap_labels).fillna(overlap["setting_a"]),
                                 setting_b=overlap["setting_b"].map(overlap_labels).fillna(overlap["setting_b"]))
        parts.append(_overlap_figure(overlap, out))
        parts.append(table_html(overlap))
        for title, table in (("KL across settings", "kl"),
                             ("Contextual fractions across settings", "cbd_fractions")):
            parts.append(f"<h3>{title}</h3>" + table_html(_named(tables[table], model_table)))
    return write_page(out, "biaslab contextuality report", parts)


def _named(frame: pd.DataFrame, model_table: pd.DataFrame | None) -> pd.DataFrame:
    """A table with model names before its model_key (when a model table is given)."""
    return frame if model_table is None else with_model_names(frame, model_table)


def _overlap_figure(overlap: pd.DataFrame, out: Path) -> str:
    """Jaccard index of the contextual pairs (joint variant) of every two settings, as a matrix."""
    joint = overlap[overlap["variant"] == "joint"]
    labels = sorted(set(joint["setting_a"]) | set(joint["setting_b"]))
    if len(labels) < 2:
        return nothing_to_show("overlap of contextual pairs", f"{len(labels)} collection setting; {ONE_SETTING}")
    pairs = joint.pivot(index="setting_a", columns="setting_b", values="jaccard").reindex(index=labels,
                                                                                          columns=labels)
    matrix = pairs.combine_first(pairs.T)  # each pair is listed once: the matrix is symmetric
    counts = dict(zip(joint["setting_a"], joint["contextual_a"])) | dict(zip(joint["setting_b"],
                                                                            joint["contextual_b"]))
    for label in labels:  # a setting against itself: 1, or undefined without contextual pairs
        matrix.loc[label, label] = 1.0 if counts.get(label) else np.nan
    numbers = [str(i + 1) for i in range(len(labels))]  # the settings' names are long: numbered, listed below
    fig, ax = plt.subplots(figsize=(3.5 + 0.6 * len(labels), 2.8 + 0.6 * len(labels)))
    image = ax.imshow(matrix.to_numpy(dtype=float), vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(labels)), numbers)
    ax.set_yticks(range(len(labels)), numbers)
    ax.set_xlabel("setting b")
    ax.set_ylabel("setting a")
    ax.set_title(f"n = {len(labels)} settings (joint variant)", fontsize=9)
    fig.colorbar(image, ax=ax, label="Jaccard of contextual pairs")
    key = "".join(f"<li>{html.escape(label)}</li>" for label in labels)
    return image_html(save_figure(fig, out, "overlap.png")) + f'<ol class="key">{key}</ol>'
