"""`biaslab compare`: paired comparisons between collection settings, or between conditions within one, over the
items both sides have (statistics in `paired`).

A study declares what can be compared by returning `Observations` (its `Study.compare` function): one row per
(setting, measure, group, item) with the item's value, its unit (cluster) and an optional covariate; the measures
(`Measure`: kind, unit, item) and the condition pairs of `--within`. `compare_observations` aligns the items, runs
the test of each measure's kind and adjusts the p-values over the family (every row of one pair of settings, or of
one setting under --within).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import NoEvidence, UsageError
from ..coverage import DEFAULT_MIN_COVERAGE, check_min_coverage
from .paired import (Paired, Statistic, benjamini_hochberg, binary_difference, holm, mean_difference,
                     ratio_difference, spearman_rows, statistic_difference)

__all__ = ["Measure", "Observations", "COLUMNS", "compare_observations", "setting_labels", "with_settings",
           "resolve_settings", "valid_share", "valid_share_gap", "VALID_SHARE_FACTOR", "DEFAULT_MIN_COVERAGE"]


KINDS = ("mean", "binary", "spearman", "statistic", "ratio")

#: the columns of a comparison table, in order
COLUMNS = ["study", "measure", "group", "setting_a", "setting_b", "value_a", "value_b", "estimate", "ci_low",
           "ci_high", "p_value", "p_holm", "p_bh", "test", "effect_size", "effect_kind", "n_items", "n_excluded",
           "coverage", "valid_share_a", "valid_share_b", "low_coverage", "unit", "n_units", "model_key_a",
           "model_key_b", "note"]
#: two settings whose valid shares differ by more than this factor on a row are named in one line under the table
VALID_SHARE_FACTOR = 2.0

#: how many excluded item ids a note names
NAMED_ITEMS = 5


@dataclass(frozen=True)
class Measure:
    """One measure a study offers for comparison.

    name : the measure's name (e.g. "p_f").
    kind : "mean" (mean over items: paired difference, permutation p, d_z), "binary" (0/1 per item: difference of
        proportions, McNemar's exact p, Cohen's g), "spearman" (rho with the covariate: Cohen's q), "statistic"
        (any `statistic`, vectorized over rows) or "ratio" (`transform` of sum(value) / sum(covariate), each side
        with its own covariate: `paired.ratio_difference`).
    item : what one paired observation is (e.g. "template").
    unit : what the bootstrap and the permutation resample (e.g. "template", "name").
    statistic : for kind "statistic": f(values (R, n), covariate (R, n) or None) -> (R,).
    transform : for kind "ratio": g, vectorized, applied to sum(value) / sum(covariate).
    between : compared between settings (False: only in --within pairs).
    description : one line for the docs and the report.
    scale : what values, differences and intervals are multiplied by when shown, so that a measure has one scale
        in `metrics`, `compare` and the leaderboard (100: CrowS-Pairs' shares of pairs in percent, as the paper and
        `biaslab metrics crows-pairs` give them); tests and effect sizes are unchanged.
    """

    name: str
    kind: str
    item: str
    unit: str
    statistic: Statistic | None = None
    between: bool = True
    transform: Callable[[np.ndarray], np.ndarray] | None = None
    description: str = ""
    scale: float = 1.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise UsageError(f"measure {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "statistic" and self.statistic is None:
            raise UsageError(f"measure {self.name!r}: kind 'statistic' needs a statistic function")
        if self.kind == "ratio" and self.transform is None:
            raise UsageError(f"measure {self.name!r}: kind 'ratio' needs a transform")


@dataclass
class Observations:
    """What a study offers `biaslab compare`.

    values : one row per (setting_id, measure, group, item): value (NaN where the item has no valid value in that
        setting, e.g. no valid answer), cluster (the item's unit), covariate (NaN where the measure has none) and,
        optionally, valid (the item's share of valid answers in that setting, in [0, 1]; NaN or absent where the
        evidence has no invalid answers, e.g. scored sentences): a side's valid share is its mean over the side's
        items (`valid_share`).
    settings : one row per setting: setting_id (its id in `values`), label (what people read and type), model_key,
        and the columns that tell settings apart.
    measures : the `Measure`s by name.
    within : (measure, group_a, group_b) condition pairs compared inside each setting.
    within_note : why there are none, when `within` is empty (said in one line by --within).
    loaded : the items loaded per measure and group (columns measure, group, n_loaded; group None: every group of
        the measure), so that a value shows what it covers (`n_loaded`, `coverage`) as `biaslab metrics` does; None
        where the study does not say.
    """

    study: str
    values: pd.DataFrame
    settings: pd.DataFrame
    measures: dict[str, Measure]
    within: list[tuple[str, str, str]] = field(default_factory=list)
    within_note: str = ""
    loaded: pd.DataFrame | None = None

    def n_loaded(self, measure: str, group: str) -> float:
        """The items loaded for (measure, group) (`loaded`), NaN where not known."""
        if self.loaded is None or self.loaded.empty:
            return float("nan")
        rows = self.loaded[(self.loaded["measure"] == measure)
                           & (self.loaded["group"].isna() | (self.loaded["group"] == group))]
        return float(rows["n_loaded"].iloc[0]) if len(rows) else float("nan")


def setting_labels(frame: pd.DataFrame, columns: Sequence[str], model_table: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct combination of `columns` (the first being model_key): `setting` (an id), `label` (the
    model's name; with dtype and backend when two settings share a name; with the other columns' values when those
    still tie), model_key, model_name and the columns.

    Parameters
    ----------
    frame : rows with the setting columns.
    columns : model_key first, then what else tells two collections apart (mode, temperature, ...).
    model_table : `handle.models()`.
    """
    from ...warehouse.catalog import model_names_of

    distinct = frame[list(columns)].drop_duplicates().sort_values(list(columns), kind="stable").reset_index(drop=True)
    names = model_names_of(distinct["model_key"], model_table)
    distinct.insert(0, "model_name", names["model_name"].astype(str))
    distinct["dtype"], distinct["backend"] = names["dtype"], names["backend"]
    label = distinct["model_name"].copy()
    tied = label.duplicated(keep=False)
    if tied.any():
        label[tied] = (label[tied] + " · " + distinct.loc[tied, "dtype"].fillna("dtype ?").astype(str) + " · "
                       + distinct.loc[tied, "backend"].astype(str))
    rest = [c for c in columns if c != "model_key"]
    tied = label.duplicated(keep=False)
    if tied.any() and rest:  # each tied group named by the columns that differ within it
        for _, index in label[tied].groupby(label[tied]).groups.items():
            group = distinct.loc[index, rest]
            varying = [c for c in rest if group[c].astype(str).nunique() > 1]
            extra = group[varying].apply(lambda row: " ".join(f"{c}={_short(v)}" for c, v in row.items()
                                                              if not _missing(v)), axis=1)
            label[index] = label[index] + " [" + extra + "]"
    tied = label.duplicated(keep=False)
    if tied.any():  # still tied: the key prefix tells them apart
        label[tied] = label[tied] + " (" + distinct.loc[tied, "model_key"].str[:8] + ")"
    distinct.insert(0, "label", label)
    distinct.insert(0, "setting_id", [str(i) for i in range(len(distinct))])
    return distinct


def with_settings(values: pd.DataFrame, columns: Sequence[str], model_table: pd.DataFrame
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(values with a `setting_id` in place of the setting `columns`, the settings frame of `setting_labels`): the
    last step of every study's compare function."""
    columns = list(columns)
    settings = setting_labels(values, columns, model_table)
    values = values.merge(settings[["setting_id", *columns]], on=columns, how="left").drop(columns=columns)
    return values, settings


def _missing(value) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _short(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def resolve_settings(settings: pd.DataFrame, text: str) -> list[str]:
    """The settings `text` names: the one whose label it is, else every setting of the model it names, else the
    settings of the one model whose key starts with it. Nothing matched raises `UsageError` naming the choices."""
    hit = settings[settings["label"] == text]
    if hit.empty:
        hit = settings[settings["model_name"] == text]
    if hit.empty and text:
        prefixed = settings[settings["model_key"].astype(str).str.startswith(text)]
        if prefixed["model_key"].nunique() == 1:
            hit = prefixed
        elif len(prefixed):
            raise UsageError(f"--between {text!r}: the key prefix matches {prefixed['model_key'].nunique()} models; "
                             "give more of the key or a label: " + "; ".join(repr(v) for v in settings["label"]))
    if hit.empty:
        known = "; ".join(repr(v) for v in settings["label"])
        raise UsageError(f"--between {text!r} names no setting of this study; settings: {known}")
    return list(hit["setting_id"])


#: the columns of a settings frame that are not the collection's own settings
_NAMING = ("setting_id", "label", "model_name", "dtype", "backend", "model_key")


def _between(settings: pd.DataFrame, between: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of settings `--between A B` names: the two settings when each side names one; when a side names a
    model with several settings, each setting of A paired with the setting of B collected the same way (mode,
    temperature, ... equal)."""
    if len(between) != 2:
        raise UsageError("--between takes two settings")
    side_a, side_b = (resolve_settings(settings, text) for text in between)
    labels = dict(zip(settings["setting_id"], settings["label"]))
    if set(side_a) == set(side_b):
        raise UsageError(f"--between names the same setting twice ({', '.join(repr(labels[s]) for s in side_a)})")
    if len(side_a) == 1 and len(side_b) == 1:
        return [(side_a[0], side_b[0])]
    rest = [c for c in settings.columns if c not in _NAMING]
    how = settings.set_index("setting_id")[rest].astype(str)
    pairs = [(a, b) for a in side_a for b in side_b if a != b and how.loc[a].equals(how.loc[b])]
    if not pairs:
        raise UsageError(f"--between {between[0]!r} {between[1]!r}: no setting of one was collected as a setting "
                         "of the other; name one setting on each side: " + "; ".join(repr(v) for v in labels.values()))
    return pairs


def _named(ids: list) -> str:
    return ", ".join(str(i) for i in ids[:NAMED_ITEMS]) + (", ..." if len(ids) > NAMED_ITEMS else "")


def _excluded_note(item: str, left: dict[str, list], label_a: str, label_b: str) -> str:
    """"left out: 3 templates without a value in B (t1, t2, t3); ..." (the first NAMED_ITEMS ids of each kind)."""
    where = {"only_a": label_b, "only_b": label_a, "neither": "either"}
    parts = [f"{len(ids)} {item}s without a value in {where[kind]} ({_named(ids)})"
             for kind, ids in left.items() if ids]
    return "left out: " + "; ".join(parts) if parts else ""


def _pair(values_a: pd.DataFrame, values_b: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list]] | None:
    """The items with a finite value on both sides (sorted by item), and the items left out: with a value only in
    A ("only_a"), only in B ("only_b"), or a row on a side but a value in neither ("neither"); None when no item has
    a value on either side (the measure does not apply to these settings, e.g. a valid mass of scored sentences)."""
    a = values_a.dropna(subset=["value"]).set_index("item")
    b = values_b.dropna(subset=["value"]).set_index("item")
    if a.empty and b.empty:
        return None
    both = a.index.intersection(b.index).sort_values()
    joined = pd.DataFrame({"a": a.loc[both, "value"].to_numpy(float), "b": b.loc[both, "value"].to_numpy(float),
                           "cluster": a.loc[both, "cluster"].to_numpy(), "covariate":
                           a.loc[both, "covariate"].to_numpy(float),
                           "covariate_b": b.loc[both, "covariate"].to_numpy(float)}, index=both)
    seen = pd.Index(values_a["item"]).union(pd.Index(values_b["item"]))
    left = {"only_a": sorted(str(i) for i in a.index.difference(b.index)),
            "only_b": sorted(str(i) for i in b.index.difference(a.index)),
            "neither": sorted(str(i) for i in seen.difference(a.index.union(b.index)))}
    return joined, left


def _test(measure: Measure, joined: pd.DataFrame, *, bootstrap: int, permutations: int, seed: int):
    """(the `paired` result of the measure's kind, the number of units it rests on)."""
    codes, _ = pd.factorize(joined["cluster"], sort=True)
    covariate = joined["covariate"].to_numpy(float)
    pairs = Paired(joined["a"].to_numpy(float), joined["b"].to_numpy(float), codes.astype(np.int64),
                   None if np.isnan(covariate).all() else covariate)
    rng = np.random.default_rng(seed)
    if measure.kind == "mean":
        result = mean_difference(pairs, bootstrap=bootstrap, permutations=permutations, rng=rng)
    elif measure.kind == "ratio":
        pairs = Paired(pairs.a, pairs.b, pairs.cluster, covariate, joined["covariate_b"].to_numpy(float))
        result = ratio_difference(pairs, measure.transform, bootstrap=bootstrap, permutations=permutations, rng=rng)
    elif measure.kind == "binary":
        result = binary_difference(pairs, bootstrap=bootstrap, rng=rng)
    elif measure.kind == "spearman":
        keep = np.isfinite(covariate)
        if not keep.all():  # unrated items say nothing about a correlation with the rating
            pairs = Paired(pairs.a[keep], pairs.b[keep], pd.factorize(codes[keep], sort=True)[0], covariate[keep])
        result = statistic_difference(pairs, spearman_rows, bootstrap=bootstrap, permutations=permutations, rng=rng,
                                      effect="cohen_q")
    else:
        result = statistic_difference(pairs, measure.statistic, bootstrap=bootstrap, permutations=permutations,
                                      rng=rng)
    return result, pairs.units


def valid_share(part: pd.DataFrame) -> float:
    """A side's valid share: the mean `valid` over its items, those without a value included (an item with no
    valid answer has valid 0 and no value: leaving it out would hide it), as `metrics options` computes
    1 - invalid_mass over every item of a group; NaN where the study gives none."""
    if "valid" not in part.columns:
        return float("nan")
    valid = part["valid"].to_numpy(float)
    valid = valid[np.isfinite(valid)]
    return float(valid.mean()) if valid.size else float("nan")


def _row(measure: Measure, part_a: pd.DataFrame, part_b: pd.DataFrame, sides: tuple[str, str], *, bootstrap: int,
         permutations: int, seed: int, min_coverage: float) -> dict | None:
    """One comparison's values (the COLUMNS a study and its settings do not fix); None when the measure has no
    value on either side. Marked (`low_coverage`) as `metrics` marks a score: the items paired cover less than
    `min_coverage` of the items either side has, or either side's valid share is below it."""
    paired = _pair(part_a, part_b)
    if paired is None:
        return None
    joined, left = paired
    result, units = _test(measure, joined, bootstrap=bootstrap, permutations=permutations, seed=seed)
    n, excluded = len(joined), sum(len(ids) for ids in left.values())
    coverage = n / (n + excluded) if n + excluded else float("nan")
    shares = valid_share(part_a), valid_share(part_b)
    low = not coverage >= min_coverage or any(share < min_coverage for share in shares)
    k = measure.scale
    return {"value_a": k * result.value_a, "value_b": k * result.value_b, "estimate": k * result.estimate,
            "ci_low": k * result.ci_low, "ci_high": k * result.ci_high, "p_value": result.p_value, "test": result.test,
            "effect_size": result.effect_size, "effect_kind": result.effect_kind, "n_items": n, "n_excluded": excluded,
            "coverage": coverage, "valid_share_a": shares[0], "valid_share_b": shares[1], "low_coverage": bool(low),
            "unit": measure.unit, "n_units": units, "note": _excluded_note(measure.item, left, *sides)}


def valid_share_gap(table: pd.DataFrame, factor: float = VALID_SHARE_FACTOR) -> str:
    """One line naming the rows whose two settings' valid shares differ by more than `factor` (their values rest on
    answers of very different validity), "" for none."""
    if table.empty or "valid_share_a" not in table.columns:
        return ""
    a, b = table["valid_share_a"].to_numpy(float), table["valid_share_b"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):  # a share of 0 beside a positive one: an infinite ratio
        ratio = np.maximum(a, b) / np.minimum(a, b)
    gap = np.isfinite(a) & np.isfinite(b) & (ratio > factor)
    if not gap.any():
        return ""
    first = table[gap].iloc[0]
    return (f"valid shares differ by more than {factor:g}x on {int(gap.sum())} of {len(table)} rows (e.g. "
            f"{first['measure']} · {first['group']}: {first['setting_a']} {first['valid_share_a']:.3g} vs "
            f"{first['setting_b']} {first['valid_share_b']:.3g}): their values rest on answers of very different "
            f"validity")


def _families(obs: Observations, between: Sequence[str] | None, within: bool) -> list[tuple[str, str]]:
    """The (setting A, setting B) of each family: the chosen pair, every pair, or (s, s) per setting (--within)."""
    settings = obs.settings
    if settings.empty or obs.values.empty:
        raise NoEvidence(f"nothing to compare: the warehouse holds no {obs.study} evidence")
    labels = dict(zip(settings["setting_id"], settings["label"]))
    chosen = list(settings["setting_id"])
    if between is not None:
        pairs = _between(settings, between)
        if not within:
            return pairs
        chosen = list(dict.fromkeys(s for pair in pairs for s in pair))
    if within:
        return [(s, s) for s in chosen]
    if len(chosen) < 2:
        raise UsageError(f"{obs.study}: one collection setting ({labels[chosen[0]]}) is stored; a comparison "
                         "between settings needs two (use --within to compare its conditions)")
    return [(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1:]]


def compare_observations(obs: Observations, *, between: Sequence[str] | None = None, within: bool = False,
                         bootstrap: int = 2000, permutations: int = 5000, seed: int = 0,
                         min_coverage: float = DEFAULT_MIN_COVERAGE) -> pd.DataFrame:
    """The comparison table (COLUMNS) of a study's observations.

    Parameters
    ----------
    obs : from the study's compare function.
    between : two setting names (`resolve_settings`; a model with several settings is paired setting by setting
        with the other's like settings); None: every pair of settings, in the settings' order.
    within : compare the study's condition pairs inside each setting (or inside the two `between` settings) instead.
    bootstrap, permutations, seed : cluster-bootstrap resamples, permutations, the generator's seed (each row
        starts from the same seed, so a row does not depend on which others are computed).
    min_coverage : rows whose items cover less than this share of the items either side has, or where either
        side's valid share is below it, are marked (`low_coverage`).

    Returns
    -------
    DataFrame with COLUMNS: one row per measure and group (and condition pair under --within) and pair of settings;
    p_holm and p_bh adjust p_value over the rows of the same pair of settings (or setting, under --within).
    """
    min_coverage = check_min_coverage(min_coverage)
    if bootstrap < 1 or permutations < 1:
        raise UsageError("--bootstrap and --permutations must be at least 1")
    if within and not obs.within:
        raise UsageError(obs.within_note or f"--within: {obs.study} has no conditions to compare inside a setting")
    families = _families(obs, between, within)
    labels = dict(zip(obs.settings["setting_id"], obs.settings["label"]))
    keys = dict(zip(obs.settings["setting_id"], obs.settings["model_key"]))
    grouped = {key: part for key, part in obs.values.groupby(["setting_id", "measure", "group"], sort=False)}
    rows = []
    for family, (sa, sb) in enumerate(families):
        if within:
            plan = [(m, ga, gb, f"{ga} vs {gb}") for m, ga, gb in obs.within]
        else:
            # the groups either setting has, in the values' order: the same rows whichever setting is A
            plan = [(m, g, g, g) for (m, g) in dict.fromkeys((m, g) for (s, m, g) in grouped if s in (sa, sb))
                    if obs.measures[m].between]
        for measure_name, ga, gb, group in plan:
            empty = obs.values.iloc[:0]
            part_a, part_b = grouped.get((sa, measure_name, ga), empty), grouped.get((sb, measure_name, gb), empty)
            if part_a.empty and part_b.empty:
                continue
            sides = (ga, gb) if within else (labels[sa], labels[sb])
            row = _row(obs.measures[measure_name], part_a, part_b, sides, bootstrap=bootstrap,
                       permutations=permutations, seed=seed, min_coverage=min_coverage)
            if row is None:
                continue
            rows.append({"study": obs.study, "measure": measure_name, "group": group, "setting_a": labels[sa],
                         "setting_b": labels[sb], "model_key_a": keys[sa], "model_key_b": keys[sb], **row,
                         "_family": family})
    table = pd.DataFrame(rows, columns=[*COLUMNS, "_family"])
    if table.empty:
        return table.drop(columns="_family").drop(columns=["p_holm", "p_bh"]).reindex(columns=COLUMNS)
    table["p_holm"], table["p_bh"] = np.nan, np.nan
    for _, index in table.groupby("_family").groups.items():
        p = table.loc[index, "p_value"].to_numpy(float)
        table.loc[index, "p_holm"] = holm(p)
        table.loc[index, "p_bh"] = benjamini_hochberg(p)
    return table.drop(columns="_family")[COLUMNS].reset_index(drop=True)


def comparison_html(table: pd.DataFrame | None, reason: str = "") -> str:
    """The comparison section of a study's report: the `compare_observations` table (each pair of settings, its
    paired differences, intervals, raw and adjusted p, marks), or a sentence saying why there is none."""
    import html as _html

    from ..html_report import table_html

    head = ("<h2 id=\"comparison\">Comparison between settings</h2><p class=\"note\">Paired differences A - B over "
            "the items both settings have; 95% cluster-bootstrap interval over the unit; paired permutation p "
            "(McNemar's exact p for binary measures); Holm and Benjamini-Hochberg adjusted p over the rows of one "
            "pair of settings (`biaslab compare`).</p>")
    if table is None or table.empty:
        return head + f"<p class=\"note\">{_html.escape(reason or 'Nothing to compare.')}</p>"
    shown = table.drop(columns=["study", "model_key_a", "model_key_b"])
    return head + table_html(shown)
