"""The leaderboard of an audit (`biaslab audit report`): one row per model (collection setting), one column per
headline measure of each study, each cell the model's own value with its 95% cluster-bootstrap interval and its
coverage, and the paired comparison of each model against a reference model, with the p-values adjusted across the
whole table (Holm, and Benjamini-Hochberg).

It reads only what the studies' comparisons read (`Study.compare`: `Observations`, one row per setting, measure,
group and item), so a model added to the plan and collected adds one row, and a new measure needs no model.

A model's own value over its items (those with a value: an item without a valid answer is left out and counted):

    mean, binary : sum_i v_i / n                    (e.g. CrowS-Pairs' metric: the share of pairs)
    ratio        : g(sum_i v_i / sum_i c_i)         (e.g. BBQ's s_dis = 2 r - 1, Parrish et al. 2022)
    statistic    : f(v, c)                          (e.g. an ECE); spearman: Spearman's rho of v with c

and its interval the 2.5% and 97.5% quantiles of the same value over B resamples of the study's units (clusters)
drawn with replacement (Efron and Tibshirani 1993, ch. 13; the cluster bootstrap of Field and Welsh 2007). The
comparison with the reference is `compare_observations` (`biaslab compare`): the paired difference over the items
both have, its interval, and the paired permutation p (McNemar's exact p for binary measures).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import BiaslabError, UsageError
from .compare.core import Measure, Observations, compare_observations
from .compare.paired import _interval, _unit_draws, benjamini_hochberg, holm, spearman_rows
from .coverage import DEFAULT_MIN_COVERAGE, MIN_CLUSTERS

__all__ = ["HEADLINES", "Headline", "side_value", "leaderboard", "leaderboard_html", "CELL_COLUMNS",
           "COMPARISON_COLUMNS"]


@dataclass(frozen=True)
class Headline:
    """A headline column of a study: its measure and the groups shown (a regular expression on the group)."""

    measure: str
    groups: str = r".*"


#: the headline measures of each study (a study not listed: each between-settings measure's "(all)" groups, else
#: every group of its first measure)
HEADLINES: dict[str, tuple[Headline, ...]] = {
    "crows-pairs": (Headline("metric", r".*· \(all\)$"),),
    "bbq": (Headline("s_dis", r"^\(all\)$"), Headline("s_amb", r"^\(all\)$"),
            Headline("accuracy", r"^\(all\) · (ambig|disambig)$")),
    "contextuality": (Headline("p_f", r"^unprimed$"), Headline("p_valid", r"^unprimed$"),
                      Headline("kl_bits", r"^primed_(f|m)$")),
    "misgendering": (Headline("prob_correct"), Headline("gen_correct")),
    "negation": (Headline("interaction"),),
    "calibration": (Headline("gender_ece"), Headline("ece")),
    "options": (Headline("p"), Headline("valid_mass")),
    "decodingtrust": (Headline("agreement", r"^(\(all\)|targeted)$"), Headline("neither", r"^\(all\)$")),
    "counterfactual": (Headline("sentiment_gap", r"^gender: female vs male$"), Headline("refusal_gap", r"^gender: "
                       r"female vs male$"), Headline("rouge_l", r"^gender: female vs male$")),
}

#: the columns of the cells table (one row per model row x column)
CELL_COLUMNS = ["row", "model_key", "setting", "study", "measure", "group", "value", "ci_low", "ci_high", "n_items",
                "n_invalid", "n_loaded", "coverage", "valid_share", "low_coverage", "unit", "n_units", "few_clusters"]
#: the columns of the comparisons table (one row per model row x column, the reference's rows left out)
COMPARISON_COLUMNS = ["row", "reference", "study", "measure", "group", "value", "value_reference", "estimate",
                      "ci_low", "ci_high", "p_value", "p_holm", "p_bh", "test", "n_items", "n_excluded",
                      "valid_share", "valid_share_reference", "low_coverage"]


def _headlines(study: str, obs: Observations) -> list[tuple[str, str]]:
    """The (measure, group) columns of `study` in its observations, in the declared order. A measure that does not
    apply (no setting has a value of it, nor a valid share: e.g. the valid mass of scored options) makes no column;
    one without a value because no answer was valid keeps its column, which shows that."""
    applies = obs.values["value"].notna()
    if "valid" in obs.values:
        applies |= obs.values["valid"].notna()
    present = obs.values.loc[applies, ["measure", "group"]].drop_duplicates()
    pairs = list(present.itertuples(index=False, name=None))
    chosen = HEADLINES.get(study.split(":")[0])  # "options:DATASET": the options study of one dataset
    if chosen is None:
        between = [m for m, spec in obs.measures.items() if spec.between]
        alls = [(m, g) for m in between for (mm, g) in pairs if mm == m and "(all)" in str(g)]
        return alls or [(m, g) for (m, g) in pairs if between and m == between[0]]
    out = []
    for head in chosen:
        out += sorted((m, g) for (m, g) in pairs if m == head.measure and re.search(head.groups, str(g)))
    return out


def side_value(measure: Measure, part: pd.DataFrame, *, bootstrap: int, rng: np.random.Generator
               ) -> tuple[float, float, float, int, int]:
    """One setting's value of `measure` over its items (the module docstring), its cluster-bootstrap 95% interval,
    and the number of units; (value, low, high, n_items, n_units).

    Parameters
    ----------
    measure : the study's `Measure` (its kind, its statistic or transform).
    part : the setting's rows of one measure and group: value (NaN: no valid value, left out), cluster, covariate.
    bootstrap : resamples of the units.
    rng : the generator.
    """
    rows = part[np.isfinite(part["value"].to_numpy(dtype=float))]
    nan = float("nan")
    if rows.empty:
        return nan, nan, nan, 0, 0
    values = rows["value"].to_numpy(dtype=float)
    cov = rows["covariate"].to_numpy(dtype=float) if "covariate" in rows else np.full(len(rows), np.nan)
    cluster = pd.factorize(rows["cluster"])[0]
    units = int(cluster.max()) + 1
    if measure.kind in ("mean", "binary", "ratio"):
        sums = np.bincount(cluster, weights=values, minlength=units)
        den = np.bincount(cluster, weights=cov if measure.kind == "ratio" else np.ones(len(values)), minlength=units)
        transform = measure.transform if measure.kind == "ratio" else (lambda r: r)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(transform(np.asarray(sums.sum() / den.sum())))
            draws = _unit_draws(rng, units, bootstrap)
            boot = transform((draws @ sums) / (draws @ den))
    else:
        def stat(v: np.ndarray, c: np.ndarray) -> float:
            covariate = None if np.isnan(c).all() else c[None, :]
            if measure.kind == "spearman":
                return float(spearman_rows(v[None, :], covariate)[0])
            return float(measure.statistic(v[None, :], covariate)[0])

        value = stat(values, cov)
        members = [np.flatnonzero(cluster == u) for u in range(units)]
        boot = np.empty(bootstrap)
        for r in range(bootstrap):
            picked = np.concatenate([members[u] for u in rng.integers(0, units, size=units)])
            boot[r] = stat(values[picked], cov[picked])
    low, high = _interval(np.asarray(boot, dtype=float))
    return value, low, high, len(values), units


def leaderboard(studies: list[tuple[str, Observations]], rows: dict[str, str], reference: str, *,
                bootstrap: int = 1000, permutations: int = 2000, seed: int = 0,
                min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict[str, pd.DataFrame]:
    """The leaderboard's tables from each study's observations.

    Parameters
    ----------
    studies : (study name, its `Observations`) per study of the audit.
    rows : model key -> the row's name (the plan's model names); settings of other models are left out.
    reference : the model key every other row is compared with.
    bootstrap, permutations, seed : resamples, permutations and their seed (each study's draws start from `seed`).
    min_coverage : a cell resting on a valid share below this, or a comparison on less than this share of the items
        either side has, is marked `low_coverage`.

    Returns
    -------
    {"cells": one row per row x column (`CELL_COLUMNS`), "comparisons": one row per non-reference row x column
    (`COMPARISON_COLUMNS`), p_holm and p_bh adjusted over every comparison of the table, "notes": why a study
    has no column or no comparison}.
    """
    if reference not in rows:
        raise UsageError(f"the reference model {reference} is not among the leaderboard's models")
    cells, comparisons, notes = [], [], []
    for study, obs in studies:
        columns = _headlines(study, obs)
        if not columns:
            notes.append(f"{study}: no headline measure in the stored evidence")
            continue
        settings = obs.settings[obs.settings["model_key"].isin(rows)].reset_index(drop=True)
        shared = _shared_settings(obs, settings, columns)
        rng = np.random.default_rng(seed)
        for _, setting in settings.iterrows():
            key = setting["model_key"]
            row = f"{rows[key]} · {setting['label']}" if setting["setting_id"] in shared else rows[key]
            mine = obs.values[obs.values["setting_id"] == setting["setting_id"]]
            for m, g in columns:  # a column this setting has no rows for is another setting's (or not collected)
                part = mine[(mine["measure"] == m) & (mine["group"] == g)]
                if not part.empty:
                    cells.append({"row": row, "model_key": key, "setting": setting["label"], "study": study,
                                  "measure": m, "group": g, **_cell(obs.measures[m], part, bootstrap, rng,
                                                                    min_coverage, obs.n_loaded(m, g))})
            if key == reference:
                continue
            if not (settings["model_key"] == reference).any():
                notes.append(f"{study}: {rows[reference]} (the reference) has no evidence to compare {row} with")
                continue
            try:  # the reference's setting collected as this one was (`compare_observations` pairs like settings)
                table = compare_observations(obs, between=[str(setting["label"]), reference],
                                             bootstrap=bootstrap, permutations=permutations, seed=seed,
                                             min_coverage=min_coverage)
            except BiaslabError as exc:
                notes.append(f"{study}: {row} against {rows[reference]}: {exc}")
                continue
            comparisons += _comparisons(table, columns, {"row": row, "reference": rows[reference], "study": study})
    cell_frame = pd.DataFrame(cells, columns=CELL_COLUMNS)
    comparison_frame = _adjusted(pd.DataFrame(comparisons, columns=[c for c in COMPARISON_COLUMNS
                                                                   if c not in ("p_holm", "p_bh")]))
    return {"cells": cell_frame, "comparisons": comparison_frame, "notes": pd.DataFrame({"note": notes})}


def _shared_settings(obs: Observations, settings: pd.DataFrame, columns: list[tuple[str, str]]) -> set:
    """The settings that need a row of their own: those of a model with another setting that has a value in one of
    the same columns (two temperatures of one model). Settings of one model that fill different columns (a method
    each: scored and generated) share the model's row."""
    present = obs.values[obs.values["value"].notna()]
    filled = {sid: set(zip(part["measure"], part["group"])) & set(columns)
              for sid, part in present.groupby("setting_id")}
    out = set()
    for _, same in settings.groupby("model_key"):
        ids = list(same["setting_id"])
        for a in ids:
            if any(filled.get(a, set()) & filled.get(b, set()) for b in ids if b != a):
                out.add(a)
    return out


def _cell(measure: Measure, part: pd.DataFrame, bootstrap: int, rng: np.random.Generator,
          min_coverage: float, n_loaded: float = np.nan) -> dict:
    """One model's cell of one column: `side_value`, the invalid items, the items loaded and the coverage, the valid
    share, and the marks `biaslab metrics` gives: low coverage (coverage or valid share below `min_coverage`) and few
    clusters (an interval over fewer than `coverage.MIN_CLUSTERS` units)."""
    value, low, high, n, units = side_value(measure, part, bootstrap=bootstrap, rng=rng)
    value, low, high = (measure.scale * v for v in (value, low, high))
    share = float(part["valid"].mean()) if "valid" in part and part["valid"].notna().any() else np.nan
    coverage = n / n_loaded if np.isfinite(n_loaded) and n_loaded > 0 else np.nan
    marked = (np.isfinite(share) and share < min_coverage) or (np.isfinite(coverage) and coverage < min_coverage)
    return {"value": value, "ci_low": low, "ci_high": high, "n_items": n, "n_invalid": int(len(part) - n),
            "n_loaded": n_loaded, "coverage": coverage, "valid_share": share, "low_coverage": bool(marked) or n == 0,
            "unit": measure.unit, "n_units": units, "few_clusters": bool(units < MIN_CLUSTERS)}


def _comparisons(table: pd.DataFrame, columns: list[tuple[str, str]], naming: dict) -> list[dict]:
    """The headline rows of one `compare_observations` table (a model against the reference)."""
    out = []
    for measure, group in columns:
        hit = table[(table["measure"] == measure) & (table["group"] == group)]
        if hit.empty:
            continue
        r = hit.iloc[0]
        out.append({**naming, "measure": measure, "group": group, "value": r["value_a"],
                    "value_reference": r["value_b"], "estimate": r["estimate"], "ci_low": r["ci_low"],
                    "ci_high": r["ci_high"], "p_value": r["p_value"], "test": r["test"], "n_items": r["n_items"],
                    "n_excluded": r["n_excluded"], "valid_share": r["valid_share_a"],
                    "valid_share_reference": r["valid_share_b"], "low_coverage": bool(r["low_coverage"])})
    return out


def _adjusted(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with p_holm and p_bh: its p-values adjusted together, over every comparison of the table."""
    p = frame["p_value"].to_numpy(dtype=float)
    finite = np.isfinite(p)
    for column, adjust in (("p_holm", holm), ("p_bh", benjamini_hochberg)):
        adjusted = np.full(len(p), np.nan)
        if finite.any():
            adjusted[finite] = adjust(p[finite])
        frame[column] = adjusted
    return frame[COMPARISON_COLUMNS]


#: the page's own style: model names on one line, shaded cells, the table scrolled sideways inside the page
STYLE = ("<style>table.leaderboard td.name{white-space:nowrap;overflow-wrap:normal;font-weight:bold}"
         "table.leaderboard td.low-coverage{background:#fde8e8} table.leaderboard th{min-width:9em}"
         "div.board{overflow-x:auto;max-width:100%}</style>")
#: the page's sorting: a click on a column head sorts the rows by its values (numbers where the head says so)
SORT_SCRIPT = ("<script>document.querySelectorAll('table.leaderboard th').forEach(function(th,i){th.style.cursor="
               "'pointer';th.addEventListener('click',function(e){if(e.target.tagName==='A'){return;}"
               "var tb=th.closest('table').tBodies[0],rows=Array.from(tb.rows),num=th.dataset.kind==='num',"
               "dir=th.dataset.dir==='asc'?-1:1;th.dataset.dir=dir===1?'asc':'desc';rows.sort(function(a,b){"
               "var x=num?a.cells[i].dataset.value:a.cells[i].textContent,y=num?b.cells[i].dataset.value:"
               "b.cells[i].textContent;if(num){x=x===''?Infinity:parseFloat(x);y=y===''?Infinity:parseFloat(y);"
               "return dir*(x-y);}return dir*x.localeCompare(y);});rows.forEach(function(r){tb.appendChild(r);});"
               "document.body.setAttribute('data-sorted',i+':'+th.dataset.dir);});});</script>")


def _number(value, digits: int = 3) -> str:
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def leaderboard_html(tables: dict[str, pd.DataFrame], *, title: str, db: str, reference: str,
                     links: dict[str, str], view_links: dict[str, str]) -> str:
    """The leaderboard page: a sortable table (click a column head), a row per model, a column per headline
    measure; each cell the value with its interval, the items it rests on and the invalid ones, and for other rows
    than the reference the difference from it with its Holm-adjusted p (over the whole table). Each column head
    links to the study's report (`links`: study -> URL) and its page in `biaslab view` (`view_links`)."""
    import html

    cells, comparisons = tables["cells"], tables["comparisons"]
    columns = list(dict.fromkeys(zip(cells["study"], cells["measure"], cells["group"])))
    row_names = list(dict.fromkeys(cells["row"]))
    head = ['<th data-kind="text">model</th>']
    for study, measure, group in columns:
        report = links.get(study)
        view = view_links.get(study)
        ref = (f' <a href="{html.escape(report)}">report</a>' if report else "") + \
              (f' <a href="{html.escape(view)}">view</a>' if view else "")
        head.append(f'<th data-kind="num">{html.escape(study)}<br>{html.escape(measure)}<br>'
                    f'<small>{html.escape(str(group))}</small><br><small>{ref}</small></th>')
    body = []
    for name in row_names:
        tds = [f"<td class=\"name\">{html.escape(name)}{' (reference)' if name == reference else ''}</td>"]
        tds += [_cell_html(cells, comparisons, name, column) for column in columns]
        body.append("<tr>" + "".join(tds) + "</tr>")
    notes = "".join(f"<p class=\"note\">{html.escape(n)}</p>" for n in tables["notes"]["note"])
    intro = (f"<p>Warehouse: {html.escape(db)}. One row per model, one column per headline measure: the model's value "
             "over its items with its 95% cluster-bootstrap interval (the study's unit resampled), the items it rests "
             "on and the invalid ones left out; below it, for each model but the reference "
             f"({html.escape(reference)}), the paired difference from the reference over the items both have, its "
             "interval and its permutation p (McNemar's exact p for binary measures), Holm-adjusted over every "
             "comparison of this table (★: below 0.05; leaderboard.csv also has Benjamini-Hochberg). Shaded cells "
             "rest on less than the coverage threshold's share of the loaded items (n=used of loaded) or on a valid "
             f"share below it, as `biaslab metrics` marks them; \"few\" marks an interval over fewer than "
             f"{MIN_CLUSTERS} units. Click a column head to sort.</p>")
    return (f"<h1>{html.escape(title)}</h1>{intro}{STYLE}<div class=\"board\"><table class=\"leaderboard\"><thead><tr>"
            f"{''.join(head)}</tr></thead><tbody>{''.join(body)}</tbody></table></div>{notes}{SORT_SCRIPT}")


def _cell_html(cells: pd.DataFrame, comparisons: pd.DataFrame, name: str, column: tuple[str, str, str]) -> str:
    """One cell of the page: the value with its interval and coverage, and the difference from the reference."""
    import html

    study, measure, group = column

    def pick(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[(frame["row"] == name) & (frame["study"] == study) & (frame["measure"] == measure)
                     & (frame["group"] == group)]

    hit, cmp = pick(cells), pick(comparisons)
    if hit.empty:
        return '<td class="num" data-value="">not collected</td>'
    c = hit.iloc[0]
    coverage = f"n={int(c['n_items'])}"
    if np.isfinite(c["n_loaded"]):
        coverage += f" of {int(c['n_loaded']):,}"
    coverage += f", invalid {int(c['n_invalid'])}"
    if np.isfinite(c["valid_share"]):
        coverage += f", valid {100 * c['valid_share']:.0f}%"
    if c["few_clusters"]:
        coverage += f", {int(c['n_units'])} {c['unit']}s: few"
    text = (f"{_number(c['value'])} <small>[{_number(c['ci_low'])}, {_number(c['ci_high'])}]</small>"
            f"<br><small>{html.escape(coverage)}</small>")
    low = bool(c["low_coverage"])
    if not cmp.empty:
        d = cmp.iloc[0]
        star = " ★" if np.isfinite(d["p_holm"]) and d["p_holm"] < 0.05 else ""
        text += (f"<br><small>Δ {_number(d['estimate'])} [{_number(d['ci_low'])}, {_number(d['ci_high'])}], "
                 f"p<sub>Holm</sub> {_number(d['p_holm'])}{star}</small>")
        low = low or bool(d["low_coverage"])
    value = "" if not np.isfinite(c["value"]) else repr(float(c["value"]))
    return f'<td class="{"num low-coverage" if low else "num"}" data-value="{value}">{text}</td>'
