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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import engines
from ..warehouse import Warehouse
from ..warehouse.store import wal_path
from . import consent, runs, stimuli as stimuli_of
from .config import IN_PROCESS, CollectConfig
from .handle import EngineHandle, assume_known, engine_handle
from .survey import Survey, model_key, survey, survey_record, surveys

__all__ = ["CollectConfig", "CollectResult", "Survey", "collect", "collect_dataset", "model_key", "survey", "surveys"]


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


def collect(config: CollectConfig, *, progress: Callable[[int, int], Callable[[int], None]] | None = None,
            loaded=None, confirm: Callable[[str], bool] | None = None,
            notify: Callable[[str], None] | None = None) -> CollectResult:
    """Run one collection. `progress(total, done)` returns a callback advanced by the requests just written.

    `loaded` (a model an engine loaded beforehand, or a `Backend`: `engines.reuse`) skips model loading, for tests
    and benchmarks that reuse one model. A billed engine (a chat API: its prepared model has `estimate`) first
    estimates what the pending work will send (`planned`: requests, input and output tokens, the cost where prices
    are given): above the engine's `max_cost` the collection is refused before any request and any run row, and
    `confirm(line)` (the command line's question on a terminal) may decline it the same way.

    Evidence does not depend on load, history or another process (docs/design.md section 12):

    * the thread count is fixed for the whole run and recorded (`runs.params.threads`): `--threads`; else the count
      the first run of this work recorded (a resumed or extended collection: `runs.recorded_threads`); else the
      cores other processes leave free, measured once before the first batch (`threads.FreeCores`);
    * another live process collecting the same work (`runs.live_same_work`) is waited for, with one line through
      `notify` (default: stderr), and then only what it did not store is computed. The check and the new run's
      row are one transaction, so of two collections started together one registers first and the other waits.
    """
    from ..engines.threads import FreeCores, use_threads

    protocol, module = config.validate()
    notify = notify or consent.stderr_line
    # the free cores are measured over the time from here to the first batch (preparing, reading stimuli, loading)
    cores = FreeCores() if config.threads is None else None
    # a model that cannot be read stops here: no warehouse file is touched
    handle = engine_handle(config, module, loaded)
    try:
        capabilities = handle.backend.capabilities if handle.backend is not None else module.CAPABILITIES
        needs = protocol.require(config.backend, capabilities, handle.spec.kind, engines.declaration(module).why_not)
        handle.prepared.verify(needs)  # a server is asked what the protocol needs
        protocol.check_engine(handle.prepared)
        # shared: the DuckDB write lock is held only while something is written (each chunk's append), so `biaslab
        # sql`, `info`, `metrics` and `report` can read the warehouse while the model computes
        with _fresh_removed_on_failure(config.database()), \
                Warehouse.open(config.database(), shared=True, notify=notify) as wh:  # waits for readers, saying so
            selected, note, requests, work, notes, agree_late = _pending_work(wh, config, handle, protocol, confirm,
                                                                              notify)
            run_id, work, threads, how = _start_alone(wh, config, handle, protocol, requests, work, cores, notify)
            notes += [*_setup_lines(config, handle, threads, how), *protocol.setup_notes(handle.prepared)]
            with runs.finishing(wh, run_id, protocol.table) as stats:
                backend = handle.load_if(wh, work.count)
                if backend is not None and backend.batch:  # a chat API's batch mode: its batches are recorded here
                    from .batches import BatchJournal

                    backend.journal = BatchJournal(wh, handle.model_key, config.backend, run_id, agree=agree_late)
                advance = progress(len(requests), len(requests) - work.count) if progress else None
                try:
                    stats["added"] = protocol.run(wh, backend, work, run_id=run_id, chunk_size=config.chunk_size,
                                                  on_progress=advance)
                    stats["params"] = {"survey": survey_record(len(selected), len(requests))}  # for audit status
                finally:
                    if _in_process(config):
                        use_threads(config.threads)  # a count chosen for this run does not outlive it
            notes += protocol.result_notes(wh, handle.model_key, requests)
    finally:
        handle.close()
    return CollectResult(run_id, handle.model_key, len(selected), len(requests), work.count, stats["added"], note,
                         tuple(notes), _added_unit(protocol.table))


def _added_unit(table: str) -> str:
    """`schema.evidence.added_unit`, imported here rather than at the top: `audit status` imports this module, and
    the evidence schemas import Arrow."""
    from ..schema import evidence

    return evidence.added_unit(table)


@contextmanager
def _fresh_removed_on_failure(database):
    """A warehouse file this collection creates is removed again when the collection fails before its run is
    registered (a dataset that is not there, a cost not agreed to): nothing is left behind that holds no run, not
    even the folders made for it. A file or folder that existed before is never touched."""
    path = Path(database)
    fresh = not path.exists()
    folders = [p for p in (path.parent, *path.parent.parents) if not p.exists()]  # the folders it would create
    try:
        yield
    except BaseException:
        if fresh and path.is_file() and not _has_runs(path):
            for leftover in (path, wal_path(path)):
                leftover.unlink(missing_ok=True)
        for folder in folders:  # innermost first; only the ones this collection created, and only while empty
            if fresh and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def _has_runs(path: Path) -> bool:
    """Whether the warehouse at `path` holds a run (read-only; True when it cannot be read: then it is kept)."""
    try:
        with Warehouse.open(path, read_only=True) as wh:
            return bool(wh.rows("SELECT count(*) FROM runs")[0][0])
    except Exception:  # noqa: BLE001 (unreadable or locked: keep it)
        return True


def _setup_lines(config, handle, threads: int, how: str) -> list[str]:
    """The lines saying how the run computes: the CPU thread count and why (in-process CPU engine), and the
    measured default dtype with its reason (not given with --dtype)."""
    lines = []
    if config.backend == "hf" and str(handle.prepared.device or "cpu").startswith("cpu"):
        lines.append(f"threads: {threads} ({how})")
    chosen = handle.prepared.provenance.get("dtype_choice")
    if chosen:
        lines.append(f"dtype: {chosen['dtype']} ({chosen['reason']}{'; cached' if chosen['cached'] else ''})")
    return lines


#: seconds between two looks at a collection this one waits for
WAIT_POLL_S = 2.0


def _start_alone(wh, config, handle, protocol, requests, work, cores, notify):
    """Register this run unless another live process is collecting the same work; else wait for it (one line),
    recount what is pending and try again. Returns (run_id, work, threads, how the thread count was chosen)."""
    import time

    from ..engines.threads import use_threads

    key, told = handle.model_key, set()
    while True:
        with wh.transaction():  # the look and the new run's row together: no second process between them
            others = runs.live_same_work(wh, key, config, protocol)
            alive = [r for r in others if r["state"] == "alive"]
            if not alive:
                threads, how = _run_threads(wh, config, protocol, key, cores)
                used = use_threads(threads) if _in_process(config) else threads
                run_id = runs.start_run(wh, config, handle.prepared, protocol, used)
                break
        for run in alive:
            if run["run_id"] not in told:
                told.add(run["run_id"])
                notify(f"{config.dataset}: run {run['run_id'][:8]} (PID {run['pid']}, started "
                       f"{run['started_at']:%Y-%m-%d %H:%M:%S} UTC) is collecting the same work in {wh.path}: waiting "
                       f"for it to end, then computing only what it did not store")
        wh.release()
        time.sleep(WAIT_POLL_S)
        work = protocol.pending(wh, key, requests)
    for run in others:  # marked running elsewhere: cannot be checked from this host
        notify(f"{config.dataset}: run {run['run_id'][:8]} is marked running on host {run['host']} (not checkable "
               f"from here); if it is still collecting, this run may compute some of the same work")
    return run_id, work, threads, how


def _in_process(config: CollectConfig) -> bool:
    return config.backend in IN_PROCESS


def _run_threads(wh, config, protocol, key: str, cores) -> tuple[int, str]:
    """This run's thread count and why (see `collect`)."""
    if config.threads is not None:
        return config.threads, "--threads"
    recorded = runs.recorded_threads(wh, key, config, protocol)
    if recorded is not None:
        return recorded[0], f"as run {recorded[1][:8]} of this collection recorded, so resumed evidence is computed " \
                            f"alike; --threads N overrides"
    count = cores.threads()
    return count, f"the cores other processes leave free, {count} of {len(cores.cpus)}, measured once; fixed " \
                  f"for the run"


def _pending_work(wh, config: CollectConfig, handle: EngineHandle, protocol, confirm, notify=None):
    """(stimuli selected, a note on them, requests, the work pending, notes, a late agreement or None): the
    dataset's stimuli as selected, the protocol's requests and what of them the model has not stored. A billed
    engine's cost is estimated and agreed to first (`consent.billed`); a hosted model is asked which snapshot answers
    only then, and only when something is pending (`consent.settled`): until then its key is the one this warehouse
    last saw (`runs.known_revision`). Where a batch rerun only fetches, nothing is asked, and the late agreement
    (for the batch journal) asks about any request that turns out not to be in those batches before it is sent."""
    found, notes = stimuli_of.dataset_stimuli(wh, config)
    selected = stimuli_of.select(found, config)
    assume_known(wh, handle)
    selected, note = protocol.stimuli(wh, handle.model_key, selected)
    requests = protocol.requests(selected, handle.prepared)
    work = protocol.pending(wh, handle.model_key, requests)
    billed, agree_late = consent.billed(handle.prepared, protocol, work, confirm,
                                        consent.submitted_batches(wh, config, handle, protocol), notify)
    notes = [*notes, *billed]
    if handle.prepared.deferred and getattr(agree_late, "fetch_only", False):  # a rerun that only fetches sends
        handle.prepared.keep_assumed()  # nothing, not even the probe: its batches hold the snapshot it last saw
    if handle.prepared.deferred and work.count:  # agreed to: now ask which snapshot answers
        work, notes, agree_late = consent.settled(wh, config, handle, protocol, requests, work, notes, confirm,
                                                  notify, agree_late)
    if not handle.prepared.deferred:
        runs.register_model(wh, handle.spec)
    return selected, note, requests, work, notes, agree_late


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
