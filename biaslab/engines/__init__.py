"""The engines (backends) by name: each is a module exposing `NAME`, `CAPABILITIES` (frozenset), `Options` (its
`--engine-arg` settings, pydantic), `installed()` -> (bool, version or why not), `validate_options(options)` and
`prepare(model, options: BackendOptions) -> Prepared` (see `base`, where the `Backend` interface is).

Modules are imported on first use (`get`), and a backend module never imports its engine at import time, so a
missing vllm breaks neither `import biaslab` nor the other backends.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .base import BackendOptions, Unsupported, require  # noqa: F401  (the interface, for callers)

#: backend name -> module (relative to this package)
BACKENDS: dict[str, str] = {"hf": ".hf", "vllm": ".vllm", "openai": ".openai"}
DEFAULT_BACKEND = "hf"


def names() -> tuple[str, ...]:
    """Every backend name, the default first."""
    return tuple(BACKENDS)


def get(name: str) -> ModuleType:
    """The backend module `name`, refused in one line when unknown (or absent from this installation)."""
    if name not in BACKENDS:
        raise ValueError(f"--backend {name!r} is unknown; use one of {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(BACKENDS[name], __name__)
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{name}":
            raise ValueError(f"--backend {name}: this biaslab build has no {name} backend module") from None
        raise
