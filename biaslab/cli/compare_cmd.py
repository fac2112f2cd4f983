"""`biaslab compare STUDY`: is setting A more biased than setting B (or context X than context Y), by how much, and
is it real? Paired tests over the items both have (`biaslab.metrics.studies.compare`)."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap

from typing import TYPE_CHECKING

import click

from ..metrics.coverage import DEFAULT_MIN_COVERAGE
from .common import db_option, format_option

if TYPE_CHECKING:
    import pandas as pd

#: what the terminal table shows, and the header it shows it under
SHOWN = {"measure": "measure", "group": "group", "value_a": "A", "value_b": "B",
         "estimate": "A - B", "ci_low": "CI low", "ci_high": "CI high", "p_value": "p", "p_holm": "p Holm",
         "p_bh": "p BH", "effect_size": "effect",
         "n_items": "n", "n_excluded": "left out", "valid": "valid A / B", "mark": "mark"}


def _studies_with_comparisons() -> list[str]:
    from ..metrics.registry import studies

    return [n for n, s in studies().items() if s.compare is not None]


def _share(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"  # NaN: the study gives no valid share


def _mark(row, min_coverage: float) -> str:
    """Why a row is marked: too few items paired, a side's valid share below the threshold, an interval over fewer
    than `coverage.MIN_CLUSTERS` units, or several of those."""
    from ..metrics.coverage import MIN_CLUSTERS

    why = []
    if row["low_coverage"]:
        why = ["low coverage"] if not row["coverage"] >= min_coverage else []
        if any(share < min_coverage for share in (row["valid_share_a"], row["valid_share_b"])):
            why.append("low valid share")
        why = why or ["low coverage"]
    if row["n_units"] == row["n_units"] and row["n_units"] < MIN_CLUSTERS:
        why.append(f"few units ({int(row['n_units'])})")
    return ", ".join(why)


def display_frame(table: pd.DataFrame, within: bool, min_coverage: float = DEFAULT_MIN_COVERAGE) -> pd.DataFrame:
    """The terminal view of a comparison table: one section per pair of settings (or setting), the columns of
    SHOWN (the valid shares where the study has them), and `mark` where the row rests on too few items ("low
    coverage") or on too few valid answers on a side ("low valid share")."""
    import numpy as np
    import pandas as pd

    out = pd.DataFrame({"setting": (table["setting_a"] if within else
                                    "A = " + table["setting_a"] + " · B = " + table["setting_b"])})
    shares = table[["valid_share_a", "valid_share_b"]].to_numpy(float)
    for column in SHOWN:
        if column == "mark":
            out["mark"] = [_mark(row, min_coverage) for _, row in table.iterrows()]
        elif column == "valid":
            if np.isfinite(shares).any():
                out["valid"] = [f"{_share(a)} / {_share(b)}" for a, b in shares]
        else:
            out[column] = table[column]
    if within:
        out["group"] = table["group"].str.replace(" vs ", " - ", regex=False)
    out["note"] = [f"{m} {g}: {n}" if n else "" for m, g, n in zip(table["measure"], table["group"], table["note"])]
    return out.rename(columns=SHOWN)


def legend(table: pd.DataFrame, within: bool, min_coverage: float) -> list[str]:
    """The lines under the table: what A and B are, the tests, the family of the adjustments, the unit."""
    kinds = sorted(set(table["effect_kind"]))
    units = ", ".join(f"{m}: {u}" for m, u in dict(zip(table["measure"], table["unit"])).items())
    sides = ("A and B are the two conditions of the group, in the same setting" if within else
             "A and B are the two settings; A - B over the items both have")
    return [sides + ".",
            "p: paired permutation test (units' labels swapped), McNemar's exact test for binary measures; "
            "p Holm / p BH: adjusted over the rows of one section; CI: 95% cluster-bootstrap interval over the unit.",
            f"unit per measure: {units}.",
            f"effect: {', '.join(kinds)} (d_z = mean difference / sd of differences; cohen_q = atanh(rho_A) - "
            "atanh(rho_B); cohen_g = n10 / (n10 + n01) - 1/2).",
            f"mark: low coverage = fewer than {min_coverage:.0%} of the items either side has are paired; low "
            f"valid share = a side's mean share of valid answers over its items is below {min_coverage:.0%} (as "
            "`biaslab metrics` marks a score); few units = the interval and test rest on fewer than 10 units "
            "(templates, pairs, names)."]


@click.command("compare")
@click.argument("study", metavar="STUDY")
@db_option
@format_option
@click.option("--between", nargs=2, default=None, metavar="A B",
              help="Two collection settings: model names or labels as this command prints them, or unique "
                   "model-key prefixes (default: every pair of settings stored).")
@click.option("--within", is_flag=True,
              help="Compare the study's conditions inside each setting instead (contextuality: each context "
                   "against unprimed, primed_f against primed_m, option order MF against FM; options: each two "
                   "values of the first --by column).")
@click.option("--bootstrap", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Cluster-bootstrap resamples of the study's unit (the 95% interval). More than the 1000 of "
                   "`biaslab metrics`: a paired difference is often near 0 and its interval's ends, its 2.5% and "
                   "97.5% quantiles, take more resamples to settle to the shown digits.")
@click.option("--permutations", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Permutations of the paired permutation test (exact enumeration when the units allow fewer).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the permutations.")
@click.option("--dataset", default=None,
              help="options: the dataset whose options are compared (required); calibration: only this dataset.")
@click.option("--by", "by", multiple=True, metavar="COL",
              help="compare options: group by this stimuli column or attrs key (repeatable); --within compares "
                   "the values of the first one.")
@click.option("--unit", default=None, metavar="COL",
              help="compare options: the study's unit, a stimuli column or attrs key holding whole items (default: "
                   "the spec's `unit:`, else the item); the bootstrap and the permutations resample it.")
@click.option("--min-coverage", type=click.FloatRange(0, 1), default=DEFAULT_MIN_COVERAGE, show_default=True,
              help="Mark rows resting on less than this share of the items either side has, or on a valid share "
                   "below it on either side.")
def compare_command(study: str, db: str, fmt: str, between: tuple[str, str] | None, within: bool, bootstrap: int,
                    permutations: int, seed: int, dataset: str | None, by: tuple[str, ...], unit: str | None,
                    min_coverage: float) -> None:
    """Paired comparisons of a STUDY's headline measures between two collection settings (two models, or one model
    under two dtypes, backends or sampler settings), or with --within between the study's conditions.

    Per measure and group: each side's value, the paired difference A - B over the items both sides have, its 95%
    cluster-bootstrap interval (resampling the study's unit, e.g. the template), a paired permutation p (McNemar's
    exact p for binary outcomes), Holm and Benjamini-Hochberg adjusted p over the rows of one pair of settings, an
    effect size, the items used and the items left out (named below the table). Reads only; writes nothing.
    Studies with comparisons: contextuality (p(f), validity, KL, Spearman, CbD per context); misgendering (prob and
    gen correctness, their agreement); negation (the context x form interaction, the main effects, perplexity per
    condition); calibration (ECE, Gender-ECE, Brier, p(male) per dataset); bbq (accuracy, s_DIS and s_AMB per
    category and context condition, over templates); crows-pairs (the paper's metric and pct_stereotype in percent,
    likelihood_diff, per bias type, over pairs); decodingtrust (agreement and the share neither per condition, over
    statement templates; --within pairs the conditions); holistic-bias (log perplexity and its spread from the
    axis's other descriptors per axis, sentence by sentence, over descriptors); counterfactual (sentiment, refusal
    and length gaps and ROUGE-L / BLEU similarity per attribute and pair of groups, over prompts); options (any
    dataset with options: per-option p, valid mass, and accuracy, Brier and ECE where a gold option exists; the unit
    is the spec's `unit:` or --unit, else the item).
    """
    from ..errors import UsageError
    from ..metrics.compare.core import valid_share_gap
    from ..metrics.studies import compare
    from ..warehouse.handle import open_warehouse

    if study not in _studies_with_comparisons():
        raise UsageError(f"study {study!r} has no comparisons; studies with comparisons: "
                         f"{', '.join(_studies_with_comparisons())}")
    options = {k: v for k, v in (("dataset", dataset), ("by", list(by)), ("unit", unit)) if v}
    with open_warehouse(db) as handle:
        table = compare(handle, study, between=list(between) if between else None, within=within,
                        bootstrap=bootstrap, permutations=permutations, seed=seed, min_coverage=min_coverage,
                        **options)
    if fmt == "json":
        from ..metrics.results import records

        click.echo(json.dumps(records(table), indent=1, allow_nan=False))
        return
    if fmt == "csv":
        table.to_csv(sys.stdout, index=False)
        return
    width = shutil.get_terminal_size((120, 24)).columns
    shown = display_frame(table, within, min_coverage)
    notes = [n for n in dict.fromkeys(shown.pop("note")) if n]
    gap = valid_share_gap(table)
    if gap:
        notes.insert(0, gap)
    title = f"{study}: {'conditions within each setting' if within else 'paired differences between settings'}"
    from .frames import print_frame

    print_frame(title, shown, width=width, out=sys.stdout)
    for text in [*notes, *legend(table, within, min_coverage)]:
        click.echo(textwrap.fill(text, width=width, subsequent_indent="    ", break_on_hyphens=False))

