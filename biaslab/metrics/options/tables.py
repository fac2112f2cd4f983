"""The tables of `biaslab metrics options`: the `option_probs` view of one dataset (built in or a user's), grouped by
the columns asked for, through the statistics of `stats`.

Grouping and numeric columns name a column of `stimuli` (context, option_order, grammatical_case, occupation, ...)
or a key of its `attrs` (e.g. `occupation_rating` of a spec's filler attribute); a column of both kinds reads the
column and falls back on `attrs`. A user dataset is read at its current version (the stimuli of its latest
`biaslab data load`), unless `all_versions`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import ibis
import pandas as pd

from ...errors import UsageError
from ...schema import evidence
from ...views import json_field
from . import stats


def parse_contrast(text: str) -> tuple[str, str, str]:
    """(column, a, b) of "COLUMN=A:B"; ValueError in one line otherwise."""
    column, sep, values = text.partition("=")
    a, sep2, b = values.partition(":")
    if not (sep and sep2 and column and a and b) or a == b:
        raise UsageError(f"--contrast {text!r}: write COLUMN=A:B with two different values (e.g. context=primed_f:"
                         f"unprimed)")
    return column.strip(), a.strip(), b.strip()


def attrs_keys(handle, dataset: str) -> set[str]:
    """Every key of `attrs` among the dataset's stimuli."""
    st = handle.table("stimuli")
    frame = handle.fetch(st.filter(st.dataset == dataset).select("attrs").distinct())
    keys: set[str] = set()
    for text in frame["attrs"].dropna():
        keys |= set(json.loads(text)) if isinstance(text, str) else set(text or {})
    return keys


def _column(st, name: str, keys: set[str], numeric: bool):
    """The stimuli column `name`, else the attrs key `name` (both: the column, falling back on attrs)."""
    kind = "float64" if numeric else "string"
    if name in st.columns and name != "attrs":
        value = st[name].cast(kind)
        return ibis.coalesce(value, json_field(st.attrs, name).cast(kind)) if name in keys else value
    return json_field(st.attrs, name).cast(kind)


def _current(handle, dataset: str, column: str):
    """`column` of a user dataset's current version (its latest `user_datasets` row); None for a built-in dataset
    (or an older export)."""
    if "user_datasets" not in handle.base_tables():
        return None
    u = handle.table("user_datasets")
    rows = handle.fetch(u.filter(u.dataset == dataset).order_by(ibis.desc("loaded_at")).limit(1).select(column))
    return None if rows.empty else rows[column].iloc[0]


def current_ids(handle, dataset: str) -> list[str] | None:
    """The stimulus ids of a user dataset's current version; None for a built-in dataset (or an older export)."""
    ids = _current(handle, dataset, "stimulus_ids")
    return None if ids is None else list(ids)


def _known_dataset(handle, dataset: str) -> None:
    """NoEvidence naming the warehouse's datasets when `dataset` has no stimulus in it (a typo is not "collect it")."""
    st = handle.table("stimuli")
    names = sorted(handle.fetch(st.select("dataset").distinct())["dataset"])
    if dataset not in names:
        from ..missing import NoEvidence

        raise NoEvidence(f"{handle.path}: no dataset {dataset!r} in this warehouse (its datasets: "
                         f"{', '.join(names) or 'none'}); load it with `biaslab data load`")


def read_probs(handle, dataset: str, groups: Sequence[str], numeric: Sequence[str] = (),
               all_versions: bool = False, temperatures: Sequence[float] = (),
               top_k: int | None = None) -> pd.DataFrame:
    """The `option_probs` rows of `dataset` with the grouping columns (text), the numeric columns (floats) and
    `position` (where the stimulus's option list shows the option, 1 = first); with `temperatures`, also the
    exact-mode choice collections re-derived at each temperature (`rederived_probs`)."""
    keys = attrs_keys(handle, dataset)
    known = set(evidence.column_names("stimuli")) - {"attrs"}
    for name in [*groups, *numeric]:
        if name not in known and name not in keys:
            raise UsageError(f"{name!r} is neither a stimuli column nor an attrs key of dataset {dataset} (attrs "
                             f"keys: {', '.join(sorted(keys)) or 'none'})")
    st = handle.table("stimuli")
    st = st.filter(st.dataset == dataset)
    _known_dataset(handle, dataset)
    for name in numeric:  # a text column asked for as numbers: one line, not DuckDB's conversion error
        values = handle.fetch(st.select(v=_column(st, name, keys, False)).distinct().order_by("v")
                              .limit(10_000))["v"].dropna()
        text = [v for v in values if pd.isna(pd.to_numeric(v, errors="coerce"))]
        if text:
            raise UsageError(f"{name!r} of dataset {dataset} holds text (e.g. {text[0]!r}), not numbers: Spearman's "
                             "rho needs a numeric column")
    extra = {**{g: _column(st, g, keys, False) for g in groups}, **{n: _column(st, n, keys, True) for n in numeric}}
    st = st.select("stimulus_id", "options", **extra)
    probs = handle.table("option_probs")
    probs = probs.filter(probs.dataset == dataset).join(st, "stimulus_id")
    probs = probs.mutate(position=(probs.options.index(probs.option) + 1).cast("int64")).drop("options")
    frame = handle.fetch(probs.order_by(["model_key", "method", "setting", "stimulus_id", "option_label"]))
    if temperatures:
        columns = handle.fetch(st.drop("options"))
        again = rederived_probs(handle, dataset, temperatures, top_k).merge(columns, on="stimulus_id")
        frame = pd.concat([frame, again[frame.columns]], ignore_index=True)
    ids = None if all_versions else current_ids(handle, dataset)
    if ids is not None:
        frame = frame[frame["stimulus_id"].isin(set(ids))]
    if frame.empty:
        from ..missing import missing

        raise missing(handle, "option probability", [dataset], f"runners collect --dataset {dataset}")
    for g in groups:
        frame[g] = frame[g].astype(object).where(frame[g].notna(), "(none)")
    return frame.reset_index(drop=True)


_REDERIVED = """
WITH collected AS (
    SELECT DISTINCT p.model_key, p.request_id, r.stimulus_id, r.prompt_version, r.max_new_tokens,
           p.temperature, p.top_k, p.top_p
    FROM choice_probs p JOIN choice_requests r USING (model_key, request_id)
    WHERE r.protocol = 'choice' AND r.mode = 'exact'
),
again AS (
    SELECT c.model_key, c.request_id, s.dataset, s.stimulus_id, s.item_id, a.option,
           s.option_labels[list_position(s.options, a.option)] AS option_label, a.prob,
           s.option_labels[list_position(s.options, s.gold)] AS gold_label,
           list_position(s.options, a.option) AS position,
           c.prompt_version || ' T=' || CAST(c.temperature AS VARCHAR) || ' top_k=' || CAST(c.top_k AS VARCHAR)
               || ' top_p=' || CAST(c.top_p AS VARCHAR) || ' max_new_tokens=' || CAST(c.max_new_tokens AS VARCHAR)
               || ' at T=' || CAST(a.temperature AS VARCHAR) || ' top_k=' || CAST(a.top_k AS VARCHAR) AS setting
    FROM choice_probs_at(?, ?) a JOIN collected c USING (model_key, request_id) JOIN stimuli s USING (stimulus_id)
    WHERE s.dataset = ? AND s.option_labels IS NOT NULL AND list_position(s.options, a.option) IS NOT NULL
          AND (? OR c.top_k = a.top_k)
)
SELECT model_key, dataset, stimulus_id, item_id, 'choice-exact' AS method, setting, option, option_label,
       prob / nullif(sum(prob) OVER (PARTITION BY model_key, request_id), 0) AS p,
       sum(prob) OVER (PARTITION BY model_key, request_id) AS valid_mass, CAST(NULL AS BIGINT) AS n,
       gold_label, CAST(position AS BIGINT) AS position
FROM again
"""


def rederived_probs(handle, dataset: str, temperatures: Sequence[float], top_k: int | None = None) -> pd.DataFrame:
    """`option_probs`-like rows of the dataset's exact-mode choice collections re-derived from their stored trie
    evidence at each of `temperatures` (`choice_probs_at`; no model runs), at `top_k` (None: each collection's own
    top_k), with `position`. p(o) = P_T,k(o) / sum_o' P_T,k(o'), valid_mass = sum_o' P_T,k(o'), as the view.

    Each re-derived setting is its own collection: `setting` names the collection's own settings followed by
    "at T=t top_k=k", so its tables sit beside the collection's and never pool with it. UsageError when the
    dataset has no exact-mode evidence to re-derive, or `top_k` exceeds what a collection stored (its k_store)."""
    import duckdb

    ks = ([int(top_k)] if top_k is not None else [int(k) for k in handle.query(
        "SELECT DISTINCT p.top_k FROM choice_probs p JOIN choice_requests r USING (model_key, request_id) JOIN "
        "stimuli s USING (stimulus_id) WHERE r.protocol = 'choice' AND r.mode = 'exact' AND s.dataset = ? "
        "ORDER BY 1", [dataset])["top_k"]])
    parts = []
    for k in ks:
        for t in temperatures:
            try:
                parts.append(handle.query(_REDERIVED, [float(t), k, dataset, top_k is not None]))
            except duckdb.Error as exc:
                message = str(exc).split("choice_probs_at: ", 1)[-1].splitlines()[0]
                raise UsageError(f"--temperatures / --top-k: {message}") from None
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if frame.empty:
        raise UsageError(f"--temperatures: dataset {dataset} has no exact-mode choice evidence to re-derive "
                         f"(collect it with `runners collect --dataset {dataset} --protocol choice --mode exact`)")
    return frame


def parse_top_k(value: int | None) -> int | None:
    """--top-k: a positive integer or None."""
    if value is not None and value < 1:
        raise UsageError(f"--top-k must be at least 1, got {value}")
    return value


def option_tables(handle, dataset: str, *, by: Sequence[str] = (), contrast: str | None = None,
                  reference: str | None = None, spearman: str | None = None, bootstrap: int = 1000, seed: int = 0,
                  n_bins: int = 10, all_versions: bool = False, unit: str | None = None,
                  temperatures: Sequence[float] = (), top_k: int | None = None) -> dict[str, pd.DataFrame]:
    """`evidence` (per collection: loaded stimuli, those with and without evidence, and the partial items left
    out: `complete_items`), `means` (per group and option label: items, mean p, bootstrap CI, invalid mass), `order`
    (mean p per position of the option in the list, and whether the order effect is large: `stats.order_effect`;
    where options appear at two positions); with `contrast` ("COLUMN=A:B") `contrast` (paired differences per item,
    CI, sign-flip p); with `reference` (a value of the one `by` column) `kl`; with `spearman` (a numeric column)
    `spearman` over the study's `unit` (default: the dataset's declared unit, else the item) with a bootstrap
    interval, and `_points` (per unit, for the report's scatter); where stimuli have a gold option `calibration`,
    and `_reliability` (bins, for the report) and `_items` (item means, for the report). With `temperatures`, every
    table also holds the exact-mode collections re-derived at each temperature (and `top_k`: `rederived_probs`)."""
    by = list(dict.fromkeys(by))
    column = a = b = None
    if contrast:
        column, a, b = parse_contrast(contrast)
    if reference is not None and len(by) != 1:
        raise UsageError("--reference names a value of the one --by column: give exactly one --by")
    groups = list(dict.fromkeys([*by, *([column] if column else [])]))
    gen = gen_rates(handle, dataset)
    if not gen.empty and not _has_option_evidence(handle, dataset):  # a gen-only study: its rates, nothing else
        return _gen_only(gen, by)
    unit = unit if unit is not None else declared_unit(handle, dataset)
    extra = [unit] if spearman and unit and unit not in groups and unit != "item_id" else []
    probs = read_probs(handle, dataset, [*groups, *extra], [spearman] if spearman else [], all_versions,
                       temperatures, top_k)
    probs, evidence_table = complete_items(probs, loaded_stimuli(handle, dataset, by, all_versions, True), by)
    items = stats.item_means(probs, [*groups, *extra], numeric=[spearman] if spearman else [])
    # the unit is a property of the item, not a group: the means and contrasts use item means over groups only
    items_by_group = stats.item_means(probs, groups, numeric=[spearman]) if extra else items
    by_items = stats.item_means(probs, by) if column and column not in by else items_by_group
    means = stats.group_means(by_items, by, bootstrap=bootstrap, seed=seed)
    tables = {"evidence": evidence_table, "means": means, "order": stats.order_effect(_choice(probs), by)}
    if column:
        rest = [g for g in by if g != column]
        present = set(items[column])
        for value in (a, b):
            if value not in present:
                raise UsageError(f"--contrast: {column} has no value {value!r} in {dataset} (values: "
                                 f"{', '.join(sorted(map(str, present)))})")
        within_items(items, column, a, b, dataset, "--contrast")
        tables["contrast"] = stats.paired_contrast(items_by_group, column, a, b, rest, bootstrap=bootstrap,
                                                   seed=seed)
    if reference is not None:
        if reference not in set(means[by[0]]):
            raise UsageError(f"--reference: {by[0]} has no value {reference!r}")
        tables["kl"] = stats.kl_to_reference(means, by[0], reference)
    if spearman:
        tables["spearman"] = stats.spearman(items, spearman, by, unit=unit or None, bootstrap=bootstrap, seed=seed)
        tables["_points"] = stats.unit_points(items, spearman, by, unit or None)
    if probs["gold_label"].notna().any():
        gold = probs[probs["gold_label"].notna()]
        tables["calibration"] = stats.calibration(gold, by, n_bins=n_bins)
        tables["_reliability"] = stats.reliability(gold, by, n_bins=n_bins)
    if not gen.empty:
        tables["gen"] = gen
    tables["_items"] = items_by_group
    return tables


def _gen_only(gen: pd.DataFrame, by: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The tables of a study with gen evidence and no option probability: the `gen` rates, empty means."""
    return {"evidence": pd.DataFrame(columns=[*stats.KEY, *EVIDENCE_COLUMNS]),
            "means": pd.DataFrame(columns=[*stats.KEY, *by, "option_label", *stats.GROUP_MEAN_COLUMNS]),
            "gen": gen, "_items": pd.DataFrame()}


#: the columns of the `gen` table of `biaslab metrics options`
GEN_COLUMNS = ["model_key", "method", "setting", "context", "declared", "family", "n", "share", "ci_low",
               "ci_high"]


def within_items(items: pd.DataFrame, column: str, a: str, b: str, dataset: str, flag: str) -> None:
    """UsageError in one line when no item has both `a` and `b` of `column`: a paired comparison pairs an item
    with itself, so a factor that varies between items (each item has one value) has nothing to pair."""
    values = items[items[column].astype(str).isin([str(a), str(b)])]
    both = values.groupby("item_id")[column].nunique()
    if len(both) and not (both >= 2).any():
        raise UsageError(f"{flag}: {column} varies between items in {dataset} (no item has both {a!r} and {b!r}), "
                         f"so no item can be paired with itself; compare its groups with --by {column} instead")


def gen_rates(handle, dataset: str) -> pd.DataFrame:
    """Per gen collection (model, sampling setting), prompt context (pre / post / prompt) and declared family: the
    share of continuations whose first pronoun belongs to each family of the dataset's vocabulary, and the share
    with no pronoun, each with a 95% Wilson interval over the n continuations (the first-pronoun detector of the
    misgendering study, `misgendering.tables.generation_results`, with each request's stored vocabulary). Every
    declared family is a row, the gold one too (its share is the correct rate). Empty without gen evidence."""
    from ..misgendering.tables import _rate, generation_results

    if "gen_requests" not in handle.base_tables():
        return pd.DataFrame(columns=GEN_COLUMNS)
    g = handle.table("gen_requests")
    vocabularies = handle.fetch(g.filter(g.dataset == dataset).select(v=g.pronoun_vocabulary.cast("string"))
                                .distinct())["v"]
    if vocabularies.empty:
        return pd.DataFrame(columns=GEN_COLUMNS)
    frame = generation_results(handle, dataset=dataset)
    families = sorted({f for text in vocabularies for f in json.loads(text)})
    rows = []
    for key, group in frame.groupby(["model_key", "setting", "context", "declared"], sort=True):
        n = len(group)
        counts = group["first_family"].fillna("(no pronoun)").value_counts()
        for family in [*families, "(no pronoun)"]:
            share, low, high = _rate(int(counts.get(family, 0)), n)
            rows.append({"model_key": key[0], "method": "gen", "setting": key[1], "context": key[2],
                         "declared": key[3], "family": family, "n": n, "share": share, "ci_low": low,
                         "ci_high": high})
    return pd.DataFrame(rows, columns=GEN_COLUMNS)


def _has_option_evidence(handle, dataset: str) -> bool:
    """Whether `option_probs` has a row of `dataset`."""
    probs = handle.table("option_probs")
    return bool(handle.fetch(probs.filter(probs.dataset == dataset).limit(1).count().name("n").as_table())["n"]
                .iloc[0])


def _choice(probs: pd.DataFrame) -> pd.DataFrame:
    """The rows of the methods that show the options in a list (choice): the order of a prob stimulus's options
    changes nothing it scores."""
    return probs[probs["method"].astype(str).str.startswith("choice")]


def declared_unit(handle, dataset: str) -> str | None:
    """The study unit a user dataset's spec declares (`unit:`), else None (the item)."""
    value = _current(handle, dataset, "declaration")
    if value is None:
        return None
    return (json.loads(value) if isinstance(value, str) else value).get("unit")


def loaded_stimuli(handle, dataset: str, by: Sequence[str], all_versions: bool = False,
                   with_options: bool = False) -> pd.DataFrame:
    """The dataset's loaded stimuli (its current version for a user dataset, unless `all_versions`; with
    `with_options` only those with options, the ones an option probability can be measured on): stimulus_id, item_id
    and the `by` columns (stimuli columns or attrs keys, as `read_probs`, "(none)" where absent)."""
    keys = attrs_keys(handle, dataset)
    st = handle.table("stimuli")
    st = st.filter(st.dataset == dataset)
    if with_options:
        st = st.filter(st.options.notnull())
    frame = handle.fetch(st.select("stimulus_id", "item_id", **{g: _column(st, g, keys, False) for g in by}))
    ids = None if all_versions else current_ids(handle, dataset)
    if ids is not None:
        frame = frame[frame["stimulus_id"].isin(set(ids))]
    for g in by:
        frame[g] = frame[g].astype(object).where(frame[g].notna(), "(none)")
    return frame.reset_index(drop=True)


#: the columns of the `evidence` table of `biaslab metrics options`
EVIDENCE_COLUMNS = ["stimuli_loaded", "stimuli_with_evidence", "stimuli_without_evidence", "partial_items",
                    "stimuli_left_out"]


def complete_items(probs: pd.DataFrame, loaded: pd.DataFrame, by: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of `probs` of complete items only, and the `evidence` table that says what was left out.

    An item is complete in a group (KEY + `by` values) when every one of its loaded stimuli in that group has
    evidence there. An item with evidence for only part of its stimuli (one option order of two, one context of a
    pair, after an edit or `runners collect --limit`) would move its mean by what it lacks (issue 44: unprimed
    p(female) 0.5058 became 0.4833 when one item lost an option order), so it is left out of the group's means and
    contrasts, and counted.

    Parameters
    ----------
    probs : `read_probs` rows (KEY, stimulus_id, the `by` columns, option_label, p, ...).
    loaded : `loaded_stimuli` with the same `by` columns.
    by : the grouping columns of the means.

    Returns
    -------
    (probs of complete items, evidence): one evidence row per KEY (sorted): stimuli_loaded (those with options, as
    `loaded` should hold), stimuli_with_evidence, stimuli_without_evidence (loaded stimuli with no row in `probs`),
    partial_items (item x group cells left out) and stimuli_left_out (stimuli with evidence in those cells).
    """
    by = list(by)
    kept, rows = [], []
    for key, part in probs.groupby(stats.KEY, sort=True, dropna=False):
        has = loaded["stimulus_id"].isin(set(part["stimulus_id"]))
        cells = loaded.assign(has=has).groupby([*by, "item_id"], dropna=False)["has"]
        state = pd.DataFrame({"all": cells.all(), "any": cells.any()}).reset_index()
        partial = state[state["any"] & ~state["all"]]
        marked = part.merge(partial[[*by, "item_id"]].assign(_partial=True), on=[*by, "item_id"], how="left")
        left_out = marked["_partial"].eq(True).to_numpy()
        kept.append(part[~left_out])
        with_evidence = int(has.sum())
        rows.append({**dict(zip(stats.KEY, key)), "stimuli_loaded": len(loaded),
                     "stimuli_with_evidence": with_evidence, "stimuli_without_evidence": len(loaded) - with_evidence,
                     "partial_items": len(partial),
                     "stimuli_left_out": int(part.loc[left_out, "stimulus_id"].nunique())})
    probs = pd.concat(kept, ignore_index=True) if kept else probs
    return probs, pd.DataFrame(rows, columns=[*stats.KEY, *EVIDENCE_COLUMNS])


def loaded_items(handle, dataset: str, by: Sequence[str], all_versions: bool = False) -> pd.DataFrame:
    """Distinct item_id of the dataset's loaded stimuli (its current version for a user dataset, unless
    `all_versions`) per group of the `by` columns (stimuli columns or attrs keys, as `read_probs`): by + n_loaded."""
    frame = loaded_stimuli(handle, dataset, by, all_versions)
    if not by:
        return pd.DataFrame({"n_loaded": [int(frame["item_id"].nunique())]})
    return frame.groupby(list(by), dropna=False)["item_id"].nunique().rename("n_loaded").reset_index()


def means_with_coverage(handle, dataset: str, tables: dict[str, pd.DataFrame], by: Sequence[str],
                        all_versions: bool, min_coverage: float) -> dict[str, pd.DataFrame]:
    """The `means` table with `biaslab.metrics.coverage.COVERAGE_COLUMNS`: items loaded per group, items a mean
    rests on, items with evidence but no valid answer in that setting, items without evidence; valid_share =
    1 - invalid_mass."""
    from ..coverage import annotate

    by = list(dict.fromkeys(by))
    out = dict(tables)
    means = tables["means"]
    if means.empty:
        return out
    keys = [*stats.KEY, *by, "option_label"]
    evidence = (tables["_items"].groupby(keys, dropna=False)["item_id"].nunique().rename("n_evidence")
                .reset_index())
    loaded = loaded_items(handle, dataset, by, all_versions)
    per_row = means.merge(loaded, on=by, how="left") if by else means.assign(n_loaded=int(loaded["n_loaded"].iloc[0]))
    per_row = per_row[[*keys, "n_loaded"]].drop_duplicates(keys)
    out["means"] = annotate(means, used="items", loaded=per_row, evidence=evidence, keys=keys,
                            valid_share=1.0 - means["invalid_mass"].astype(float), min_coverage=min_coverage,
                            clusters="items")
    return out
