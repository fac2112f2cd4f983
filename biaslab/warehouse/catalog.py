"""What a warehouse holds, for people: the models (by name, not only by key) and the collections (model x dataset x
protocol x settings, with how much is stored and the last run)."""

from __future__ import annotations

import ibis.expr.types as ir
import pandas as pd

from ..metrics.relations.common import DEFAULT_BACKEND, model_labels

#: columns of `collections`
COLLECTION_COLUMNS = ["model_name", "dtype", "backend", "dataset", "protocol", "settings", "stimuli", "requests",
                      "stored", "pending", "rows", "last_run", "last_status", "last_started", "model_key"]

_COLLECTIONS_SQL = """
WITH ds AS (SELECT dataset, count(*) AS stimuli FROM stimuli GROUP BY dataset),
exact AS (
    SELECT r.model_key, s.dataset, r.protocol,
           printf('exact T=%g top_k=%d top_p=%g new=%d prompt=%s', p.temperature, p.top_k, p.top_p, r.max_new_tokens,
                  r.prompt_version) AS settings,
           count(DISTINCT r.request_id) AS requests, count(DISTINCT r.stimulus_id) AS stored, sum(p.n)::BIGINT AS rows
    FROM choice_requests r JOIN stimuli s USING (stimulus_id)
    JOIN (SELECT model_key, request_id, temperature, top_k, top_p, count(*) AS n FROM choice_probs GROUP BY ALL) p
      USING (model_key, request_id)
    WHERE r.mode = 'exact' GROUP BY ALL),
sampled AS (
    SELECT r.model_key, s.dataset, r.protocol,
           printf('sample T=%g top_k=%d top_p=%g new=%d prompt=%s', x.temperature, x.top_k, x.top_p,
                  x.max_new_tokens, r.prompt_version) AS settings,
           count(DISTINCT r.request_id) AS requests, count(DISTINCT r.stimulus_id) AS stored, count(*) AS rows
    FROM choice_requests r JOIN stimuli s USING (stimulus_id)
    JOIN samples x USING (model_key, request_id)
    WHERE r.mode = 'sample' GROUP BY ALL),
generated AS (
    SELECT g.model_key, g.dataset, 'gen' AS protocol,
           printf('T=%g top_k=%d top_p=%g new=%d min=%d prompt=%s', x.temperature, x.top_k, x.top_p,
                  x.max_new_tokens, g.min_new_tokens, g.prompt_version) AS settings,
           count(DISTINCT g.request_id) AS requests, count(DISTINCT g.stimulus_id) AS stored, count(*) AS rows
    FROM gen_requests g JOIN samples x USING (model_key, request_id) GROUP BY ALL),
scored AS (
    SELECT q.model_key, s.dataset, q.protocol, 'scheme=' || q.scheme AS settings,
           count(DISTINCT q.request_id) AS requests, count(DISTINCT q.stimulus_id) AS stored, count(*) AS rows
    FROM sequence_scores q JOIN stimuli s USING (stimulus_id) GROUP BY ALL),
runs_of AS (
    SELECT model_key, params->>'dataset' AS dataset, params->>'protocol' AS protocol, run_id, status, started_at,
           row_number() OVER (PARTITION BY model_key, params->>'dataset', params->>'protocol'
                              ORDER BY started_at DESC) AS recent
    FROM runs WHERE model_key IS NOT NULL)
SELECT c.model_key, c.dataset, c.protocol, c.settings, ds.stimuli, c.requests, c.stored,
       greatest(coalesce(ds.stimuli, 0) - c.stored, 0) AS pending, c.rows,
       ro.run_id[:8] AS last_run, ro.status AS last_status, ro.started_at AS last_started
FROM (FROM exact UNION ALL FROM sampled UNION ALL FROM generated UNION ALL FROM scored) c
LEFT JOIN ds USING (dataset)
LEFT JOIN runs_of ro ON ro.model_key = c.model_key AND ro.dataset = c.dataset AND ro.protocol = c.protocol
                     AND ro.recent = 1
ORDER BY c.model_key, c.dataset, c.protocol, c.settings
"""


def models(handle) -> ir.Table:
    """The registered models as an Ibis expression: model_name, dtype, quantization, backend (DEFAULT_BACKEND where
    the record names none), kind, source, revision, bos_policy, registered_at and model_key.

    Parameters
    ----------
    handle : a `WarehouseHandle`.
    """
    labels = model_labels(handle.source)
    return labels.select("model_name", "dtype", "quantization", "backend", "kind", "source", "revision",
                         "bos_policy", "registered_at", "model_key").order_by(["registered_at", "model_key"])


def collections(handle) -> pd.DataFrame:
    """One row per collection: model x dataset x protocol x settings (choice: mode, T, top_k, top_p, tokens, prompt
    version; gen: sampling settings; prob: scoring scheme), with `stimuli` (of the dataset in the warehouse),
    `requests` (distinct requests stored), `stored` (stimuli with evidence), `pending` (stimuli without),
    `rows` (evidence rows), and the last run of that model, dataset and protocol with its status.

    Parameters
    ----------
    handle : a `WarehouseHandle` on the DuckDB engine.

    Returns
    -------
    pandas DataFrame with COLLECTION_COLUMNS.
    """
    if handle.engine != "duckdb":
        raise ValueError("collections need the DuckDB engine (open the warehouse file or the export with "
                         "engine='duckdb')")
    return collections_of(handle.backend.con, models(handle).execute())


def collections_of(con, model_table: pd.DataFrame) -> pd.DataFrame:
    """`collections` on a DuckDB connection with the tables (and `model_table` from `models(...)`)."""
    frame = con.execute(_COLLECTIONS_SQL).df()
    return with_model_names(frame, model_table)[COLLECTION_COLUMNS]


def warehouse_models(wh) -> pd.DataFrame:
    """`models` of a `Warehouse` (its DuckDB connection), executed."""
    import ibis

    class _Source:
        source = staticmethod(ibis.duckdb.from_connection(wh.con).table)

    return models(_Source).execute()


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
    names = model_table.set_index("model_key")
    keys = frame["model_key"]
    out = frame.copy()
    at = list(frame.columns).index("model_key")
    out.insert(at, "backend", keys.map(names["backend"]).fillna(DEFAULT_BACKEND).astype(object).to_numpy())
    out.insert(at, "dtype", keys.map(names["dtype"]).astype(object).to_numpy())
    out.insert(at, "model_name", keys.map(names["model_name"]).fillna(keys).astype(object).to_numpy())
    return out
