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
from ..schema import evidence
from ..warehouse import Warehouse
from ..warehouse.store import wal_path
from . import runs, stimuli as stimuli_of
from .config import CollectConfig

__all__ = ["CollectConfig", "CollectResult", "Survey", "collect", "collect_dataset", "model_key", "survey"]


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
        self.refresh()

    def refresh(self) -> None:
        """Read the model's identity again (a hosted model's key once its snapshot is assumed or settled)."""
        self.spec, self.model_key = self.prepared.spec, self.prepared.spec.model_key

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
    notify = notify or _stderr
    # the free cores are measured over the time from here to the first batch (preparing, reading stimuli, loading)
    cores = FreeCores() if config.threads is None else None
    handle = _handle(config, module, loaded)  # a model that cannot be read stops here: no warehouse file is touched
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
                finally:
                    use_threads(config.threads)  # a count chosen for this run does not outlive it
    finally:
        handle.close()
    return CollectResult(run_id, handle.model_key, len(selected), len(requests), work.count, stats["added"], note,
                         tuple(notes), evidence.added_unit(protocol.table))


@contextmanager
def _fresh_removed_on_failure(database):
    """A warehouse file this collection creates is removed again when the collection fails before its run is
    registered (a dataset that is not there, a cost not agreed to): nothing is left behind that holds no run. A file
    that existed before is never touched."""
    path = Path(database)
    fresh = not path.exists()
    try:
        yield
    except BaseException:
        if fresh and path.is_file() and not _has_runs(path):
            for leftover in (path, wal_path(path)):
                leftover.unlink(missing_ok=True)
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


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


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
                run_id = runs.start_run(wh, config, handle.prepared, protocol, use_threads(threads))
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
    engine's cost is estimated and agreed to first (`_billed`); a hosted model is asked which snapshot answers only
    then, and only when something is pending (`_settled`): until then its key is the one this warehouse last saw
    (`runs.known_revision`). Where a batch rerun only fetches (`_billed`), nothing is asked, and the late agreement
    (for the batch journal) asks about any request that turns out not to be in those batches before it is sent."""
    found, notes = stimuli_of.dataset_stimuli(wh, config)
    selected = stimuli_of.select(found, config)
    _assume_known(wh, handle)
    selected, note = protocol.stimuli(wh, handle.model_key, selected)
    requests = protocol.requests(selected, handle.prepared)
    work = protocol.pending(wh, handle.model_key, requests)
    billed, agree_late = _billed(handle.prepared, protocol, work, confirm, _submitted(wh, config, handle, protocol),
                                 notify)
    notes = [*notes, *billed]
    if handle.prepared.deferred and agree_late is not None:  # a rerun that only fetches sends nothing, not even the
        handle.prepared.keep_assumed()  # probe: its batches were submitted under the snapshot this warehouse last saw
    if handle.prepared.deferred and work.count:  # agreed to: now ask which snapshot answers
        work, notes, agree_late = _settled(wh, config, handle, protocol, requests, work, notes, confirm, notify,
                                           agree_late)
    if not handle.prepared.deferred:
        runs.register_model(wh, handle.spec)
    return selected, note, requests, work, notes, agree_late


def _settled(wh, config, handle, protocol, requests, work, notes: list[str], confirm, notify, agree_late):
    """(the pending work, the notes, the late agreement) once the provider has said which snapshot answers (one
    1-token request, after the cost was agreed to). Under another snapshot than the one assumed, the work pending
    under its key is read again; where it is more than was agreed to, it is estimated and agreed to again."""
    assumed, agreed = handle.model_key, protocol.planned(work)[0]  # the requests the user agreed to send
    handle.prepared.settle()
    handle.refresh()
    if handle.model_key == assumed:
        return work, notes, agree_late
    work = protocol.pending(wh, handle.model_key, requests)
    planned = protocol.planned(work)[0]
    if planned <= agreed:
        return work, notes, agree_late
    seen = (f"snapshot {handle.prepared.snapshot!r} answers now, not the one this warehouse last saw: {planned} "
            f"requests are pending under it")
    billed, agree_late = _billed(handle.prepared, protocol, work, confirm, _submitted(wh, config, handle, protocol),
                                 notify)
    return work, [*notes, seen, *billed], agree_late


def _submitted(wh, config, handle, protocol) -> list[tuple[str, int]]:
    """(batch id, requests in it) of the provider batches that earlier runs of this same work (model key, dataset,
    protocol version with its settings, shard) submitted and that ended 'pending' (the batch had not ended: a rerun
    fetches it); [] outside a chat API's batch mode."""
    if not handle.prepared.batch:
        return []
    from .batches import submitted

    pending_runs = [r["run_id"] for r in runs.same_work(wh, handle.model_key, config, protocol, ("pending",))]
    return submitted(wh, handle.model_key, config.backend, pending_runs)


def _billed(prepared, protocol, work, confirm, submitted=(), notify=None
            ) -> tuple[list[str], Callable[[int], str] | None]:
    """(notes, a late agreement or None): the estimate of a billed engine's pending work, refused above its
    max_cost or when not confirmed (one line; nothing sent, no run row); [] for other engines or nothing pending.

    A batch rerun whose pending requests were all submitted before (`submitted`: the batches of this work's runs
    that ended pending) only fetches their results: nothing is estimated or asked, `notify` says so, and the late
    agreement returned asks, as above, about any request the batches turn out not to hold, before it is sent."""
    from ..errors import UsageError

    if not prepared.billed or not work.count:
        return [], None
    requests, chars, out = protocol.planned(work)

    def agree(count: int) -> str:
        """The estimate of `count` of the pending requests, agreed to (its line), else UsageError."""
        share = count / requests if requests else 1.0
        planned = prepared.estimate(count, int(chars * share), int(out * share))
        why = planned.refused()
        if why:
            raise UsageError(f"{planned.line()}: {why}")
        if confirm is not None and not confirm(planned.line()):
            raise UsageError(f"not confirmed: nothing was sent ({planned.line()})")
        return planned.line()

    held = min(sum(n for _, n in submitted), requests)
    if not held:
        return [f"estimated before sending: {agree(requests)}"], None
    batches = ", ".join(batch for batch, _ in submitted)
    if held >= requests:
        line = (f"fetching: the {requests} pending requests were submitted before (batch {batches}); their results "
                f"are fetched, nothing is sent again unless a batch holds no reply for it (asked first)")
        (notify or _stderr)(line)
        return [line], agree
    # some pending requests are in earlier batches (fetched, not sent again): only the others are priced and asked
    # now; the late agreement asks about any request beyond those (one a batch holds no reply for) before it is sent
    sent = requests - held
    return [f"estimated before sending: {agree(sent)} ({held} more pending requests are in batch {batches}: "
            f"fetched, not sent again)"], _beyond(agree, sent)


def _beyond(agree: Callable[[int], str], agreed: int) -> Callable[[int], str]:
    """A late agreement that lets `agreed` newly submitted requests pass (agreed to before the run) and asks `agree`
    about every request submitted beyond them, before it is sent."""
    left = [agreed]

    def late(count: int) -> str:
        covered = min(count, left[0])
        left[0] -= covered
        return agree(count - covered) if count > covered else ""
    return late


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
    handle = _handle(config, module, None)
    try:
        with _read_only(config.database()) as wh:
            found, _ = stimuli_of.dataset_stimuli(wh, config, store=False)
            selected = stimuli_of.select(found, config)
            _assume_known(wh, handle)
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
    handle = _handle(config, module, None)
    try:
        if handle.prepared.deferred:
            with _read_only(config.database()) as wh:
                _assume_known(wh, handle)
        return handle.model_key
    finally:
        handle.close()


def _assume_known(wh, handle: EngineHandle) -> None:
    """A hosted model (`deferred`): its key becomes the snapshot this warehouse last saw (`runs.known_revision`);
    nothing is sent. Other models are left as prepared."""
    if handle.prepared.deferred:
        handle.prepared.assume(runs.known_revision(wh, handle.prepared))
        handle.refresh()


def _read_only(path) -> Warehouse:
    """The warehouse at `path` opened read-only, or an empty one in memory where there is none yet."""
    from pathlib import Path

    return Warehouse.open(path, read_only=True) if Path(path).exists() else Warehouse.empty()


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
