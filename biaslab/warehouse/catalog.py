"""What a warehouse holds, for people: the models (by name, not only by key) and the collections (model x dataset x
protocol x settings, with how much is stored and the last run)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import Unsupported, UsageError
from ..sql.quoting import identifier, literal

if TYPE_CHECKING:  # Ibis and pandas where a frame is built: `biaslab info` reads the same rows without them
    import ibis.expr.types as ir
    import pandas as pd

#: the engine of a model record that names none (as `biaslab.views.DEFAULT_BACKEND`, which needs Ibis to import)
DEFAULT_BACKEND = "hf"

#: columns of `collections`
COLLECTION_COLUMNS = ["model_name", "dtype", "backend", "dataset", "protocol", "settings", "stimuli", "requests",
                      "stored", "pending", "rows", "last_run", "last_status", "last_started", "model_key"]

_COLLECTIONS_HEAD = """
WITH latest AS (  -- a user dataset's current version: its latest load
    SELECT dataset, arg_max(stimulus_ids, loaded_at) AS ids FROM user_datasets GROUP BY dataset),
cur AS (  -- the stimuli that count: every stimulus of a built-in dataset, the current version's of a user's
    SELECT s.stimulus_id, s.dataset FROM stimuli s LEFT JOIN latest l USING (dataset)
    WHERE l.ids IS NULL OR list_contains(l.ids, s.stimulus_id)),
ds AS (SELECT dataset, count(*) AS stimuli FROM cur GROUP BY dataset),
"""
#: the four kinds of evidence a collection can hold: name -> (the table whose rows it counts, its CTE)
_COLLECTION_KINDS = {
    "exact": ("choice_probs", """exact AS (
    SELECT r.model_key, s.dataset, r.protocol,
           printf('%s T=%g top_k=%d top_p=%g new=%d prompt=%s', r.mode, p.temperature, p.top_k, p.top_p,
                  r.max_new_tokens, r.prompt_version) AS settings,
           count(DISTINCT r.request_id) AS requests, count(DISTINCT r.stimulus_id) AS stored,
           count(DISTINCT r.stimulus_id) FILTER (WHERE r.stimulus_id IN (SELECT stimulus_id FROM cur)) AS stored_cur,
           sum(p.n)::BIGINT AS rows,
           r.mode AS mode, p.temperature, p.top_k, p.top_p, r.max_new_tokens, NULL::BIGINT AS min_new_tokens,
           r.prompt_version, NULL::VARCHAR AS scheme, NULL::VARCHAR[] AS run_ids
    FROM choice_requests r JOIN stimuli s USING (stimulus_id)
    JOIN (SELECT model_key, request_id, temperature, top_k, top_p, count(*) AS n FROM choice_probs GROUP BY ALL) p
      USING (model_key, request_id)
    WHERE r.mode IN ('exact', 'logprobs') GROUP BY ALL),  -- logprobs: a chat API's approximation, its own row
"""),
    "sampled": ("samples", """sampled AS (
    SELECT r.model_key, s.dataset, r.protocol,
           printf('sample T=%g top_k=%d top_p=%g new=%d prompt=%s', x.temperature, x.top_k, x.top_p,
                  x.max_new_tokens, r.prompt_version) AS settings,
           count(DISTINCT r.request_id) AS requests, count(DISTINCT r.stimulus_id) AS stored,
           count(DISTINCT r.stimulus_id) FILTER (WHERE r.stimulus_id IN (SELECT stimulus_id FROM cur)) AS stored_cur,
           count(*) AS rows, 'sample' AS mode, x.temperature, x.top_k, x.top_p, x.max_new_tokens,
           NULL::BIGINT AS min_new_tokens,
           r.prompt_version, NULL::VARCHAR AS scheme,
           list(DISTINCT x.run_id) FILTER (WHERE x.run_id IS NOT NULL) AS run_ids
    FROM choice_requests r JOIN stimuli s USING (stimulus_id)
    JOIN samples x USING (model_key, request_id)
    WHERE r.mode = 'sample' GROUP BY ALL),
"""),
    "generated": ("gen_requests", """generated AS (
    SELECT g.model_key, g.dataset, 'gen' AS protocol,
           printf('T=%g top_k=%d top_p=%g new=%d min=%d prompt=%s', x.temperature, x.top_k, x.top_p,
                  x.max_new_tokens, g.min_new_tokens, g.prompt_version) AS settings,
           count(DISTINCT g.request_id) AS requests, count(DISTINCT g.stimulus_id) AS stored,
           count(DISTINCT g.stimulus_id) FILTER (WHERE g.stimulus_id IN (SELECT stimulus_id FROM cur)) AS stored_cur,
           count(*) AS rows,
           NULL::VARCHAR AS mode, x.temperature, x.top_k, x.top_p, x.max_new_tokens,
           g.min_new_tokens::BIGINT AS min_new_tokens,
           g.prompt_version, NULL::VARCHAR AS scheme,
           list(DISTINCT x.run_id) FILTER (WHERE x.run_id IS NOT NULL) AS run_ids
    FROM gen_requests g JOIN samples x USING (model_key, request_id) GROUP BY ALL),
"""),
    "scored": ("sequence_scores", """scored AS (
    SELECT q.model_key, s.dataset, q.protocol, 'scheme=' || q.scheme AS settings,
           count(DISTINCT q.request_id) AS requests, count(DISTINCT q.stimulus_id) AS stored,
           count(DISTINCT q.stimulus_id) FILTER (WHERE q.stimulus_id IN (SELECT stimulus_id FROM cur)) AS stored_cur,
           count(*) AS rows,
           NULL::VARCHAR AS mode, NULL::DOUBLE AS temperature, NULL::BIGINT AS top_k, NULL::DOUBLE AS top_p,
           NULL::BIGINT AS max_new_tokens, NULL::BIGINT AS min_new_tokens, NULL::VARCHAR AS prompt_version,
           q.scheme, NULL::VARCHAR[] AS run_ids
    FROM sequence_scores q JOIN stimuli s USING (stimulus_id) GROUP BY ALL),
"""),
    "imported": ("imported_answers", """imported AS (  -- biaslab import: another tool's answers, one collection each
    SELECT i.model_key, s.dataset, 'import' AS protocol, i.tool || ' ' || i.task AS settings,
           count(DISTINCT i.stimulus_id) AS requests, count(DISTINCT i.stimulus_id) AS stored,
           count(DISTINCT i.stimulus_id) FILTER (WHERE i.stimulus_id IN (SELECT stimulus_id FROM cur)) AS stored_cur,
           count(*) AS rows,
           NULL::VARCHAR AS mode, NULL::DOUBLE AS temperature, NULL::BIGINT AS top_k, NULL::DOUBLE AS top_p,
           NULL::BIGINT AS max_new_tokens, NULL::BIGINT AS min_new_tokens, NULL::VARCHAR AS prompt_version,
           NULL::VARCHAR AS scheme, list(DISTINCT i.run_id) FILTER (WHERE i.run_id IS NOT NULL) AS run_ids
    FROM imported_answers i JOIN stimuli s USING (stimulus_id) GROUP BY ALL),
"""),
}
_COLLECTIONS_TAIL = """runs_of AS (
    SELECT model_key, run_id, status, started_at, params->>'dataset' AS dataset, params->>'protocol' AS protocol,
           params->>'mode' AS mode, TRY_CAST(params->>'temperature' AS DOUBLE) AS temperature,
           TRY_CAST(params->>'top_k' AS BIGINT) AS top_k, TRY_CAST(params->>'top_p' AS DOUBLE) AS top_p,
           TRY_CAST(params->>'max_new_tokens' AS BIGINT) AS max_new_tokens,
           TRY_CAST(params->>'min_new_tokens' AS BIGINT) AS min_new_tokens,
           generation_config->>'prompt_version' AS prompt_version, params->>'pll' AS pll,
           TRY_CAST(params->>'seed' AS BIGINT) AS seed
    FROM runs WHERE model_key IS NOT NULL),
c AS (
    SELECT *, row_number() OVER () AS collection
    FROM ({kinds})),
seeds AS (  -- sample and gen collections: the seeds of the runs that wrote their rows (NULL when no row names a run)
    SELECT c.collection, list(DISTINCT ro.seed) AS seeds
    FROM c, unnest(c.run_ids) AS u(run_id) JOIN runs_of ro ON ro.run_id = u.run_id GROUP BY c.collection),
matched AS (
    SELECT c.collection, ro.run_id, ro.status, ro.started_at,
           row_number() OVER (PARTITION BY c.collection ORDER BY ro.started_at DESC, ro.run_id DESC) AS recent
    FROM c LEFT JOIN seeds USING (collection)
    JOIN runs_of ro ON ro.model_key = c.model_key AND ro.dataset = c.dataset AND ro.protocol = c.protocol
     AND CASE WHEN c.protocol = 'import' THEN true
              WHEN c.protocol = 'prob' THEN c.scheme = 'causal' OR ro.pll = c.scheme
              ELSE ro.temperature = c.temperature AND ro.top_k = c.top_k AND ro.top_p = c.top_p
                   AND ro.max_new_tokens = c.max_new_tokens AND ro.prompt_version = c.prompt_version
                   AND (c.protocol <> 'choice' OR ro.mode = c.mode)
                   AND (c.protocol <> 'gen' OR ro.min_new_tokens = c.min_new_tokens)
                   AND (c.mode = 'exact' OR seeds.seeds IS NULL OR list_contains(seeds.seeds, ro.seed)) END)
SELECT c.model_key, c.dataset, c.protocol, c.settings, ds.stimuli, c.requests, c.stored,
       greatest(coalesce(ds.stimuli, 0) - c.stored_cur, 0) AS pending, c.rows,
       m.run_id[:8] AS last_run, m.status AS last_status, m.started_at AS last_started
FROM c LEFT JOIN ds USING (dataset)
LEFT JOIN matched m ON m.collection = c.collection AND m.recent = 1
ORDER BY c.model_key, c.dataset, c.protocol, c.settings
"""


def collections_sql(kinds: Iterable[str] = tuple(_COLLECTION_KINDS)) -> str:
    """The collections query (`collections` runs it whole) over the kinds of evidence named (default: all five):
    leaving out a kind whose table is empty gives the same rows and a statement DuckDB plans in less time, which is
    what `biaslab info` and `biaslab collections` start up with (`present_kinds`).

    Parameters
    ----------
    kinds : names among "exact", "sampled", "generated", "scored", "imported"; at least one.

    Returns
    -------
    str : one SQL statement (no parameters) with the columns of `collections` before the model names are added.
    """
    kinds = [k for k in _COLLECTION_KINDS if k in set(kinds)]
    if not kinds:
        raise UsageError("collections_sql needs at least one kind of evidence (none is stored: no collections)")
    ctes = "".join(_COLLECTION_KINDS[k][1] for k in kinds)
    union = " UNION ALL BY NAME ".join(f"FROM {identifier(k)}" for k in kinds)
    return f"{_COLLECTIONS_HEAD}{ctes}{_COLLECTIONS_TAIL.format(kinds=union)}"


def present_kinds(wh) -> list[str]:
    """The kinds of evidence whose table holds a row in the `Warehouse` `wh`, in one statement."""
    tables = [table for table, _ in _COLLECTION_KINDS.values()]
    found = wh.rows("SELECT " + ", ".join(f"EXISTS (FROM {identifier(t)})" for t in tables))[0]
    return [kind for kind, has in zip(_COLLECTION_KINDS, found, strict=True) if has]


_COLLECTIONS_SQL = collections_sql()



#: a model's name as every listing shows it (`views.common.model_labels` in Ibis): its name, and " @ " its revision
#: where another record of the same name, backend and dtype has another revision (a hosted model's snapshots)
MODEL_NAME_SQL = ("CASE WHEN revision IS NOT NULL AND min(revision) OVER same_model <> max(revision) OVER same_model "
                  "THEN name || ' @ ' || revision ELSE name END")
_SAME_MODEL = "WINDOW same_model AS (PARTITION BY name, backend, dtype)"
#: the registered models as `models` lists them, in plain SQL (`model_records`)
MODELS_SQL = f"""
SELECT {MODEL_NAME_SQL} AS model_name, dtype, quant AS quantization, converted_from,
       coalesce(backend, {literal(DEFAULT_BACKEND)}) AS backend, kind, source, revision, bos_policy, registered_at,
       model_key
FROM models {_SAME_MODEL} ORDER BY registered_at, model_key
"""
#: the collections with their models' names, in plain SQL: `model_names_of`'s rule (a key without a model record is
#: its own name, NULL dtype, DEFAULT_BACKEND)
def named_collections_sql(kinds: Iterable[str] = tuple(_COLLECTION_KINDS)) -> str:
    """`collections_sql(kinds)` with the models' names, in plain SQL: `model_names_of`'s rule (a key without a model
    record is its own name, NULL dtype, DEFAULT_BACKEND)."""
    return f"""
WITH coll AS ({collections_sql(kinds)})
SELECT coalesce(m.name, coll.model_key) AS model_name, m.dtype,
       coalesce(m.backend, {literal(DEFAULT_BACKEND)}) AS backend, coll.* EXCLUDE (model_key), coll.model_key
FROM coll LEFT JOIN (SELECT model_key, {MODEL_NAME_SQL} AS name, dtype, backend FROM models {_SAME_MODEL}) m
     USING (model_key)
ORDER BY coll.model_key, coll.dataset, coll.protocol, coll.settings
"""


#: the collections with their models' names over every kind of evidence
NAMED_COLLECTIONS_SQL = named_collections_sql()


def model_records(wh, columns) -> tuple[list[str], list[tuple]]:
    """(columns, rows) of the registered models (`MODELS_SQL`) from a `Warehouse`, without Ibis or pandas: what
    `biaslab info` and `biaslab models` print."""
    return _records(wh, MODELS_SQL, columns)


def collection_records(wh, columns) -> tuple[list[str], list[tuple]]:
    """(columns, rows) of the collections (`collections`, the same rows: `NAMED_COLLECTIONS_SQL`) from a
    `Warehouse`, without Ibis or pandas; only the kinds of evidence the warehouse holds are queried (none: no
    statement at all), which halves the time DuckDB takes to plan it on a warehouse of one or two kinds."""
    kinds = present_kinds(wh)
    if not kinds:
        return list(columns), []
    return _records(wh, named_collections_sql(kinds), columns)


def _records(wh, query_sql: str, columns) -> tuple[list[str], list[tuple]]:
    from ..sql.quoting import identifiers

    columns = list(columns)
    return columns, [tuple(r) for r in wh.rows(f"SELECT {identifiers(columns)} FROM ({query_sql})")]


def models(handle) -> ir.Table:
    """The registered models as an Ibis expression: model_name, dtype, quantization, converted_from (e.g. "gguf
    Q4_K_M"), backend (DEFAULT_BACKEND where the record names none), kind, source, revision, bos_policy,
    registered_at and model_key.

    Parameters
    ----------
    handle : a `WarehouseHandle`.
    """
    from ..views import model_labels

    labels = model_labels(handle.source)
    return labels.select("model_name", "dtype", "quantization", "converted_from", "backend", "kind", "source",
                         "revision", "bos_policy", "registered_at", "model_key").order_by(["registered_at",
                                                                                         "model_key"])


def collections(handle) -> pd.DataFrame:
    """One row per collection: model x dataset x protocol x settings (choice: mode, T, top_k, top_p, tokens, prompt
    version; gen: sampling settings; prob: scoring scheme), with `stimuli` (of the dataset in the warehouse; of a
    user dataset, its current version's), `requests` (distinct requests stored), `stored` (stimuli with evidence,
    any version), `pending` (stimuli of `stimuli` without evidence, as `runners collect` counts them),
    `rows` (evidence rows), and the last run of that collection with its status: the latest run of the model,
    dataset and protocol whose recorded settings (runs.params; the prompt version from runs.generation_config) equal
    the collection's: choice mode, temperature, top_k, top_p, max_new_tokens, prompt version (gen also
    min_new_tokens); in sample mode and gen also the seed, one of the seeds of the runs that wrote the collection's
    rows (not checked when no row names a run); prob: the scoring scheme (`pll`, any run for 'causal').

    Parameters
    ----------
    handle : a `WarehouseHandle` on the DuckDB engine.

    Returns
    -------
    pandas DataFrame with COLLECTION_COLUMNS.
    """
    if handle.engine != "duckdb":
        raise Unsupported("collections need the DuckDB engine (open the warehouse file or the export with "
                          "engine='duckdb')")
    frame = handle.query(_COLLECTIONS_SQL)
    return with_model_names(frame, models(handle).execute())[COLLECTION_COLUMNS]


#: model columns put next to `model_key` in metric tables
NAME_COLUMNS = ["model_name", "dtype", "backend"]


def with_model_names(frame: pd.DataFrame, model_table: pd.DataFrame) -> pd.DataFrame:
    """`frame` with model_name, dtype and backend inserted before its `model_key` column (the key stays).

    A key without a model record gets its key as name, NULL dtype and DEFAULT_BACKEND. Frames without `model_key`,
    or that already name models, are returned unchanged.

    Parameters
    ----------
    frame : a metric table.
    model_table : the output of `models(handle).execute()` (columns model_key, model_name, dtype, backend).
    """
    if "model_key" not in frame.columns or "model_name" in frame.columns:
        return frame
    names = model_names_of(frame["model_key"], model_table)
    out = frame.copy()
    at = list(frame.columns).index("model_key")
    for column in reversed(NAME_COLUMNS):
        out.insert(at, column, names[column].to_numpy())
    return out


def model_names_of(keys: pd.Series, model_table: pd.DataFrame) -> pd.DataFrame:
    """The NAME_COLUMNS of each key: the model's record, or the key as name, NULL dtype and DEFAULT_BACKEND for a
    key without one. The one naming rule of metric tables, listings and reports.

    Parameters
    ----------
    keys : model keys.
    model_table : the output of `models(handle).execute()` (columns model_key, model_name, dtype, backend).

    Returns
    -------
    DataFrame with NAME_COLUMNS, aligned with `keys` (same index).
    """
    import pandas as pd

    names = model_table.set_index("model_key")

    def looked_up(column: str) -> pd.Series:  # object dtype first: an all-missing lookup is float64 otherwise
        return keys.map(names[column]).astype(object)

    name, backend = looked_up("model_name"), looked_up("backend")
    return pd.DataFrame({"model_name": name.where(name.notna(), keys.astype(object)),
                         "dtype": looked_up("dtype"),
                         "backend": backend.where(backend.notna(), DEFAULT_BACKEND)},
                        index=keys.index)


def model_title(model_key: str, model_table: pd.DataFrame | None) -> str:
    """A model as people read it: "name · dtype · backend" (`model_names_of`; "dtype ?" where the record names none,
    e.g. a key without a model record).

    Parameters
    ----------
    model_key : the model's key.
    model_table : the output of `models(...)`, or None (then the name is the key).

    Returns
    -------
    The title text (not HTML-escaped).
    """
    import pandas as pd

    table = model_table if model_table is not None else pd.DataFrame(columns=["model_key", *NAME_COLUMNS])
    row = model_names_of(pd.Series([model_key]), table).iloc[0]
    dtype = row["dtype"] if isinstance(row["dtype"], str) and row["dtype"] else "dtype ?"
    return f"{row['model_name']} · {dtype} · {row['backend']}"
