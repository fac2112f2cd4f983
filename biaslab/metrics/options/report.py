"""The report of `biaslab report options`: per collection (model, method, setting), bars of the mean probability of
each option label per group with 95% bootstrap intervals, the option-order effect (said in words where it is
large), the paired contrast per item for every option label (each item's difference, and the mean with its
interval), a scatter of p against a numeric column with Spearman's rho and its interval over the study's units, a
reliability diagram where stimuli have a gold option, and the tables."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..html_report import (MIN_POINTS, image_html, nothing_to_show, save_figure, section_title, start_page,
                           table_html, write_page)
from .stats import KEY, ORDER_EFFECT


def _part(frame: pd.DataFrame | None, key: tuple) -> pd.DataFrame:
    if frame is None or frame.empty:
        return pd.DataFrame()
    mask = np.ones(len(frame), dtype=bool)
    for column, value in zip(KEY, key):
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def _group_label(frame: pd.DataFrame, by: list[str]) -> pd.Series:
    if not by:
        return pd.Series(["all"] * len(frame), index=frame.index)
    return frame[by].astype(str).agg(" · ".join, axis=1)


def _valid_labels(means: pd.DataFrame, groups: list[str]) -> list[str]:
    """Each group's tick label, with its valid share (1 - invalid_mass, the mass the bars are renormalized over)
    where the method has invalid answers: a bar of p = 1.000 resting on 0.05% of the mass says so under it."""
    if "invalid_mass" not in means or means["invalid_mass"].isna().all():
        return groups
    share = 1.0 - means.groupby("group", sort=False)["invalid_mass"].mean()

    def percent(x: float) -> str:  # two significant digits below 1%: 0.05% is not 0.0%
        return f"{x:.1%}" if x >= 0.01 or x == 0 else f"{100 * x:.2g}%"

    return [f"{g}\nvalid {percent(share[g])}" if pd.notna(share.get(g)) else f"{g}\nvalid -" for g in groups]


def bars_figure(means: pd.DataFrame, by: list[str], out: Path, name: str) -> str:
    """Mean p per option label (bars side by side) per group (x), with the bootstrap interval as error bars and,
    under each group, the valid share the probabilities are renormalized over (choice methods)."""
    if means.empty:
        return nothing_to_show("option probabilities by group", "no measurements")
    means = means.assign(group=_group_label(means, by))
    groups = list(dict.fromkeys(means["group"]))
    labels = sorted(means["option_label"].unique())
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(groups) + 2), 3.2))
    for i, label in enumerate(labels):
        part = means[means["option_label"] == label].set_index("group").reindex(groups)
        x = np.arange(len(groups)) + (i - (len(labels) - 1) / 2) * width
        low = (part["mean_p"] - part["ci_low"]).clip(lower=0).fillna(0)
        high = (part["ci_high"] - part["mean_p"]).clip(lower=0).fillna(0)
        ax.bar(x, part["mean_p"], width, yerr=[low, high], capsize=3, label=label)
    ticks = _valid_labels(means, groups)
    ax.set_xticks(np.arange(len(groups)), ticks, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean p over items\n(of the valid answers)" if ticks != groups else "mean p over items")
    ax.legend(fontsize=8, title="option", title_fontsize=8)
    return image_html(save_figure(fig, out, name))


def contrast_figure(items: pd.DataFrame, contrast: pd.DataFrame, column: str, a: str, b: str, label: str,
                    out: Path, name: str) -> str:
    """Each item's difference p(label | a) - p(label | b) (dots, sorted), and the mean with its interval."""
    wide = items[items["option_label"] == label].pivot_table(index="item_id", columns=column, values="p")
    if a not in wide.columns or b not in wide.columns:
        return nothing_to_show(f"contrast {a} - {b}", "no item has both values")
    d = (wide[a] - wide[b]).dropna().sort_values()
    if len(d) < MIN_POINTS:
        return nothing_to_show(f"contrast {a} - {b}", f"{len(d)} paired items; a figure needs at least {MIN_POINTS}")
    row = contrast[contrast["option_label"] == label].iloc[0]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.scatter(np.arange(len(d)), d.to_numpy(), s=12)
    ax.axhline(0, color="black", lw=0.8)
    ax.axhline(row["mean_diff"], color="C1", lw=1.5, label=f"mean {row['mean_diff']:.3f} (p = {row['p_value']:.3g})")
    ax.axhspan(row["ci_low"], row["ci_high"], color="C1", alpha=0.2, label="95% bootstrap interval")
    ax.set_xlabel(f"items ({len(d)}), sorted by their difference")
    ax.set_ylabel(f"p({label} | {a}) - p({label} | {b})")
    ax.set_title(f"{column}: {a} - {b}, option {label}, per item", fontsize=9)
    ax.legend(fontsize=8)
    return image_html(save_figure(fig, out, name))


def scatter_figure(points: pd.DataFrame, row: pd.Series, numeric: str, label: str, out: Path, name: str,
                   group: str = "") -> str:
    """p of option `label` against `numeric`, one dot per study unit, titled with the group, Spearman's rho, its
    bootstrap interval, the p-value and the number of units (`row`: the `spearman` table's row)."""
    if len(points) < MIN_POINTS:
        return nothing_to_show(f"p({label}) against {numeric}",
                               f"{len(points)} units; a figure needs at least {MIN_POINTS}")
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    ax.scatter(points[numeric].to_numpy(dtype=float), points["p"].to_numpy(dtype=float), s=14)
    ax.set_xlabel(f"{numeric} (mean per {row['unit']})")
    ax.set_ylabel(f"p({label}) (mean per {row['unit']})")
    ax.set_ylim(-0.02, 1.02)
    interval = (f" [{row['ci_low']:.2f}, {row['ci_high']:.2f}]" if pd.notna(row["ci_low"]) else "")
    ax.set_title(f"{group + ': ' if group else ''}Spearman rho = {row['rho']:.2f}{interval}, "
                 f"p = {row['p_value']:.2g}, n = {int(row['n'])} {row['unit']}s", fontsize=8)
    return image_html(save_figure(fig, out, name))


def order_note(order: pd.DataFrame, by: list[str]) -> str:
    """One sentence per option whose order effect is large (`stats.ORDER_EFFECT`): its mean p at each position."""
    if order.empty or not order["large"].any():
        return ""
    ordinal = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth"}
    lines = []
    group_columns = [c for c in by if c in order.columns]
    for key, part in order[order["large"]].groupby([*group_columns, "option_label"], sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        where = " · ".join(map(str, key[:-1]))
        shown = ", ".join(f"{r.mean_p:.2f} listed {ordinal.get(int(r.position), f'#{int(r.position)}')}"
                          for r in part.sort_values("position").itertuples())
        lines.append(f"<li>p({html.escape(str(key[-1]))}){' in ' + html.escape(where) if where else ''}: "
                     f"{shown}</li>")
    return (f"<p class='warning'><b>The option order matters</b> (a spread of {ORDER_EFFECT} or more between "
            f"positions): the means above average over the orders and hide it.</p><ul>{''.join(lines)}</ul>")


def reliability_figure(bins: pd.DataFrame, out: Path, name: str) -> str:
    """Accuracy against mean confidence per bin (size by count), with the diagonal."""
    bins = bins[bins["count"] > 0]
    if len(bins) < 1:
        return nothing_to_show("reliability diagram", "no stimulus with a gold option was scored")
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
    ax.scatter(bins["confidence"], bins["accuracy"], s=10 + 200 * bins["count"] / bins["count"].max())
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence (max p)")
    ax.set_ylabel("accuracy")
    return image_html(save_figure(fig, out, name))


def _section(tables: dict, key: tuple, n: int, by: list[str], contrast: tuple | None, out: Path,
             model_table) -> list[str]:
    model_key, method, setting = key
    parts = [section_title(model_key, model_table, f"{method} · {setting}")]
    means = _part(tables["means"], key)
    parts.append("<h3>Mean probability of each option per group (95% bootstrap interval over items)</h3>")
    parts.append(bars_figure(means, by, out, f"means_{n}.png"))
    parts.append(table_html(means.drop(columns=KEY)))
    order = _part(tables.get("order"), key)
    if not order.empty:
        parts.append("<h3>Option order: mean p per position in the prompt's list</h3>")
        parts.append(order_note(order, by))
        parts.append(table_html(order.drop(columns=KEY)))
    if contrast is not None and "contrast" in tables:
        column, a, b = contrast
        part = _part(tables["contrast"], key)
        parts.append(f"<h3>Paired contrast {html.escape(column)}: {html.escape(a)} - {html.escape(b)}</h3>")
        if not part.empty:
            items = _part(tables["_items"], key)
            for i, label in enumerate(sorted(part["option_label"].unique())):
                parts.append(contrast_figure(items, part, column, a, b, label, out, f"contrast_{n}_{i}.png"))
            parts.append(table_html(part.drop(columns=KEY)))
    spearman = _part(tables.get("spearman"), key)
    points = _part(tables.get("_points"), key)
    if not spearman.empty and not points.empty:
        numeric = [c for c in points.columns if c not in (*KEY, "option_label", "unit", "p")][-1]
        parts.append(f"<h3>p against {html.escape(numeric)}, per {html.escape(str(spearman['unit'].iloc[0]))} "
                     f"(Spearman's rho, 95% bootstrap interval over units)</h3>")
        groups = [g for g in by if g in points.columns]
        for i, row in enumerate(spearman.itertuples(index=False)):
            row = pd.Series(row._asdict())
            mask = points["option_label"] == row["option_label"]
            for g in groups:
                mask &= points[g] == row[g]
            parts.append(scatter_figure(points[mask], row, numeric, row["option_label"], out,
                                        f"spearman_{n}_{i}.png", " · ".join(str(row[g]) for g in groups)))
    for name in ("kl", "spearman", "calibration"):
        part = _part(tables.get(name), key)
        if not part.empty:
            parts.append(f"<h3>{name}</h3>" + table_html(part.drop(columns=KEY)))
    bins = _part(tables.get("_reliability"), key)
    if not bins.empty:
        parts.append("<h3>Reliability diagram (stimuli with a gold option)</h3>")
        parts.append(reliability_figure(bins, out, f"reliability_{n}.png"))
    return parts


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str, dataset: str, by: list[str],
                 contrast: tuple[str, str, str] | None = None, model_table: pd.DataFrame | None = None) -> Path:
    """Write out/index.html and its figures: one section per collection (model, method, setting) of `dataset`."""
    intro = (f"Dataset {html.escape(dataset)}; groups by {html.escape(', '.join(by) or '(none)')}. p is each "
             "option's probability renormalized over the options (invalid answers reported as invalid_mass), "
             "averaged per item, then over items; intervals are percentile bootstraps over items.")
    parts = start_page(out, f"Options of {dataset}", db, intro)
    means = tables["means"]
    for n, key in enumerate(means[KEY].drop_duplicates().itertuples(index=False, name=None)):
        parts += _section(tables, key, n, by, contrast, out, model_table)
    parts += gen_sections(tables.get("gen"), model_table)
    return write_page(out, f"biaslab options report: {dataset}", parts)


def gen_sections(gen: pd.DataFrame | None, model_table) -> list[str]:
    """One section per gen collection (model, sampling setting): the share of continuations whose first pronoun is
    of each family, per context and declared family, with 95% Wilson intervals (the `gen` table of
    `biaslab metrics options`)."""
    if gen is None or gen.empty:
        return []
    parts = []
    for (model_key, setting), part in gen.groupby(["model_key", "setting"], sort=True):
        parts.append(section_title(model_key, model_table, f"gen · {setting}"))
        parts.append("<h3>First pronoun of the continuations, per context and declared family (95% Wilson "
                     "interval over the continuations)</h3>")
        parts.append(table_html(part.drop(columns=[c for c in ("model_key", "method", "setting") if c in part])))
    return parts
