"""`runners collect`: one loop for every protocol and every engine: stimuli -> requests -> pending -> engine -> append,
resumable and idempotent.

Order of work: validate every argument (`CollectConfig.validate`: the dataset, the engine's options, the protocol's
settings) before anything is read; resolve the model without weights (`prepare`), refuse a missing capability and
let the engine verify what the protocol needs (a server is asked: `Prepared.verify`), all before the warehouse is
opened (a model or server that cannot serve leaves no file behind); find the stimuli; find what
is not stored yet; register the model and the run; load the weights only when
something is pending; let the protocol write chunk by chunk; mark the run finished (or failed / interrupted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import engines
from ..schema import evidence
from ..warehouse import Warehouse
from . import runs, stimuli as stimuli_of
from .config import CollectConfig

__all__ = ["CollectConfig", "CollectResult", "collect", "collect_dataset"]


@dataclass
class CollectResult:
    run_id: str
    model_key: str
    stimuli: int
    requests: int
    pending: int
    added: int
    note: str = ""
    notes: tuple[str, ...] = ()
    added_unit: str = "rows"  # what `added` counts: requests, samples or scored sequences


class EngineHandle:
    """A prepared model plus its backend once loaded (`backend`: None until some request is pending)."""

    def __init__(self, prepared, backend=None, owned: bool = True) -> None:
        self.prepared, self.backend, self.owned = prepared, backend, owned
        self.spec, self.model_key = prepared.spec, prepared.spec.model_key

    def load_if(self, wh: Warehouse, pending: int):
        """The backend, its weights loaded only when something is pending (a rerun with nothing to do loads
        nothing). The warehouse connection is released first: loading and computing take long, and readers may
        look meanwhile."""
        wh.release()
        if pending and self.backend is None:
            self.backend = self.prepared.load()
        return self.backend

    def close(self) -> None:
        if self.owned and self.backend is not None:
            self.backend.close()


def _handle(config: CollectConfig, module, loaded) -> EngineHandle:
    """The model: prepared by the backend without weights, or one passed in, for tests and benchmarks that reuse one
    model (a model an engine loaded, or a loaded `Backend`: `engines.reuse`)."""
    if loaded is None:
        return EngineHandle(module.prepare(config.model, config.backend_options()))
    prepared, backend = engines.reuse(loaded, config.max_tokens)
    return EngineHandle(prepared, backend, owned=False)


def collect(config: CollectConfig, *, progress: Callable[[int, int], Callable[[int], None]] | None = None,
            loaded=None, confirm: Callable[[str], bool] | None = None) -> CollectResult:
    """Run one collection. `progress(total, done)` returns a callback advanced by the requests just written.

    `loaded` (a model an engine loaded beforehand, or a `Backend`: `engines.reuse`) skips model loading, for tests
    and benchmarks that reuse one model. A billed engine (a chat API: its prepared model has `estimate`) first
    estimates what the pending work will send (`planned`: requests, input and output tokens, the cost where prices
    are given): above the engine's `max_cost` the collection is refused before any request and any run row, and
    `confirm(line)` (the command line's question on a terminal) may decline it the same way.
    """
    from ..engines.threads import FreeCores, use_threads

    protocol, module = config.validate()
    # --threads fixes the count; else it follows the cores other processes leave free, first measured over the
    # time from here to the first batch (preparing, reading stimuli, loading weights)
    cores = FreeCores() if config.threads is None else None
    handle = _handle(config, module, loaded)  # a model that cannot be read stops here: no warehouse file is touched
    try:
        capabilities = handle.backend.capabilities if handle.backend is not None else module.CAPABILITIES
        needs = protocol.require(config.backend, capabilities, handle.spec.kind, getattr(module, "WHY_NOT", None))
        handle.prepared.verify(needs)  # a server is asked what the protocol needs
        protocol.check_engine(handle.prepared)
        # shared: the DuckDB write lock is held only while something is written (each chunk's append), so `biaslab
        # sql`, `info`, `metrics` and `report` can read the warehouse while the model computes
        with Warehouse.open(config.database(), shared=True) as wh:
            found, notes = stimuli_of.dataset_stimuli(wh, config)
            selected = stimuli_of.select(found, config)
            selected, note = protocol.stimuli(wh, handle.model_key, selected)
            requests = protocol.requests(selected, handle.prepared)
            runs.register_model(wh, handle.spec)
            work = protocol.pending(wh, handle.model_key, requests)
            notes = [*notes, *_billed(handle.prepared, protocol, work, confirm)]
            run_id = runs.start_run(wh, config, handle.prepared, protocol, use_threads(config.threads))
            with runs.finishing(wh, run_id, protocol.table) as stats:
                backend = handle.load_if(wh, work.count)
                if backend is not None and cores is not None:
                    backend.follow_free_cores(cores)
                if getattr(backend, "batch", False):  # a chat API's batch mode: its batches are recorded here
                    from .batches import BatchJournal

                    backend.journal = BatchJournal(wh, handle.model_key, config.backend, run_id)
                advance = progress(len(requests), len(requests) - work.count) if progress else None
                try:
                    stats["added"] = protocol.run(wh, backend, work, run_id=run_id, chunk_size=config.chunk_size,
                                                  on_progress=advance)
                finally:
                    if cores is not None and cores.used:  # bf16 evidence can depend on it (docs/decisions.md)
                        stats["params"] = {"threads_used": sorted(cores.used)}
                    use_threads(config.threads)  # a count lowered for a neighbour does not outlive the run
    finally:
        handle.close()
    return CollectResult(run_id, handle.model_key, len(selected), len(requests), work.count, stats["added"], note,
                         tuple(notes), evidence.added_unit(protocol.table))


def _billed(prepared, protocol, work, confirm) -> list[str]:
    """The estimate of a billed engine's pending work, refused above its max_cost or when not confirmed (one line;
    nothing sent, no run row); [] for other engines or nothing pending."""
    from ..errors import UsageError

    estimate = getattr(prepared, "estimate", None)
    if estimate is None or not work.count:
        return []
    planned = estimate(*protocol.planned(work))
    why = planned.refused()
    if why:
        raise UsageError(f"{planned.line()}: {why}")
    if confirm is not None and not confirm(planned.line()):
        raise UsageError(f"not confirmed: nothing was sent ({planned.line()})")
    return [f"estimated before sending: {planned.line()}"]


def collect_dataset(dataset: str, *, progress: Callable[[int, int], Callable[[int], None]] | None = None,
                    loaded=None, **settings) -> CollectResult:
    """`runners collect` from Python (`biaslab.collect`): collect `dataset` with the model and settings given as
    keyword arguments, the command line's options by their field names.

    Parameters
    ----------
    dataset : a built-in dataset or a user dataset loaded into `db`.
    settings : `CollectConfig` fields (model, backend, dtype, db, data_dir, limit, protocol, ...) and the protocol's
        own settings (mode, temperature, top_k, samples, seed, ...), validated as the command line's: a setting the
        protocol does not take is refused in one line.
    progress, loaded : as `collect`.

    Returns
    -------
    CollectResult: run_id, model_key, stimuli, requests, pending (before the run) and added (in `added_unit`).

    Example: ``biaslab.collect("winopron", model="smollm2-135m", db="w.duckdb", limit=40, dtype="fp32")``.
    """
    return collect(CollectConfig(dataset=dataset, **settings), progress=progress, loaded=loaded)
