"""The engines (backends) by name: each is a module exposing `NAME`, `CAPABILITIES` (frozenset), `Options` (its
`--engine-arg` settings, pydantic), `installed()` -> (bool, version or why not), `validate_options(options)` and
`prepare(model, options: BackendOptions) -> Prepared` (see `base`, where the `Backend` interface is).

The built-in engines (hf, vllm, openai) and any an installed distribution declares in the entry-point group
`biaslab.engines` are found through `registry` (`names`, `get`; a built-in wins a name clash). Modules are imported
on first use (`get`), and a backend module never imports its engine at import time, so a missing vllm or a broken
plugin breaks neither `import biaslab` nor the other backends.
"""

from __future__ import annotations

from .base import BackendOptions, Flag, Unsupported, require  # noqa: F401  (the interface, for callers)
from .registry import (BACKENDS, DEFAULT_BACKEND, GROUP, Declaration, EngineWarning, declaration,  # noqa: F401
                       flags, get, names, notes, origin, plugins, problem, reuse)
