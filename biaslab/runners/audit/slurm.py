"""The Slurm executor: a plan's units as one job array (`sbatch --array`, a task per unit, each into its own shard
file) and one merge job after it (`afterany`); a task's own state file; the units' states from the warehouse, the
state files and `squeue`. Slurm's own commands, no scheduler of ours."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...errors import UsageError
from .plan import Plan, Unit

__all__ = ["sbatch_script", "submit_slurm", "run_task", "merge_all", "queued", "submitted", "pending_jobs",
           "unit_states", "read_state"]


#: the file of a task's state, under WORKDIR/tasks/
def _state_path(plan: Plan, unit: Unit) -> Path:
    return plan.work_folder / "tasks" / f"{unit.name}.json"


def _write_state(plan: Plan, unit: Unit, **state) -> None:
    path = _state_path(plan, unit)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"unit": unit.label, **state}, default=str, indent=1), encoding="utf-8")
    temporary.replace(path)


def read_state(plan: Plan, unit: Unit) -> dict[str, Any] | None:
    """The state a task of `unit` recorded (None if no task ran it)."""
    try:
        return json.loads(_state_path(plan, unit).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def sbatch_script(plan: Plan, command: str, *, array: str | None, job_name: str, log: str,
                  dependency: str | None = None) -> str:
    """A batch script: #SBATCH lines (job name, output, the plan's slurm options, the array or dependency), the
    plan's setup lines, then `command` (shell text). A value with whitespace or a control character, which would
    end or split its #SBATCH line, is refused in one line (the plan's own options are checked when it is read)."""
    for what, value in (("job name", job_name), ("log path (the plan's workdir)", log), ("array", array),
                        ("dependency", dependency)):
        if value is not None and re.search(r"[\s\x00-\x1f\x7f]", value):
            raise UsageError(f"--executor slurm: the {what} {value!r} has whitespace or a control character, which "
                             f"would break its #SBATCH line; use a workdir (and db) path without them")
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --output={log}"]
    if array is not None:
        lines.append(f"#SBATCH --array={array}")
        lines += [f"#SBATCH {flag}" for flag in plan.slurm.flags()]
    else:  # the merge job: one CPU, no GPU, the plan's partition and account
        lines += [f"#SBATCH --{k}={v}" for k, v in (("partition", plan.slurm.partition),
                                                     ("account", plan.slurm.account)) if v]
    if dependency is not None:
        lines.append(f"#SBATCH --dependency={dependency}")
    lines += ["set -eo pipefail", plan.slurm.setup, "exec " + command, ""]
    return "\n".join(lines)


def _biaslab_command() -> list[str]:
    """How a Slurm job runs biaslab: this Python, so the job uses the environment that submitted it."""
    return [sys.executable, "-m", "biaslab.cli.biaslab_entry"]


def _sbatch(script: Path) -> str:
    """Submit `script`; the job id (one line naming sbatch's error otherwise)."""
    try:
        done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True,
                              timeout=60)
    except FileNotFoundError:
        raise UsageError("--executor slurm: sbatch is not on PATH (is this a Slurm login node?)") from None
    if done.returncode != 0:
        raise UsageError(f"sbatch refused {script}: {done.stderr.strip().splitlines()[-1] if done.stderr else ''}")
    return done.stdout.strip().split(";")[0]


def submit_slurm(plan: Plan, units: list[Unit], plan_file: Path) -> tuple[str | None, str, Path]:
    """Submit `units` as one job array (task i collects units[i] into its shard file) and one merge job that runs
    after every task has ended (`afterany`: it merges what was stored and lists what failed). With no unit to run,
    only the merge job is submitted (shards stored but not merged yet). Returns (array job id or None, merge job id,
    the job folder with the scripts and the task -> unit list)."""
    work = plan.work_folder
    folder = work / "jobs" / time.strftime("%Y%m%d-%H%M%S")
    suffix = 0
    while folder.exists():
        suffix += 1
        folder = folder.with_name(f"{folder.name.split('.')[0]}.{suffix}")
    folder.mkdir(parents=True)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (folder / "units.json").write_text(json.dumps([u.name for u in units]), encoding="utf-8")
    base = [*_biaslab_command(), "audit"]
    plan_args = [str(plan_file), "--db", str(plan.database)]
    array_id = None
    if units:
        throttle = f"%{plan.slurm.max_parallel}" if plan.slurm.max_parallel else ""
        script = folder / "array.sbatch"
        command = shlex.join([*base, "task", *plan_args, "--job", str(folder)]) + ' --task "$SLURM_ARRAY_TASK_ID"'
        script.write_text(sbatch_script(plan, command,
                                        array=f"0-{len(units) - 1}{throttle}", job_name=f"biaslab-{plan.name}",
                                        log=str(work / "logs" / "%A_%a.out")), encoding="utf-8")
        array_id = _sbatch(script)
        (folder / "array.id").write_text(array_id, encoding="utf-8")
    merge = folder / "merge.sbatch"
    merge.write_text(sbatch_script(plan, shlex.join([*base, "merge", *plan_args]),
                                   array=None, job_name=f"biaslab-{plan.name}-merge", log=str(work / "logs" / "%j.out"),
                                   dependency=f"afterany:{array_id}" if array_id else None), encoding="utf-8")
    merge_id = _sbatch(merge)
    (folder / "merge.id").write_text(merge_id, encoding="utf-8")
    return array_id, merge_id, folder


def run_task(plan: Plan, units: list[Unit], job: Path, task: int, *, progress=None) -> None:
    """One array task: collect units[job's list[task]] into its shard file, recording its state (running, then
    finished or failed with the error) in WORKDIR/tasks/; a failure is raised after it is recorded."""
    from ..collect import collect

    names = json.loads((Path(job) / "units.json").read_text(encoding="utf-8"))
    if not 0 <= task < len(names):
        raise UsageError(f"task {task} is not in the job's {len(names)} tasks ({job})")
    by_name = {u.name: u for u in units}
    if names[task] not in by_name:
        raise UsageError(f"task {task}: unit {names[task]} is no longer in the plan (was it edited after the "
                         f"submission?)")
    unit = by_name[names[task]]
    slurm = {"job": os.environ.get("SLURM_JOB_ID"), "array_job": os.environ.get("SLURM_ARRAY_JOB_ID"),
             "task": task, "host": os.uname().nodename, "pid": os.getpid()}
    _write_state(plan, unit, state="running", started=time.time(), **slurm)
    try:
        result = collect(unit.shard_config(plan.work_folder), progress=progress)
    except BaseException as exc:  # noqa: BLE001 - the state says why, then the task fails
        what = "interrupted (a signal: scancel, the time limit)" if isinstance(exc, KeyboardInterrupt) else \
            f"{type(exc).__name__}: {exc}"
        _write_state(plan, unit, state="failed", error=what, ended=time.time(), **slurm)
        raise
    _write_state(plan, unit, state="finished", ended=time.time(), added=result.added, pending=result.pending,
                 model_key=result.model_key, **slurm)


def merge_all(plan: Plan) -> list[tuple[str, dict[str, int]]]:
    """Merge every collection's shard folder under WORKDIR/shards/ into the plan's warehouse (`merge_shards`:
    checked first, idempotent); returns (collection, rows added per table)."""
    from ...warehouse.merge import merge_shards

    out = []
    root = plan.work_folder / "shards"
    for folder in sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []:
        if any(folder.glob("*.duckdb")):
            out.append((folder.name, merge_shards(folder, plan.database)))
    return out


def queued() -> dict[str, str]:
    """Slurm's jobs of this user still queued or running: "ARRAYJOB_TASK" (or "JOB") -> state, from `squeue`; {}
    when squeue is not available."""
    try:
        done = subprocess.run(["squeue", "-h", "-r", "--me", "-o", "%i %T"], capture_output=True, text=True,
                              timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1].lower()
    return out


def unit_states(plan: Plan, units: list[Unit]) -> list[dict[str, Any]]:
    """Per unit: `state` (stored, partly stored, running, pending, failed, not started, stored in its shard file
    (not merged)), the requests, those stored in the plan's warehouse, the Slurm job, and the error of a failed
    task; from the warehouse (`survey`, read-only), the task state files and `squeue`. The surveys come first and
    the queue and the task states last, so the picture of the queue is as fresh as the answer."""
    from ..collect import surveys as survey_all

    surveys = survey_all([unit.config for unit in units], prepare="started")
    sent = submitted(plan)
    jobs = queued() if sent else {}  # nothing submitted: no need to ask Slurm (squeue can wait seconds for it)
    rows = []
    for unit, found in zip(units, surveys):
        task = read_state(plan, unit) or {}
        job = sent.get(unit.name)
        in_queue = jobs.get(job) if job else None
        if job and task.get("array_job") and f"{task['array_job']}_{task.get('task')}" != job:
            task = {}  # the state of an earlier submission's task: this one has not started yet
        state, error = "not started", ""
        # None: no run of its work here (its requests need the model, which a status does not read)
        requests, pending = (found.requests, found.pending) if found is not None else ("?", None)
        if pending == 0:
            state = "stored"
        elif in_queue is not None:
            state = "running" if in_queue in ("running", "completing") else in_queue
        elif task.get("state") == "failed":
            state, error = "failed", task.get("error", "")
        elif task.get("state") == "running":  # recorded running, not in the queue: the task was killed
            state, error = "failed", "the task ended without recording an end (killed: scancel, time or memory limit)"
        elif job and not task:  # submitted, not queued, never started: cancelled while pending
            state, error = "failed", f"task {job} ended without starting (cancelled while pending?)"
        elif task.get("state") == "finished":
            state = "stored in its shard file (not merged)"
        elif found is not None and found.pending < found.requests:
            state = "partly stored"
        rows.append({"unit": unit.label, "state": state, "requests": requests,
                     "stored": found.requests - found.pending if found is not None else 0, "job": job or "",
                     "error": error, "model_key": found.model_key if found is not None else "",
                     "estimate": found.estimate if found is not None else ""})
    return rows


def submitted(plan: Plan) -> dict[str, str]:
    """Unit name -> the Slurm job of its latest submitted task ("ARRAYJOB_TASK"), from the job folders."""
    out: dict[str, str] = {}
    root = plan.work_folder / "jobs"
    for folder in sorted(root.glob("*")) if root.is_dir() else []:  # named by time: the latest last
        try:
            array = (folder / "array.id").read_text(encoding="utf-8").strip()
            names = json.loads((folder / "units.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        out.update({name: f"{array}_{task}" for task, name in enumerate(names)})
    return out


def pending_jobs(plan: Plan) -> set[str]:
    """The names of the units whose tasks Slurm still has queued or running (from the job folders and `squeue`): not
    to be submitted twice."""
    jobs = queued()
    return {name for name, job in submitted(plan).items() if job in jobs}
