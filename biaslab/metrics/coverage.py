"""Coverage beside every score (issue 43, item 2): how many units a score rests on, of how many loaded, how many had
evidence but no valid value (invalid or unresolved answers, no scored token), how many have no evidence at all, and a
mark where that falls below a threshold, so no score is shown bare.

Columns added to a study's headline tables (`annotate`):
- n_loaded: units (templates, items, stimuli, root items) of the table's dataset loaded in the warehouse;
- n_used: units the score rests on (the table's own count column);
- n_invalid: units with evidence in that setting but no valid value (e.g. every answer invalid), n_evidence - n_used;
- n_missing: loaded units without any evidence in that setting, n_loaded - n_evidence;
- coverage = n_used / n_loaded;
- valid_share: where the table has one, the mean share of valid answers (1 - invalid or unresolved mass) of the
  units used;
- low_coverage: coverage < min_coverage, or valid_share < min_coverage.

And, where the table's intervals are over clusters (BBQ's templates, CrowS-Pairs' pairs, WinoPron's templates, a
study's items), `few_clusters`: the interval rests on fewer than `MIN_CLUSTERS` (10) clusters. A percentile bootstrap
over k clusters can only give values of resamples of those k, so with 3 templates its "95% interval" is about the
lowest to the highest template's value, and a t-interval's k - 1 degrees of freedom make it wide and its normality
assumption untestable: such an interval says little about another sample of the dataset, and is marked as a score
on low coverage is (a field in every table and JSON, a line under the tables, a note in the report).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEFAULT_MIN_COVERAGE", "COVERAGE_COLUMNS", "MIN_CLUSTERS", "annotate", "check_min_coverage",
           "few_clusters", "few_clusters_note", "low_coverage_note"]

#: the share below which a score is marked (`--min-coverage`)
DEFAULT_MIN_COVERAGE = 0.8
COVERAGE_COLUMNS = ["n_loaded", "n_used", "n_invalid", "n_missing", "coverage", "valid_share", "low_coverage"]
#: an interval over fewer clusters than this is marked `few_clusters`
MIN_CLUSTERS = 10


def check_min_coverage(value: float) -> float:
    """`value` when it is a share in [0, 1]; UsageError in one line otherwise."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"min_coverage must be a number between 0 and 1, got {value!r}") from None
    if not 0 <= share <= 1:
        raise UsageError(f"min_coverage must be between 0 and 1, got {value!r}")
    return share


def annotate(table: pd.DataFrame, *, used: str, loaded: pd.DataFrame | int, evidence: pd.DataFrame | None = None,
             keys: Sequence[str] = (), valid_share: str | pd.Series | None = None,
             min_coverage: float = DEFAULT_MIN_COVERAGE, clusters: str | None = None) -> pd.DataFrame:
    """`table` with COVERAGE_COLUMNS after its own (see the module docstring).

    Parameters
    ----------
    table : a study table with one score per row.
    used : its column counting the units each score rests on.
    loaded : units loaded, an int for every row or a frame of `keys` + n_loaded.
    evidence : units with evidence per row's `keys` + n_evidence (None: every loaded unit used or missing, no
        invalid count).
    keys : the columns joining `loaded` / `evidence` to the table.
    valid_share : the table's column (or a Series aligned with it) of the mean valid share of the units used.
    min_coverage : the threshold of `low_coverage`.
    clusters : the table's column counting the clusters its intervals are over; adds `few_clusters` (that count
        below MIN_CLUSTERS) after COVERAGE_COLUMNS.
    """
    import numpy as np
    import pandas as pd

    min_coverage = check_min_coverage(min_coverage)
    if table.empty:
        return table.reindex(columns=[*table.columns, *COVERAGE_COLUMNS, *(["few_clusters"] if clusters else [])])
    out = table.copy()
    keys = list(keys)
    if isinstance(loaded, pd.DataFrame):
        out = out.merge(loaded[[*keys, "n_loaded"]], on=keys, how="left") if keys else out.assign(
            n_loaded=int(loaded["n_loaded"].iloc[0]))
    else:
        out["n_loaded"] = int(loaded)
    used_count = pd.to_numeric(out[used], errors="coerce").fillna(0).astype("int64")
    out["n_used"] = used_count
    if evidence is not None:
        out = out.merge(evidence[[*keys, "n_evidence"]], on=keys, how="left")
        n_evidence = out.pop("n_evidence").fillna(0).astype("int64")
        out["n_invalid"] = (n_evidence - used_count).clip(lower=0)
        out["n_missing"] = (out["n_loaded"].fillna(0).astype("int64") - n_evidence).clip(lower=0)
    else:
        out["n_invalid"] = 0
        out["n_missing"] = (out["n_loaded"].fillna(0).astype("int64") - used_count).clip(lower=0)
    out["n_loaded"] = out["n_loaded"].fillna(0).astype("int64")
    with np.errstate(invalid="ignore", divide="ignore"):
        out["coverage"] = np.where(out["n_loaded"] > 0, used_count / out["n_loaded"].where(out["n_loaded"] > 0, 1),
                                   np.nan)
    if isinstance(valid_share, str):
        out["valid_share"] = pd.to_numeric(out[valid_share], errors="coerce").astype(float)
    elif valid_share is not None:
        out["valid_share"] = np.asarray(valid_share, dtype=float)
    else:
        out["valid_share"] = np.nan
    low = ~(out["coverage"] >= min_coverage)
    low |= out["valid_share"].notna() & (out["valid_share"] < min_coverage)
    out["low_coverage"] = low.astype(bool)
    if clusters is not None:
        out["few_clusters"] = few_clusters(out[clusters])
    out.attrs.update(table.attrs)
    out.attrs["min_coverage"] = min_coverage
    return out


def low_coverage_note(tables: dict[str, pd.DataFrame], min_coverage: float) -> str | None:
    """One line naming the tables with marked rows, or None."""
    marked = {name: int(t["low_coverage"].sum()) for name, t in tables.items()
              if not name.startswith("_") and "low_coverage" in t.columns and t["low_coverage"].any()}
    if not marked:
        return None
    listed = ", ".join(f"{name} ({n} row{'s' if n != 1 else ''})" for name, n in marked.items())
    return (f"low coverage (fewer than {min_coverage:.0%} of the loaded units used, or a valid share below it): "
            f"{listed}")


def few_clusters(counts) -> pd.Series:
    """Whether an interval over `counts` clusters rests on fewer than MIN_CLUSTERS (a count of 0 or none: True)."""
    import pandas as pd

    n = pd.to_numeric(pd.Series(counts), errors="coerce").fillna(0)
    return (n < MIN_CLUSTERS).astype(bool).set_axis(getattr(counts, "index", n.index))


def few_clusters_note(tables: dict[str, pd.DataFrame]) -> str | None:
    """One line naming the tables with rows whose intervals rest on fewer than MIN_CLUSTERS clusters, or None."""
    marked = {name: int(t["few_clusters"].fillna(False).astype(bool).sum()) for name, t in tables.items()
              if not name.startswith("_") and "few_clusters" in t.columns}
    marked = {name: n for name, n in marked.items() if n}
    if not marked:
        return None
    listed = ", ".join(f"{name} ({n} row{'s' if n != 1 else ''})" for name, n in marked.items())
    return (f"few clusters (an interval over fewer than {MIN_CLUSTERS} templates, pairs or items: about the range "
            f"of their values, not a confidence interval for the dataset): {listed}")
