"""Audit plans: models x datasets in one file (`biaslab audit PLAN`), expanded into units of work and run one after
another in this process (`run_local`) or as one Slurm job array with a dependent merge job (`submit_slurm`).

A plan (YAML, `Plan`) lists models (a name, the `--model` and the engine's settings, never a key: a hosted model
names the environment variable that holds it) and datasets (with the protocol and its settings, limits, `--where`,
and an optional matrix of settings). It is validated whole before anything runs: unknown keys are refused and the
first problem is one line naming the file and the place (``plan.yaml: models[1].dtype: ...``); every unit's
`CollectConfig` is validated as `runners collect` validates its flags.

A unit is one collection (model x dataset x protocol x settings) and, with ``shards: N``, one shard of it. Its
identity is the collection's own: what it stores is keyed by the model key, the dataset, the protocol and the
settings, so a unit already stored is found by `survey` (read-only) and skipped, and a rerun computes only what is
missing (`collect` resumes). Slurm tasks each write their unit into a shard file of their own
(``WORKDIR/shards/<collection>/shard-i-of-n.duckdb``), and the merge job merges each collection's folder into the
plan's warehouse (`biaslab warehouse merge`, idempotent).

Slurm is driven through its own commands (`sbatch --array`, `squeue`, `scancel`): no scheduler of our own. A task
records its state in ``WORKDIR/tasks/<unit>.json`` (running, finished, failed, with the Slurm job and the error), so
`status` can say what failed without Slurm's accounting database.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import BiaslabError, UsageError
from ..schema.errors import first_error

__all__ = ["Plan", "ModelEntry", "DatasetEntry", "SlurmEntry", "Unit", "PlanError", "load_plan", "expand",
           "run_local", "submit_slurm", "run_task", "merge_all", "unit_states", "model_keys"]


class PlanError(UsageError):
    """A plan that cannot be run as written: one line naming the file and the place."""


#: what an environment variable's name looks like (a key's value never does: it is refused)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: engine settings that would hold a secret itself rather than the name of the variable holding it
SECRET_SETTINGS = ("api_key", "key", "token", "secret", "password")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelEntry(_Strict):
    """One model of the plan: `name` (its row in the leaderboard, unique in the plan) and what `runners collect`
    takes: `model` (alias, folder, .gguf or hub id), `backend`, `dtype`, `quant`, `device`, `revision`,
    `model_args`, `engine_args` (any engine setting), and `api_key_env`, the name of the environment variable
    holding a hosted model's key (never the key)."""

    name: str = Field(min_length=1, max_length=80)
    model: str = Field(min_length=1)
    backend: str | None = None
    dtype: str | None = None
    quant: str | None = None
    device: str | None = None
    revision: str | None = None
    model_args: dict[str, str] = Field(default_factory=dict)
    engine_args: dict[str, Any] = Field(default_factory=dict)
    api_key_env: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", value):
            raise ValueError("a model name is letters, digits and . _ + - (it names files and table rows)")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            raise ValueError("is the NAME of the environment variable holding the key (e.g. OPENAI_API_KEY), "
                             "never the key itself")
        return value

    @field_validator("engine_args")
    @classmethod
    def _no_secret(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key.lower() in SECRET_SETTINGS:
                raise ValueError(f"{key!r}: a plan never holds a key; give api_key_env, the name of the "
                                 f"environment variable that holds it")
        return value


class DatasetEntry(_Strict):
    """One dataset of the plan: `dataset`, `protocol` (default: the dataset's), `settings` (the protocol's, as
    `runners collect` flags without dashes: mode, samples, temperature, prompt, ...), `matrix` (settings varied: one
    collection per combination), `limit`, `where` (FIELD: VALUE), `options` (loader options) and `shards` (this
    dataset's shard count, default the plan's)."""

    dataset: str = Field(min_length=1)
    protocol: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    matrix: dict[str, list[Any]] = Field(default_factory=dict)
    limit: int | None = Field(None, ge=1)
    where: dict[str, str] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    shards: int | None = Field(None, ge=1, le=10000)

    @model_validator(mode="after")
    def _matrix(self) -> DatasetEntry:
        for key, values in self.matrix.items():
            if not values:
                raise ValueError(f"matrix {key!r} lists no values")
            if key in self.settings:
                raise ValueError(f"{key!r} is both a setting and a matrix key")
        return self


class SlurmEntry(_Strict):
    """`sbatch` options of the job array: partition, time (Slurm's time format), gpus_per_task, cpus_per_task, mem,
    account, max_parallel (the array's %N throttle), setup (shell lines run first in every job, e.g. activating an
    environment) and sbatch_args (further `sbatch` arguments, as a list)."""

    partition: str | None = None
    time: str | None = None
    gpus_per_task: int | None = Field(None, ge=0)
    cpus_per_task: int | None = Field(None, ge=1)
    mem: str | None = None
    account: str | None = None
    max_parallel: int | None = Field(None, ge=1)
    setup: str = ""
    sbatch_args: list[str] = Field(default_factory=list)

    def flags(self) -> list[str]:
        """These options as `sbatch` flags."""
        out = []
        for name, value in (("partition", self.partition), ("time", self.time), ("gpus-per-task", self.gpus_per_task),
                            ("cpus-per-task", self.cpus_per_task), ("mem", self.mem), ("account", self.account)):
            if value is not None:
                out.append(f"--{name}={value}")
        return [*out, *self.sbatch_args]


class ReportEntry(_Strict):
    """The leaderboard's settings: `reference` (a model name of the plan; default the first model), bootstrap
    resamples, permutations and their seed."""

    reference: str | None = None
    bootstrap: int = Field(1000, ge=1)
    permutations: int = Field(2000, ge=1)
    seed: int = 0


class Plan(_Strict):
    """An audit plan (the module docstring). Paths (`db`, `workdir`, `data_dir`) are relative to the plan file's
    folder."""

    name: str = Field(min_length=1, max_length=80)
    db: str = "warehouse/biaslab.duckdb"
    workdir: str | None = None
    data_dir: str | None = None
    shards: int = Field(1, ge=1, le=10000)
    models: list[ModelEntry] = Field(min_length=1)
    datasets: list[DatasetEntry] = Field(min_length=1)
    collect: dict[str, Any] = Field(default_factory=dict)
    slurm: SlurmEntry = Field(default_factory=SlurmEntry)
    report: ReportEntry = Field(default_factory=ReportEntry)
    path: Path | None = Field(None, exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise ValueError("a plan name is letters, digits and . _ - (it names the Slurm jobs)")
        return value

    @field_validator("collect")
    @classmethod
    def _collect(cls, value: dict[str, Any]) -> dict[str, Any]:
        allowed = {"max_tokens", "chunk_size", "threads", "accept_modified"}
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise ValueError(f"takes {', '.join(sorted(allowed))}, not {', '.join(unknown)}")
        return value

    @model_validator(mode="after")
    def _names(self) -> Plan:
        names = [m.name for m in self.models]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"model names must be unique: {', '.join(repeated)} repeated")
        if self.report.reference is not None and self.report.reference not in names:
            raise ValueError(f"report.reference {self.report.reference!r} is not a model of the plan "
                             f"({', '.join(names)})")
        return self

    # ------------------------------------------------------------------ paths, relative to the plan file
    def place(self, value: str | None) -> Path | None:
        if value is None:
            return None
        path = Path(os.path.expanduser(value))
        base = self.path.parent if self.path is not None else Path.cwd()
        return path if path.is_absolute() else base / path

    @property
    def database(self) -> Path:
        return self.place(self.db)

    @property
    def work_folder(self) -> Path:
        """Where shards, task states, job scripts and logs go (default: ``<db>.audit/`` beside the warehouse)."""
        return self.place(self.workdir) if self.workdir else self.database.with_name(self.database.name + ".audit")

    @property
    def reference(self) -> str:
        return self.report.reference or self.models[0].name


def load_plan(path: str | os.PathLike, db: str | None = None) -> Plan:
    """The plan in the YAML file `path`, validated (`Plan`); `db` replaces its warehouse (a path as given, not
    relative to the plan). Problems: one line naming the file and the place (`PlanError`)."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise PlanError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a plan is a mapping (name, models, datasets, ...), got {type(data).__name__}")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        error = first_error(exc)
        place = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", error.field) or "plan"
        given = f" (got {error.given!r})" if error.has_input and not isinstance(error.given, (dict, list)) else ""
        if error.kind == "extra_forbidden":
            raise PlanError(f"{path}: {place}: unknown key") from None
        raise PlanError(f"{path}: {place}: {error.message}{given}") from None
    plan.path = path.resolve()
    if db is not None:
        plan.db = str(Path(db).resolve())
    return plan


# ---------------------------------------------------------------------------------------------------------- units
@dataclass(frozen=True)
class Unit:
    """One unit of work: the plan's model (by name), its dataset entry's place, the settings of this collection
    (the entry's settings and one matrix combination), the shard (index, count), and the `CollectConfig`."""

    index: int
    model: str
    dataset: str
    protocol: str
    settings: dict[str, Any]
    shard: tuple[int, int]
    config: Any = field(compare=False, repr=False)
    place: str = ""

    @property
    def collection(self) -> str:
        """A file-safe name of the collection (model, dataset, protocol and a hash of the settings): the folder of
        its shard files."""
        digest = hashlib.sha256(json.dumps(self.settings, sort_keys=True, default=str).encode()).hexdigest()[:8]
        return f"{self.model}.{self.dataset}.{self.protocol}.{digest}"

    @property
    def name(self) -> str:
        """A file-safe name of the unit: its collection and shard."""
        return f"{self.collection}.shard-{self.shard[0]}-of-{self.shard[1]}"

    @property
    def label(self) -> str:
        """What people read: model · dataset · protocol, the settings, the shard."""
        parts = [self.model, self.dataset, self.protocol]
        if self.settings:
            parts.append(" ".join(f"{k}={v}" for k, v in sorted(self.settings.items())))
        if self.shard[1] > 1:
            parts.append(f"shard {self.shard[0]}/{self.shard[1]}")
        return " · ".join(parts)

    def shard_config(self, work_folder: Path):
        """This unit's config writing its own shard file (a Slurm task): ``WORKDIR/shards/<collection>/``."""
        return self.config.model_copy(update={"shard": f"{self.shard[0]}/{self.shard[1]}",
                                              "out_shard": str(work_folder / "shards" / self.collection)})


def _model_fields(model: ModelEntry) -> dict[str, Any]:
    fields = {k: v for k, v in (("model", model.model), ("backend", model.backend), ("dtype", model.dtype),
                                ("quant", model.quant), ("device", model.device), ("revision", model.revision))
              if v is not None}
    engine = dict(model.engine_args)
    if model.api_key_env is not None:
        engine["api_key_env"] = model.api_key_env
    return {**fields, "model_args": dict(model.model_args), "engine_args": engine}


def expand(plan: Plan, validate: bool = True) -> list[Unit]:
    """The plan's units: every model x dataset entry x matrix combination x shard, in the plan's order (models
    outermost). With `validate`, each collection is validated as `runners collect` would (the dataset, the
    engine and its settings, the protocol's settings), refused in one line naming the plan's place."""
    from .config import CollectConfig

    units: list[Unit] = []
    for (m, model), (d, entry) in itertools.product(enumerate(plan.models), enumerate(plan.datasets)):
        keys = list(entry.matrix)
        for combo in itertools.product(*(entry.matrix[k] for k in keys)):
            settings = {**entry.settings, **dict(zip(keys, combo))}
            place = f"models[{m}] ({model.name}) x datasets[{d}] ({entry.dataset})"
            count = entry.shards or plan.shards
            try:
                config = CollectConfig(dataset=entry.dataset, protocol=entry.protocol, db=str(plan.database),
                                       data_dir=str(plan.place(plan.data_dir)) if plan.data_dir else None,
                                       limit=entry.limit, where=dict(entry.where),
                                       loader_options=dict(entry.options), **_model_fields(model),
                                       **plan.collect, **settings)
                protocol = config.resolved_protocol()
                if validate:
                    config.validate()
            except BiaslabError as exc:
                raise PlanError(f"{plan.path}: {place}: {exc}") from None
            for index in range(count):
                shard = f"{index}/{count}" if count > 1 else None
                units.append(Unit(len(units), model.name, entry.dataset, protocol, settings, (index, count),
                                  config.model_copy(update={"shard": shard}), place))
    return units


def model_keys(plan: Plan, units: list[Unit]) -> dict[str, str]:
    """The model key of each model of the plan (name -> key), as its collections store it: the model prepared
    without weights (a hosted model: the snapshot the plan's warehouse last saw; nothing is sent)."""
    from .collect import survey

    keys: dict[str, str] = {}
    for unit in units:
        if unit.model not in keys:
            keys[unit.model] = survey(unit.config).model_key
    return keys


# ---------------------------------------------------------------------------------------------------------- local
def run_local(units: list[Unit], *, progress=None, on_unit=None, notify=None, confirm=None
              ) -> list[tuple[Unit, Any]]:
    """Run the units one after another into the plan's warehouse (`collect`: what is stored is skipped, an
    interrupted unit resumes). `progress(unit)` returns the factory `collect` reports to; `on_unit(unit, result)`
    is called after each; `confirm` is `collect`'s question before a hosted model is sent anything. Ctrl-C stops at
    the current unit (its finished chunks are kept); rerunning the plan continues. Returns (unit, `CollectResult`)
    per unit."""
    from .collect import collect

    done = []
    for unit in units:
        result = collect(unit.config, progress=progress(unit) if progress else None, notify=notify, confirm=confirm)
        done.append((unit, result))
        if on_unit is not None:
            on_unit(unit, result)
    return done


# ---------------------------------------------------------------------------------------------------------- slurm
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
    plan's setup lines, then `command` (shell text)."""
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


def _sbatch(script: Path, extra: list[str] = ()) -> str:
    """Submit `script`; the job id (one line naming sbatch's error otherwise)."""
    try:
        done = subprocess.run(["sbatch", "--parsable", *extra, str(script)], capture_output=True, text=True,
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


def run_task(plan: Plan, units: list[Unit], job: Path, task: int, *, progress=None) -> int:
    """One array task: collect units[job's list[task]] into its shard file, recording its state (running, then
    finished or failed with the error) in WORKDIR/tasks/. Returns the process exit status (0 finished)."""
    from .collect import collect

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
    return 0


def merge_all(plan: Plan) -> list[tuple[str, dict[str, int]]]:
    """Merge every collection's shard folder under WORKDIR/shards/ into the plan's warehouse (`merge_shards`:
    checked first, idempotent); returns (collection, rows added per table)."""
    from ..warehouse.merge import merge_shards

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
    task; from the warehouse (`survey`, read-only), the task state files and `squeue`."""
    from .collect import survey

    jobs, sent = queued(), submitted(plan)
    rows = []
    for unit in units:
        found = survey(unit.config)
        task = read_state(plan, unit) or {}
        job = sent.get(unit.name)
        in_queue = jobs.get(job) if job else None
        if job and task.get("array_job") and f"{task['array_job']}_{task.get('task')}" != job:
            task = {}  # the state of an earlier submission's task: this one has not started yet
        state, error = "not started", ""
        if found.pending == 0:
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
        elif found.pending < found.requests:
            state = "partly stored"
        rows.append({"unit": unit.label, "state": state, "requests": found.requests,
                     "stored": found.requests - found.pending, "job": job or "", "error": error,
                     "model_key": found.model_key, "estimate": found.estimate})
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
