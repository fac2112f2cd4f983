"""An audit plan: the YAML schema (`Plan`: models, datasets, settings, the Slurm options, the report's), reading it
(`load_plan`: validated whole, the first problem one line naming the file and the place) and its expansion into
units of work (`expand`: model x dataset x matrix combination x shard, each a validated `CollectConfig`)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator,
                      model_validator)

from ...errors import BiaslabError, UsageError
from ...schema.errors import first_error

__all__ = ["Plan", "ModelEntry", "DatasetEntry", "SlurmEntry", "ReportEntry", "Unit", "PlanError", "load_plan",
           "expand", "model_keys"]


#: the most units a plan expands to unless it says `max_units:` (each unit is a collection; a Slurm array of more
#: is refused by most clusters' MaxArraySize, 1001 by default)
DEFAULT_MAX_UNITS = 1000


class PlanError(UsageError):
    """A plan that cannot be run as written: one line naming the file and the place."""


#: what an environment variable's name looks like (a key's value never does: it is refused)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: engine settings that would hold a secret itself rather than the name of the variable holding it
SECRET_SETTINGS = ("api_key", "key", "token", "secret", "password")


def _safe_name(what: str, pattern: str, allowed: str):
    """A name that names files and jobs: letters and digits first, then `allowed` (a one-line refusal otherwise)."""

    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise UsageError(f"a {what} name is letters, digits and {allowed} (it names files, jobs and table rows)")
        return value

    return AfterValidator(check)


#: the name of a model of the plan (its leaderboard row) and of the plan (its Slurm jobs)
ModelName = Annotated[str, Field(min_length=1, max_length=80), _safe_name("model", r"[A-Za-z0-9][A-Za-z0-9._+-]*",
                                                                            ". _ + -")]
PlanName = Annotated[str, Field(min_length=1, max_length=80), _safe_name("plan", r"[A-Za-z0-9][A-Za-z0-9._-]*",
                                                                           ". _ -")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelEntry(_Strict):
    """One model of the plan: `name` (its row in the leaderboard, unique in the plan) and what `runners collect`
    takes: `model` (alias, folder, .gguf or hub id), `backend`, `dtype`, `quant`, `device`, `revision`,
    `model_args`, `engine_args` (any engine setting), and `api_key_env`, the name of the environment variable
    holding a hosted model's key (never the key)."""

    name: ModelName
    model: str = Field(min_length=1)
    backend: str | None = None
    dtype: str | None = None
    quant: str | None = None
    device: str | None = None
    revision: str | None = None
    model_args: dict[str, str] = Field(default_factory=dict)
    engine_args: dict[str, Any] = Field(default_factory=dict)
    api_key_env: str | None = None

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            raise UsageError("is the NAME of the environment variable holding the key (e.g. OPENAI_API_KEY), "
                             "never the key itself")
        return value

    @field_validator("engine_args")
    @classmethod
    def _no_secret(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key.lower() in SECRET_SETTINGS:
                raise UsageError(f"{key!r}: a plan never holds a key; give api_key_env, the name of the "
                                 f"environment variable that holds it")
        return value


class DatasetEntry(_Strict):
    """One dataset of the plan: `dataset`, `protocol` (default: the dataset's), `settings` (the protocol's, as
    `runners collect` flags without dashes: mode, samples, temperature, prompt, ...), `matrix` (settings varied: one
    collection per combination), `limit` (items, as `runners collect --limit`), `limit_order`, `limit_seed`, `where`
    (FIELD: VALUE), `options` (loader options) and `shards` (this dataset's shard count, default the plan's)."""

    dataset: str = Field(min_length=1)
    protocol: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    matrix: dict[str, list[Any]] = Field(default_factory=dict)
    limit: int | None = Field(None, ge=1)
    limit_order: Literal["spread", "file"] = "spread"
    limit_seed: int = Field(0, ge=0)
    where: dict[str, str] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    shards: int | None = Field(None, ge=1, le=10000)

    @model_validator(mode="after")
    def _matrix(self) -> DatasetEntry:
        for key, values in self.matrix.items():
            if not values:
                raise UsageError(f"matrix {key!r} lists no values")
            if key in self.settings:
                raise UsageError(f"{key!r} is both a setting and a matrix key")
        return self


def _slurm_value(what: str, pattern: str, example: str):
    """A value that becomes part of an `#SBATCH` line: it must match Slurm's own syntax for it (`pattern`), so that
    no plan text can end the line, add a shell line or hide the later #SBATCH lines (a newline would do all three)."""

    def check(value: str | None) -> str | None:
        if value is not None and not re.fullmatch(pattern, value):
            raise UsageError(f"is not a Slurm {what} (e.g. {example})")
        return value

    return AfterValidator(check)


#: Slurm's syntax of each option a plan may set (sbatch(1)): names of letters, digits, `_ . -` (a partition list is
#: comma-separated); time as minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED; memory as a size
#: with an optional K, M, G or T; a further argument as one `--option` or `--option=value` without spaces
SLURM_NAME = r"[A-Za-z0-9_.-]+"
SLURM_TIME = r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}(:\d{1,2})?)?|UNLIMITED|INFINITE|unlimited|infinite"
SLURM_MEM = r"\d+[KMGTkmgt]?"
SLURM_ARG = r"--?[A-Za-z][A-Za-z0-9-]*(=[A-Za-z0-9_.,:%@/+=-]*)?"


class SlurmEntry(_Strict):
    """`sbatch` options of the job array: partition, time (Slurm's time format), gpus_per_task, cpus_per_task, mem,
    account, max_parallel (the array's %N throttle), setup (shell lines run first in every job, e.g. activating an
    environment: the one field that is shell, by design, and it runs after every #SBATCH line) and sbatch_args
    (further `sbatch` arguments, as a list). Every other value must match Slurm's own syntax for it (`SLURM_*`):
    a plan's text never becomes a line of its own in a job script."""

    partition: Annotated[str | None,
                         _slurm_value("partition", rf"{SLURM_NAME}(,{SLURM_NAME})*", "gpu or gpu,cpu")] = None
    time: Annotated[str | None, _slurm_value("time", SLURM_TIME, "90, 02:00:00 or 1-12:00:00")] = None
    gpus_per_task: int | None = Field(None, ge=0, le=1024)
    cpus_per_task: int | None = Field(None, ge=1, le=100000)
    mem: Annotated[str | None, _slurm_value("memory size", SLURM_MEM, "16G or 16000M")] = None
    account: Annotated[str | None, _slurm_value("account", SLURM_NAME, "my-lab")] = None
    max_parallel: int | None = Field(None, ge=1, le=100000)
    setup: str = ""
    sbatch_args: list[Annotated[str, _slurm_value("sbatch argument", SLURM_ARG, "--qos=high or --exclusive")]] = \
        Field(default_factory=list)

    @field_validator("setup")
    @classmethod
    def _setup(cls, value: str) -> str:
        if "\x00" in value or "\r" in value:
            raise UsageError("setup: a NUL or carriage return is not a shell line")
        return value

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
    bootstrap: int = Field(1000, ge=1, le=100_000)
    permutations: int = Field(2000, ge=1, le=1_000_000)
    seed: int = 0


class Plan(_Strict):
    """An audit plan (the module docstring). Paths (`db`, `workdir`, `data_dir`) are relative to the plan file's
    folder."""

    name: PlanName
    db: str = "warehouse/biaslab.duckdb"
    workdir: str | None = None
    data_dir: str | None = None
    shards: int = Field(1, ge=1, le=10000)
    #: the most units the plan may expand to (`count_units`); raise it for a larger plan
    max_units: int = Field(DEFAULT_MAX_UNITS, ge=1)
    #: the most the plan's hosted models may cost together (USD; `audit.budget`); a model's own cap is its
    #: engine_args.max_cost, which covers all of that model's units
    max_cost: float | None = Field(None, ge=0, le=1e9)
    models: list[ModelEntry] = Field(min_length=1)
    datasets: list[DatasetEntry] = Field(min_length=1)
    collect: dict[str, Any] = Field(default_factory=dict)
    slurm: SlurmEntry = Field(default_factory=SlurmEntry)
    report: ReportEntry = Field(default_factory=ReportEntry)
    _path: Path | None = PrivateAttr(None)

    @field_validator("db", "workdir", "data_dir")
    @classmethod
    def _path_text(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or re.search(r"[\x00-\x1f\x7f]", value)):
            raise UsageError(f"{value!r} is not a path (empty, or a newline or other control character)")
        return value

    @property
    def path(self) -> Path | None:
        """The plan file (resolved), when read from one (`load_plan`)."""
        return self._path

    @field_validator("collect")
    @classmethod
    def _collect(cls, value: dict[str, Any]) -> dict[str, Any]:
        allowed = {"max_tokens", "chunk_size", "threads", "accept_modified"}
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise UsageError(f"takes {', '.join(sorted(allowed))}, not {', '.join(unknown)}")
        return value

    @model_validator(mode="after")
    def _names(self) -> Plan:
        names = [m.name for m in self.models]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise UsageError(f"model names must be unique: {', '.join(repeated)} repeated")
        if self.report.reference is not None and self.report.reference not in names:
            raise UsageError(f"report.reference {self.report.reference!r} is not a model of the plan "
                             f"({', '.join(names)})")
        return self

    # ------------------------------------------------------------------ paths, relative to the plan file
    def place(self, value: str | None) -> Path | None:
        if value is None:
            return None
        path = Path(os.path.expanduser(value))
        base = self.path.parent if self.path is not None else Path.cwd()
        return path if path.is_absolute() else (base / path).resolve()  # examples/../x: ../ folded as the OS does

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


#: the largest plan file read
MAX_PLAN_BYTES = 1024 ** 2


def _plan_loader():
    """YAML's safe loader, except that a key repeated in one mapping is refused (the safe loader keeps the last one
    silently: `db:` twice would write elsewhere than the first line says)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the safe loader refuses it itself
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} repeats line {seen[key] + 1} (a key is given once)",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return loader.construct_mapping(node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


def load_plan(path: str | os.PathLike, db: str | None = None) -> Plan:
    """The plan in the YAML file `path`, validated (`Plan`); `db` replaces its warehouse (a path as given, not
    relative to the plan). Problems: one line naming the file and the place (`PlanError`)."""
    import yaml

    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_PLAN_BYTES + 1)
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan: {exc.strerror or exc}") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanError(f"{path}: a plan is at most {MAX_PLAN_BYTES // 1024 ** 2} MiB; this one is larger")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(f"{path}: not UTF-8 text (byte {exc.start}); save the plan as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_plan_loader())  # noqa: S506 (a SafeLoader that refuses repeated keys)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise PlanError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise PlanError(f"{path}: the plan is nested too deeply to be a plan") from None
    if data is None:
        raise PlanError(f"{path}: the plan is empty (it needs name, models and datasets)")
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
    plan._path = path.resolve()
    if db is not None:
        plan.db = str(Path(db).resolve())
    return plan


# ---------------------------------------------------------------------------------------------------------- units
@dataclass(frozen=True)
class Unit:
    """One unit of work: the plan's model (by name), its dataset, the protocol, the settings of this collection
    (the entry's settings and one matrix combination), the shard (index, count), and the `CollectConfig`."""

    model: str
    dataset: str
    protocol: str
    settings: dict[str, Any]
    shard: tuple[int, int]
    config: Any = field(compare=False, repr=False)

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


def count_units(plan: Plan) -> int:
    """How many units the plan expands to (models x each dataset entry's matrix combinations x its shards), counted
    without building any."""
    per_model = 0
    for entry in plan.datasets:
        combos = 1
        for values in entry.matrix.values():
            combos *= len(values)
        per_model += combos * (entry.shards or plan.shards)
    return per_model * len(plan.models)


def expand(plan: Plan, validate: bool = True) -> list[Unit]:
    """The plan's units: every model x dataset entry x matrix combination x shard, in the plan's order (models
    outermost). With `validate`, each collection is validated as `runners collect` would (the dataset, the
    engine and its settings, the protocol's settings), refused in one line naming the plan's place."""
    from ..config import CollectConfig

    total = count_units(plan)
    if total > plan.max_units:
        where = f"{plan.path}: " if plan.path else ""
        raise PlanError(f"{where}the plan expands to {total:,} units, more than max_units ({plan.max_units:,}); "
                        f"set max_units: {total} in the plan if that is what you mean")
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
                                       limit=entry.limit, limit_order=entry.limit_order,
                                       limit_seed=entry.limit_seed, where=dict(entry.where),
                                       loader_options=dict(entry.options), **_model_fields(model),
                                       **plan.collect, **settings)
                protocol = config.resolved_protocol()
                if validate:
                    config.validate()
            except BiaslabError as exc:
                raise PlanError(f"{plan.path}: {place}: {exc}") from None
            for index in range(count):
                shard = f"{index}/{count}" if count > 1 else None
                units.append(Unit(model.name, entry.dataset, protocol, settings, (index, count),
                                  config.model_copy(update={"shard": shard})))
    return units


def model_keys(plan: Plan, units: list[Unit]) -> dict[str, str]:
    """The model key of each model of the plan (name -> key), as its collections store it: the model prepared
    without weights (a hosted model: the snapshot the plan's warehouse last saw; nothing is sent)."""
    from ..collect import model_key

    keys: dict[str, str] = {}
    for unit in units:
        if unit.model not in keys:
            keys[unit.model] = model_key(unit.config)
    return keys


