"""What one `runners collect` is asked to do: the common spec (dataset, model, engine, warehouse, batching, shard)
and the protocol's own settings (`protocols.<name>.Settings`), both checked before anything is read or loaded.

`CollectConfig` takes the command line's options flat, as keyword arguments: the common ones are its fields, every
other one is a setting of the protocol and is validated by that protocol's pydantic model, so an option that does
not apply to the protocol (``--mode`` with prob, ``--min-new-tokens`` with choice) is refused in one line instead of
being ignored.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from ..engines import DEFAULT_BACKEND, declaration
from ..engines.base import BackendOptions
from ..errors import Unsupported, UsageError
from ..schema.errors import first_error
from . import protocols

#: the command-line flag of a field whose name differs from its flag
FLAGS = {"max_tokens": "--batch-tokens", "kv_cache_memory_bytes": "--kv-cache-memory",
         "loader_options": "--option", "model_args": "--model-arg", "engine_args": "--engine-arg"}


def flag(field: str) -> str:
    """The `runners collect` flag of a setting: `max_new_tokens` -> `--max-new-tokens`."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def one_line(exc: ValidationError, accepted: list[str] | None = None, protocol: str | None = None) -> UsageError:
    """The first problem of a pydantic validation as one line naming the flag (a bad option: `UsageError`)."""
    error = first_error(exc)
    field = error.field.split(".")[0]
    if error.kind == "extra_forbidden":
        takes = ", ".join(flag(f) for f in accepted or []) or "no options of its own"
        return UsageError(f"{flag(field)} does not apply to --protocol {protocol} (it takes {takes})")
    if error.message.startswith("--") or not field:
        return UsageError(error.message)
    if error.message.startswith("must be"):
        return UsageError(f"{flag(field)} {error.message}, got {error.given}")
    shown = f" (got {error.given!r})" if error.has_input and not isinstance(error.given, dict) else ""
    return UsageError(f"{flag(field)}: {error.message}{shown}")


#: the engines that compute in this process with torch (the others send requests: no torch is imported for them)
IN_PROCESS = ("hf", "vllm")


class CollectConfig(BaseModel):
    """One collection: the common fields below, and any further keyword argument as a protocol setting."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    dataset: str
    protocol: str | None = None
    model: str = "smollm2-135m"
    backend: str = DEFAULT_BACKEND
    dtype: str | None = None
    quant: str = "none"
    device: str | None = None
    revision: str | None = None                                       # hub revision (branch, tag or commit)
    model_args: dict[str, str] = Field(default_factory=dict)          # --model-arg key=value
    engine_args: dict[str, Any] = Field(default_factory=dict)         # --engine-arg and the engine flags
    db: str = "warehouse/biaslab.duckdb"
    data_dir: str | None = None
    limit: int | None = Field(None, ge=1)                             # items, whole (runners.sampling)
    limit_order: Literal["spread", "file"] = "spread"                 # which items a limit takes
    limit_seed: int = Field(0, ge=0)                                  # the spread order's seed
    where: dict[str, str] = Field(default_factory=dict)               # --where FIELD=VALUE[|VALUE...]: stimuli
    max_tokens: int = Field(4096, ge=8)                               # --batch-tokens
    chunk_size: int = Field(256, ge=1)
    threads: int | None = Field(None, ge=1)                           # torch CPU threads (None: the CPU affinity)
    shard: str | None = None                                          # "i/n": this job collects shard i of n
    out_shard: str | None = None                                      # folder of the shard warehouses
    accept_modified: bool = False                                     # load modified copies of pinned files
    loader_options: dict[str, Any] = Field(default_factory=dict)      # --option key=value of the loader
    _dataset: Any = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise one_line(exc) from None

    @model_validator(mode="after")
    def _loader_flag(self) -> CollectConfig:
        from ..loaders.options import pop_flag

        flag_value, rest = pop_flag(self.loader_options, "accept_modified", self.accept_modified)
        if rest != self.loader_options:  # also accepted as -o accept_modified=true
            object.__setattr__(self, "loader_options", rest)
            object.__setattr__(self, "accept_modified", flag_value)
        return self

    # ------------------------------------------------------------------ the dataset and the protocol
    def dataset_ref(self):
        """The dataset (`runners.datasets.resolve`: built in, or a user's loaded into --db), resolved once."""
        if self._dataset is None:
            from .datasets import resolve

            self._dataset = resolve(self.dataset, self.db)
        return self._dataset

    def options(self) -> dict[str, Any]:
        """The protocol settings given (every keyword argument that is not a common field)."""
        return dict(self.model_extra or {})

    def resolved_protocol(self) -> str:
        """--protocol, else the dataset's default; refused in one line when the dataset does not offer it."""
        supported = self.dataset_ref().protocols
        name = self.protocol or supported[0]
        if name not in supported:
            available = "not available" if name in protocols.NAMES else "unknown"
            raise UsageError(f"--protocol {name} is {available} for {self.dataset}; use one of {supported}")
        return name

    def plugin(self) -> protocols.Protocol:
        """The protocol with its settings validated (one line naming the flag otherwise)."""
        cls = protocols.get(self.resolved_protocol())
        given = {**self.dataset_ref().defaults(cls.name), **self.options()}  # the dataset's defaults, then the flags
        try:
            settings = cls.settings_model.model_validate(given)
        except ValidationError as exc:
            raise one_line(exc, list(cls.settings_model.model_fields), cls.name) from None
        plugin = cls(settings)
        plugin.bind(self.dataset_ref())
        plugin.check()
        return plugin

    def settings(self):
        """The protocol's validated settings, defaults filled in."""
        return self.plugin().settings

    # ------------------------------------------------------------------ the engine and the files
    def backend_module(self):
        """The backend's module (`engines.get`), refused in one line when unknown or its engine is missing."""
        from .. import engines

        module = engines.get(self.backend)
        ok, why = module.installed()
        if not ok:
            raise Unsupported(f"--backend {self.backend} is not available: {why}")
        return module

    def backend_options(self) -> BackendOptions:
        """The engine choices as `BackendOptions` (model and engine arguments in sorted order)."""
        return BackendOptions(dtype=self.dtype, quant=self.quant, device=self.device, revision=self.revision,
                              model_args=tuple(sorted(self.model_args.items())),
                              engine_args=tuple(sorted(self.engine_args.items())), batch_tokens=self.max_tokens)

    def shard_position(self) -> tuple[int, int]:
        """(index, count) from "i/n", 0 <= i < n."""
        try:
            index, count = (int(x) for x in str(self.shard).split("/"))
        except ValueError:
            raise UsageError(f"--shard must look like i/n (e.g. 0/4), got {self.shard!r}") from None
        if not (count >= 1 and 0 <= index < count):
            raise UsageError(f"--shard {self.shard}: need 0 <= i < n")
        return index, count

    def database(self) -> Path:
        """The warehouse this collection writes: --db, or the shard's own file in --out-shard."""
        if self.out_shard is None:
            return Path(self.db)
        index, count = self.shard_position()
        return Path(self.out_shard) / f"shard-{index:04d}-of-{count:04d}.duckdb"

    def command_line(self) -> str:
        """The `runners collect` command this config stands for: every option given, as flags."""
        parts = ["runners", "collect", "--dataset", self.dataset]
        given = {**self.model_dump(exclude_unset=True, exclude={"dataset"}), **self.options()}
        for name, value in given.items():
            if value is None or value == {} or value is False:
                continue
            if name in ("limit_order", "limit_seed") and (self.limit is None or value == type(self).model_fields[
                    name].default):  # how a limit picks: said only where there is a limit and it is not the default
                continue
            if isinstance(value, dict):
                parts += [a for k, v in value.items() for a in (flag(name), f"{k}={v}")]
            elif value is True:
                parts.append(flag(name))
            else:
                parts += [flag(name), str(value)]
        return shlex.join(parts)

    def validate(self):
        """Refuse absurd parameters before any model is loaded; returns (the protocol plug-in, the backend module).
        """
        self.dataset_ref()  # unknown dataset -> ValueError naming the built-in ones and how to load one
        module = self.backend_module()  # unknown or not installed: one line, before anything is read or loaded
        module.validate_options(self.backend_options())
        plugin = self.plugin()
        if self.out_shard is not None and self.shard is None:
            raise UsageError("--out-shard DIR needs --shard i/n (the shard this job writes into its own file)")
        if self.shard is not None:
            self.shard_position()
        from .stimuli import check_where

        check_where(self.where)
        declared = declaration(module)
        plugin.require(declared.name, declared.capabilities, "causal", declared.why_not)
        return plugin, module
