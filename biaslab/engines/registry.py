"""The engine registry: the built-in engines (`BACKENDS`) and those other installed distributions declare in the
entry-point group `biaslab.engines` (``[project.entry-points."biaslab.engines"] toy = "toy_engine"``), each the
name of a module with the interface of the built-ins (`INTERFACE`: `NAME`, `CAPABILITIES`, `Options`,
`installed()`, `validate_options(options)`, `prepare(model, options)`; optionally `FLAGS`, see `base.Flag`).

- A built-in engine wins a name clash: the plugin is left out, with a one-line `EngineWarning` (and the line is
  listed by `runners backends`, `notes`).
- Modules are imported on first use (`get`), and none imports its engine (torch, vllm, httpx) at import time, so
  listing names, capabilities, options and flags stays cheap, and a missing vllm breaks neither `import biaslab`
  nor the other engines.
- A plugin that does not import (or lacks part of the interface) breaks nothing else: `get` refuses it in one line
  with the reason (`Unsupported`), and `runners backends` lists it as not installed with that reason.
"""

from __future__ import annotations

import functools
import importlib
import typing
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import Unsupported, UsageError
from .base import Flag

#: built-in engine name -> module (relative to `biaslab.engines`), the default first
BACKENDS: dict[str, str] = {"hf": ".hf", "vllm": ".vllm", "openai": ".openai", "openai-chat": ".openai_chat",
                             "gemini": ".gemini", "anthropic": ".anthropic"}
DEFAULT_BACKEND = "hf"
#: the entry-point group of engine plugins
GROUP = "biaslab.engines"
#: what every engine module defines
INTERFACE = ("NAME", "CAPABILITIES", "Options", "installed", "validate_options", "prepare")
PACKAGE = __name__.rpartition(".")[0]


class EngineWarning(UserWarning):
    """An engine plugin left out (its name is a built-in engine's or another plugin's)."""


@dataclass(frozen=True)
class Plugin:
    """An engine declared by an installed distribution (`entry`: its entry point; `dist`: "name version")."""

    name: str
    entry: Any
    dist: str

    @property
    def origin(self) -> str:
        return f"plugin {self.entry.value} ({self.dist})" if self.dist else f"plugin {self.entry.value}"


@functools.cache
def _discover() -> tuple[dict[str, Plugin], tuple[str, ...]]:
    """(plugins by name, one-line notes on the entry points left out), read once per process."""
    from importlib.metadata import entry_points

    found: dict[str, Plugin] = {}
    notes: list[str] = []
    try:
        declared = list(entry_points(group=GROUP))
    except Exception as exc:  # a broken distribution's metadata must not break biaslab
        return {}, (f"the {GROUP} entry points cannot be read ({type(exc).__name__}: {exc})",)
    for entry in declared:
        dist = getattr(entry, "dist", None)
        plugin = Plugin(entry.name, entry, f"{dist.name} {dist.version}" if dist is not None else "")
        if entry.name in BACKENDS:
            notes.append(f"engine plugin {entry.name} = {entry.value} ({plugin.dist or 'no distribution'}) is left "
                         f"out: the built-in engine {entry.name!r} has that name")
        elif entry.name in found:
            if found[entry.name].entry.value != entry.value:  # the same distribution seen twice on the path is fine
                notes.append(f"engine plugin {entry.name} = {entry.value} ({plugin.dist or 'no distribution'}) is "
                             f"left out: {found[entry.name].origin} has that name")
        else:
            found[entry.name] = plugin
    for note in notes:  # one line: no source line of this module under it
        warnings.warn_explicit(note, EngineWarning, filename=PACKAGE, lineno=0, module=__name__)
    return found, tuple(notes)


def plugins() -> dict[str, Plugin]:
    """The engine plugins installed here, by name (those left out are in `notes`)."""
    return dict(_discover()[0])


def notes() -> tuple[str, ...]:
    """One line per engine plugin left out (a name clash), for `runners backends`."""
    return _discover()[1]


def names() -> tuple[str, ...]:
    """Every engine name: the built-in ones (the default first), then the plugins."""
    return tuple(BACKENDS) + tuple(name for name in _discover()[0] if name not in BACKENDS)


def origin(name: str) -> str:
    """"built-in", or the plugin's module and distribution."""
    if name in BACKENDS:
        return "built-in"
    plugin = _discover()[0].get(name)
    return plugin.origin if plugin is not None else "unknown"


def _why(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1][:200]}" if lines else type(exc).__name__


@functools.cache
def _load_plugin(name: str) -> tuple[Any, str]:
    """(the plugin's module, "") or (None, why it cannot be used); tried once per process."""
    plugin = _discover()[0][name]
    try:
        module = plugin.entry.load()
    except Exception as exc:  # anything a broken plugin raises on import stays with it
        return None, f"its module {plugin.entry.value!r} does not import ({_why(exc)})"
    missing = [attr for attr in INTERFACE if not hasattr(module, attr)]
    if missing:
        return None, f"its module {plugin.entry.value!r} does not define {', '.join(missing)}"
    if module.NAME != name:
        return None, f"its module {plugin.entry.value!r} is the engine {module.NAME!r}, not {name!r}"
    return module, ""


def problem(name: str) -> str:
    """Why engine `name` cannot be used at all ("" when its module imports; whether its engine is installed is
    the module's `installed()`)."""
    if name not in BACKENDS and name in _discover()[0]:
        return _load_plugin(name)[1]
    try:
        get(name)
    except (Unsupported, UsageError) as exc:
        return str(exc)
    return ""


def get(name: str) -> ModuleType:
    """The engine module `name`, refused in one line when unknown (`UsageError`) or when its module cannot be used
    (`Unsupported`: absent from this build, or a plugin that does not import)."""
    if name in BACKENDS:
        try:
            return importlib.import_module(BACKENDS[name], PACKAGE)
        except ModuleNotFoundError as exc:
            if exc.name == f"{PACKAGE}.{name}":
                raise Unsupported(f"--backend {name}: this biaslab build has no {name} backend module") from None
            raise
    if name not in _discover()[0]:
        raise UsageError(f"--backend {name!r} is unknown; use one of {', '.join(names())}")
    module, why = _load_plugin(name)
    if module is None:
        raise Unsupported(f"--backend {name} is not available: {why}")
    return module


@dataclass(frozen=True)
class Declaration:
    """What an engine module declares, typed, as the runners read it (nothing is probed on an engine object).

    Attributes
    ----------
    name : the engine's name (`NAME`).
    capabilities : what it serves (`CAPABILITIES`, names of `base`).
    why_not : the reason it gives, per capability it lacks, for refusing a protocol that needs it (`WHY_NOT`,
        optional; {} where it declares none).
    flags : its shortcut flags (`FLAGS`, optional; see `base.Flag`).
    """

    name: str
    capabilities: frozenset[str]
    why_not: dict[str, str]
    flags: tuple[Any, ...]


def declaration(module: ModuleType) -> Declaration:
    """The `Declaration` of an engine module (one `get` returned): its required `NAME` and `CAPABILITIES` and its
    optional `WHY_NOT` and `FLAGS`."""
    why = getattr(module, "WHY_NOT", None) or {}
    return Declaration(str(module.NAME), frozenset(module.CAPABILITIES),
                       {str(k): str(v) for k, v in dict(why).items()}, tuple(getattr(module, "FLAGS", None) or ()))


# ---------------------------------------------------------------------------------------------- shortcut flags
@dataclass(frozen=True)
class EngineFlag:
    """A shortcut flag one engine declares (`base.Flag`), with the Python type of its `Options` field."""

    engine: str
    flag: Flag
    type: type


#: the types a flag's value is read as (anything else: a string the engine's `Options` reads)
FLAG_TYPES = (bool, int, float, str)


def value_type(annotation: Any) -> type:
    """bool, int, float or str: the first of them in a field's annotation (`int | None` -> int), else str."""
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if candidate in FLAG_TYPES:
            return candidate
    return str


def flags() -> tuple[list[EngineFlag], list[str]]:
    """Every engine's shortcut flags in `names()` order, and one-line notes on declarations left out (a field its
    `Options` lacks). Engines that cannot be used declare none."""
    out: list[EngineFlag] = []
    problems: list[str] = []
    for name in names():
        try:
            module = get(name)
            declared = declaration(module).flags  # optional: an engine without shortcut flags
            fields = module.Options.model_fields
        except Exception:  # an engine that cannot be used declares no flags; `runners backends` says why
            continue
        for flag in declared:
            if not isinstance(flag, Flag) or flag.field not in fields:
                problems.append(f"engine {name!r}: shortcut flag {flag!r} is left out (not a Flag of a field of "
                                f"its Options)")
                continue
            out.append(EngineFlag(name, flag, value_type(fields[flag.field].annotation)))
    return out, problems


def reuse(loaded: Any, batch_tokens: int = 4096) -> tuple[Any, Any]:
    """(prepared, backend) of a model loaded beforehand, for tests and benchmarks that reuse one model: a Hugging
    Face `engines.hf.loading.LoadedModel` runs through the hf engine (`batch_tokens`: its scoring budget); any other
    object is taken as a loaded `Backend`, which stands for its prepared model too."""
    from .hf.loading import LoadedModel

    if isinstance(loaded, LoadedModel):
        from .hf.backend import HFPrepared

        prepared = HFPrepared(loaded, batch_tokens)
        return prepared, prepared.load()
    return loaded, loaded
