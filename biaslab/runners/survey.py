"""What a collection would do now, found read-only (`survey`, `surveys`, `model_key`): what `biaslab audit --dry-run`
and `audit status` show, and what the audit's cost caps price.

A collection whose last run of exactly the same work finished (`known`: the same model arguments, dataset, selection
and protocol settings, recorded in `runs.params`) is answered from the warehouse alone: its model key and the counts
that run recorded, no model prepared and no stimuli read. Any other is surveyed in full, the model prepared without
weights once per model and the stimuli read once per dataset for all the collections `surveys` is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import stimuli as stimuli_of
from .config import IN_PROCESS, CollectConfig
from .handle import assume_known, engine_handle, read_only

__all__ = ["Survey", "known", "model_key", "survey", "survey_record", "surveys"]

#: the `CollectConfig` fields that name the model (its key is found from them)
MODEL_FIELDS = ("model", "backend", "dtype", "quant", "revision", "model_args", "engine_args")
#: the fields that select the stimuli of a collection
SELECTION_FIELDS = ("dataset", "limit", "limit_order", "limit_seed", "where", "accept_modified", "loader_options")


@dataclass(frozen=True)
class Survey:
    """What one collection would do now, found without computing or writing anything (`survey`): the model key,
    the stimuli selected, the requests, those not stored yet, and for a billed engine the estimate of what they would
    send ("" otherwise). `known`: answered from a finished run's record, without the model."""

    model_key: str
    stimuli: int
    requests: int
    pending: int
    estimate: str = ""
    cost: float | None = None        # the estimate's cost in USD (None: not billed, or no prices given)
    known: bool = False


def _plain(value: Any) -> Any:
    """A value as `runs.params` stores it (JSON, non-JSON values as text)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _shard(value: str | None) -> str | None:
    return None if value in (None, "0/1") else value


def work_of(config: CollectConfig, protocol) -> dict[str, Any]:
    """What identifies the work of a collection in its run's recorded parameters: the model's fields, the selection,
    the shard, the protocol and every protocol setting (defaults included)."""
    fields = {name: getattr(config, name) for name in (*MODEL_FIELDS, *SELECTION_FIELDS)}
    return _plain({**fields, **protocol.settings.model_dump(), "protocol": protocol.name,
                   "shard": _shard(config.shard)})


def survey_record(stimuli: int, requests: int) -> dict[str, Any]:
    """What a finished run records of its work (`runs.params.survey`): the stimuli selected, the requests, and the
    biaslab version that counted them (a later version may render other requests: then the work is surveyed anew)."""
    from .. import __version__

    return {"stimuli": stimuli, "requests": requests, "biaslab": __version__}


def known(wh, config: CollectConfig, protocol, index: dict | None = None) -> Survey | None:
    """The collection answered from the warehouse alone, where the latest run of exactly this work (`work_of`) finished
    and recorded its counts (`params.survey`, written by `collect` since issue 72), with an explicit dtype (an
    automatic one depends on the machine) and, for a user's dataset, no load of it since; else None. `index`: a dict
    kept across calls on one warehouse (each run's parameters are read once)."""
    latest = _latest(wh, config, protocol, index if index is not None else {})
    if latest is None or config.dtype is None:
        return None
    key, status, started, counts = latest
    if status != "finished" or not isinstance(counts, dict) or counts.get("biaslab") != survey_record(0, 0)["biaslab"]:
        return None  # the latest run of this work did not finish, predates the record or was counted by another
        # biaslab version: survey it in full
    loads = _user_loads(wh, index)
    if config.dataset in loads and loads[config.dataset] > started:
        return None  # the dataset was loaded again since: its stimuli may differ
    if not _unchanged_since(config.model, started):
        return None  # a model folder or file written since: its key (a hash of its files) may differ
    return Survey(key, int(counts["stimuli"]), int(counts["requests"]), 0, known=True)


def _unchanged_since(model: str, started) -> bool:
    """Whether the model named by a local path has no file newer than `started` (naive UTC, as the runs table holds
    times); a name that is no path (an alias, a hub id, a hosted model) is taken as it was (a hub id without
    --revision follows what the run resolved; pin --revision where the hub's branch may move)."""
    from datetime import UTC, datetime

    path = Path(model).expanduser()
    if not path.exists():
        return True
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    newest = max((p.stat().st_mtime for p in files), default=0.0)
    return datetime.fromtimestamp(newest, UTC).replace(tzinfo=None) <= started


def _user_loads(wh, index: dict | None) -> dict[str, Any]:
    """User dataset -> the time of its latest load."""
    index = {} if index is None else index
    if "loads" not in index:
        index["loads"] = dict(wh.rows("SELECT dataset, max(loaded_at) FROM user_datasets GROUP BY dataset")) \
            if "user_datasets" in _tables(wh, index) else {}
    return index["loads"]


def _tables(wh, index: dict | None) -> list[str]:
    if index is None:
        return wh.tables()
    if "tables" not in index:
        index["tables"] = wh.tables()
    return index["tables"]


def _latest(wh, config: CollectConfig, protocol, index: dict) -> tuple | None:
    """(model key, status, start, recorded counts) of the latest run of exactly this work, or None."""
    want = work_of(config, protocol)
    names = tuple(sorted(want))
    if "runs" not in index:
        index["runs"] = wh.rows("SELECT model_key, params, status, started_at FROM runs WHERE model_key IS NOT NULL "
                                "ORDER BY started_at DESC, run_id DESC") if "runs" in _tables(wh, index) else []
        index["params"] = [json.loads(p) if p else {} for _, p, _, _ in index["runs"]]
        for params in index["params"]:
            params["shard"] = _shard(params.get("shard"))
    if names not in index:  # the latest run per work, for the fields this protocol's work is named by
        latest: dict[str, tuple] = {}
        for (key, _, status, started), params in zip(index["runs"], index["params"]):
            work = json.dumps({n: params.get(n) for n in names}, sort_keys=True)
            latest.setdefault(work, (key, status, started, params.get("survey")))
        index[names] = latest
    return index[names].get(json.dumps({n: want[n] for n in names}, sort_keys=True))


def survey(config: CollectConfig) -> Survey:
    """The collection `config` stands for, surveyed read-only (`surveys` of one, the model prepared if need be)."""
    return surveys([config])[0]


def surveys(configs: list[CollectConfig], prepare: bool | str = True) -> list[Survey | None]:
    """The collections `configs` stand for, surveyed read-only: the arguments validated as `collect` validates them;
    each answered from the warehouse where its work is `known`; else the model prepared without weights (once per
    model: a hosted model is sent nothing and its key is the snapshot --db last saw), the stimuli read from the data
    directory or --db without storing them (once per dataset), and the requests counted against what --db already
    stores (an empty in-memory warehouse when --db does not exist). Writes nothing anywhere.

    Parameters
    ----------
    configs : the collections (each one's `database()` is read: --db, or the shard's own file with --out-shard).
    prepare : False: a model computed in this process (hf, vllm) is never prepared (no tokenizer read, no GGUF
        converted); a collection of one that is not `known` is None (its key and requests need the model).
        "started": prepared only for a collection with a run of its work that did not finish (partly stored).

    Returns
    -------
    One `Survey` (or None) per config, in order.
    """
    handles: dict[str, Any] = {}
    found_of: dict[str, list] = {}
    opened: dict[str, tuple] = {}  # database -> (warehouse, the index of its runs): each opened once
    out: list[Survey | None] = []
    try:
        for config in configs:
            protocol = config.plugin()  # the protocol and its settings; the engine is imported only to prepare
            if str(config.database()) not in opened:
                opened[str(config.database())] = (read_only(config.database()), {})
            wh, index = opened[str(config.database())]
            done = known(wh, config, protocol, index)
            started = prepare == "started" and _latest(wh, config, protocol, index) is not None
            if done is None and (prepare is True or started or config.backend not in IN_PROCESS):
                protocol, module = config.validate()
                ident = json.dumps(_plain({n: getattr(config, n) for n in MODEL_FIELDS}), sort_keys=True)
                if ident not in handles:
                    handles[ident] = engine_handle(config, module, None)
                done = _full(wh, config, protocol, handles[ident], found_of)
            out.append(done)
    finally:
        for handle in handles.values():
            handle.close()
        for wh, _ in opened.values():
            wh.close()
    return out


def _full(wh, config: CollectConfig, protocol, handle, found_of: dict[str, list]) -> Survey:
    """One collection surveyed with its model prepared (see `surveys`)."""
    where = json.dumps(_plain({n: getattr(config, n) for n in ("dataset", "data_dir", "accept_modified",
                                                               "loader_options")}), sort_keys=True)
    where = f"{config.database()}\x1f{where}"
    if where not in found_of:
        found_of[where] = stimuli_of.dataset_stimuli(wh, config, store=False)[0]
    selected = stimuli_of.select(found_of[where], config)
    assume_known(wh, handle)
    selected, _ = protocol.stimuli(wh, handle.model_key, selected)
    requests = protocol.requests(selected, handle.prepared)
    work = protocol.pending(wh, handle.model_key, requests)
    estimate, cost = "", None
    if handle.prepared.billed and work.count:
        planned = handle.prepared.estimate(*protocol.planned(work))
        estimate, cost = planned.line(), getattr(planned, "cost", None)
    return Survey(handle.model_key, len(selected), len(requests), work.count, estimate, cost)


def model_key(config: CollectConfig) -> str:
    """The model key `config`'s collection stores its evidence under, found as `survey` finds it (from a finished
    run of the same work where there is one; else the model prepared without weights; a hosted model's key is the
    snapshot --db last saw), without reading any stimuli."""
    with read_only(config.database()) as wh:
        done = known(wh, config, config.plugin())
    if done is not None:
        return done.model_key
    _, module = config.validate()
    handle = engine_handle(config, module, None)
    try:
        if handle.prepared.deferred:
            with read_only(config.database()) as wh:
                assume_known(wh, handle)
        return handle.model_key
    finally:
        handle.close()
