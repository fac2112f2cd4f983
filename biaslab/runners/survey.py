"""What a collection would do now, found read-only (`survey`, `model_key`): what `biaslab audit --dry-run` and
`audit status` show, and what the audit's cost caps price."""

from __future__ import annotations

from dataclasses import dataclass

from . import stimuli as stimuli_of
from .config import CollectConfig
from .handle import assume_known, engine_handle, read_only

__all__ = ["Survey", "model_key", "survey"]


@dataclass(frozen=True)
class Survey:
    """What one collection would do now, found without computing or writing anything (`survey`): the model key,
    the stimuli selected, the requests, those not stored yet, and for a billed engine the estimate of what they would
    send ("" otherwise)."""

    model_key: str
    stimuli: int
    requests: int
    pending: int
    estimate: str = ""
    cost: float | None = None        # the estimate's cost in USD (None: not billed, or no prices given)


def survey(config: CollectConfig) -> Survey:
    """The collection `config` stands for, surveyed read-only: the arguments validated as `collect` validates them,
    the model prepared without weights (a hosted model is sent nothing: its key is the snapshot --db last saw), the
    stimuli read from the data directory or --db without storing them, and the requests counted against what --db
    already stores (an empty in-memory warehouse when --db does not exist). Writes nothing anywhere.

    Parameters
    ----------
    config : the collection (its `database()` is read: --db, or the shard's own file with --out-shard).

    Returns
    -------
    `Survey`.
    """
    protocol, module = config.validate()
    handle = engine_handle(config, module, None)
    try:
        with read_only(config.database()) as wh:
            found, _ = stimuli_of.dataset_stimuli(wh, config, store=False)
            selected = stimuli_of.select(found, config)
            assume_known(wh, handle)
            selected, _ = protocol.stimuli(wh, handle.model_key, selected)
            requests = protocol.requests(selected, handle.prepared)
            work = protocol.pending(wh, handle.model_key, requests)
        estimate, cost = "", None
        if handle.prepared.billed and work.count:
            planned = handle.prepared.estimate(*protocol.planned(work))
            estimate, cost = planned.line(), getattr(planned, "cost", None)
    finally:
        handle.close()
    return Survey(handle.model_key, len(selected), len(requests), work.count, estimate, cost)


def model_key(config: CollectConfig) -> str:
    """The model key `config`'s collection stores its evidence under, found as `survey` finds it (the model prepared
    without weights; a hosted model's key is the snapshot --db last saw), without reading any stimuli."""
    _, module = config.validate()
    handle = engine_handle(config, module, None)
    try:
        if handle.prepared.deferred:
            with read_only(config.database()) as wh:
                assume_known(wh, handle)
        return handle.model_key
    finally:
        handle.close()
