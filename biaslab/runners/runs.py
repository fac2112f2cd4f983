"""The lifecycle of a collection's run (docs/design.md section 3: provenance): the model's record, the run's row with
everything that made its numbers, the shard stamp, and its end: finished, interrupted (Ctrl-C, SIGTERM, SIGHUP) or
failed, with the rows it added."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import UsageError


def register_model(wh, spec) -> None:
    """The spec's `models` row, with the columns this warehouse's `models` table has (the backend columns come
    with a schema migration; older files keep the identity columns)."""
    columns = set(wh.columns("models"))
    wh.append("models", [{k: v for k, v in spec.to_row().items() if k in columns}])


def known_revision(wh, prepared) -> str | None:
    """The revision (a hosted model's snapshot) under which this warehouse last registered the model `prepared`
    names with the same settings: the latest `models` row of its name and backend whose key equals the key at that
    revision (`prepared.spec_at`); None when there is none."""
    spec = prepared.spec
    rows = wh.rows("SELECT model_key, revision FROM models WHERE name = ? AND backend = ? "
                   "ORDER BY registered_at DESC, model_key", [spec.name, spec.backend])
    return next((revision for key, revision in rows if prepared.spec_at(revision).model_key == key), None)


def start_run(wh, config, prepared, protocol, threads: int) -> str:
    """Register the run (status 'running'): the command, every common option and protocol setting, the threads
    used, the engine's version, the protocol's version and generation config; stamp a shard file first."""
    extra, generation = protocol.provenance()
    if config.out_shard is not None:  # a shard file (a shard collected into --db itself is not stamped)
        stamp_shard(wh, config, prepared.spec.model_key, extra)
    params = {**config.model_dump(exclude={"db"}), **protocol.settings.model_dump(),
              "protocol": protocol.name, "threads": threads, "backend_version": prepared.spec.backend_version,
              **prepared.provenance, **extra}
    return wh.start_run(config.command_line(), params, generation_config=generation,
                        device=str(prepared.device or config.backend), model_key=prepared.spec.model_key)


def same_work(wh, model_key: str, config, protocol, statuses: tuple[str, ...]) -> list[dict[str, Any]]:
    """Runs in `wh` of the same work as this one, with one of `statuses`, oldest first: the same model key, dataset,
    protocol version and shard (runs of two different shards of one dataset are not the same work). Each as a
    dict: run_id, threads (the count it recorded), rows_added, host, pid, pid_started, started_at."""
    extra, _ = protocol.provenance()
    rows = wh.rows(
        "SELECT run_id, json_extract_string(params, '$.threads'), rows_added, host, pid, pid_started, started_at "
        "FROM runs WHERE model_key = ? AND json_extract_string(params, '$.dataset') = ? "
        "AND json_extract_string(params, '$.protocol_version') IS NOT DISTINCT FROM ? "
        "AND json_extract_string(params, '$.shard') IS NOT DISTINCT FROM ? "
        "AND list_contains(?::VARCHAR[], status) ORDER BY started_at, run_id",
        [model_key, config.dataset, extra.get("protocol_version"), config.shard, list(statuses)])
    keys = ("run_id", "threads", "rows_added", "host", "pid", "pid_started", "started_at")
    return [dict(zip(keys, row)) for row in rows]


def recorded_threads(wh, model_key: str, config, protocol) -> tuple[int, str] | None:
    """The thread count the first run of this work that stored evidence recorded, and its run id; None where no
    run of this work stored anything (a new collection). A resumed or extended collection uses it, so that its
    evidence is computed as the first run's was (bf16 products can round differently with another count:
    docs/decisions.md, "Evidence independent of load")."""
    for run in same_work(wh, model_key, config, protocol, ("finished", "interrupted", "failed", "running")):
        if run["rows_added"] and run["threads"] and str(run["threads"]).isdigit():
            return int(run["threads"]), run["run_id"]
    return None


def live_same_work(wh, model_key: str, config, protocol) -> list[dict[str, Any]]:
    """Runs of the same work (`same_work`) still marked running whose process is alive on this host; a run marked
    running on another host cannot be checked from here and is returned with state 'unknown'."""
    from ..warehouse.process import process_state

    out = []
    for run in same_work(wh, model_key, config, protocol, ("running",)):
        state = process_state(run["host"], run["pid"], run["pid_started"])
        if state != "dead":
            out.append({**run, "state": state})
    return out


def stamp_shard(wh, config, model_key: str, extra: dict[str, Any]) -> None:
    """Record what a shard file holds, so that `biaslab warehouse merge` can refuse mixed shards."""
    index, count = config.shard_position()
    identity = {"dataset": config.dataset, "protocol": config.resolved_protocol(), "model_key": model_key,
                "protocol_version": extra.get("protocol_version"), "count": count, "index": index,
                "limit": config.limit}
    if config.limit is not None:  # which items the limit takes (shards of two samples must not merge)
        identity.update(limit_order=config.limit_order, limit_seed=config.limit_seed)
    previous = wh.get_meta("shard")
    if previous is not None and json.loads(previous) != identity:
        raise UsageError(f"{wh.path} already holds shard {previous}; use another --out-shard folder")
    wh.set_meta("shard", json.dumps(identity, sort_keys=True))


class RunInterrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, SIGHUP) received during a collection: the run ends 'interrupted'."""


@contextmanager
def terminations_interrupt() -> Iterator[None]:
    """While collecting, SIGTERM and SIGHUP raise RunInterrupted (like Ctrl-C) so the run is marked and the chunk in
    flight rolled back; the previous handlers come back afterwards. Only the main thread can install handlers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise RunInterrupted(f"received {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, _raise) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def finishing(wh, run_id: str, table: str) -> Iterator[dict]:
    """Mark the run finished, interrupted (Ctrl-C, SIGTERM, SIGHUP), pending (a provider's batch that has not ended
    within the engine's batch_wait_s: rerun to fetch it) or failed (any other exception: out of memory,
    disk full, a bug), with the rows it added to `table` (the protocol's evidence table; for a run that did not
    finish, its rows stored there under its run_id: the chunks committed before it stopped). A SIGKILL cannot be
    caught: `biaslab warehouse check` finds such runs by their dead process and `--repair` marks them
    interrupted. Yields a dict whose "added" the caller sets, and "params" if it has parameters to add to the run's
    (`Warehouse.finish_run`)."""
    from ..engines.chat import BatchPending
    from ..warehouse.errors import is_interrupt

    stats = {"added": 0}
    status = "failed"
    with terminations_interrupt():
        try:
            yield stats
            status = "finished"
        except KeyboardInterrupt:  # includes RunInterrupted
            status = "interrupted"
            raise
        except BatchPending:  # a provider's batch still running: its id is stored, a rerun fetches it
            status = "pending"
            raise
        except Exception as exc:  # a signal while DuckDB ran a statement comes as DuckDB's InterruptException
            if is_interrupt(exc):
                status = "interrupted"
            raise
        finally:
            try:
                if status != "finished":
                    stats["added"] = wh.count(table, "run_id = ?", [run_id])
                wh.finish_run(run_id, status=status, rows_added=stats["added"], params=stats.get("params"))
            except Exception as exc:  # e.g. the disk is still full: keep the original error, say what is left
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                print(f"biaslab: could not mark run {run_id[:8]} {status} ({reason}); "
                      f"`biaslab warehouse check --repair --db {wh.path}` marks it later", file=sys.stderr)
