"""The model a collection asks, as the one road of `runners.collect` holds it: prepared without weights, its backend
loaded only when something is pending (`EngineHandle`); a hosted model's key assumed from the warehouse before
anything is sent (`assume_known`)."""

from __future__ import annotations

from pathlib import Path

from .. import engines
from ..warehouse import Warehouse
from . import runs
from .config import CollectConfig

__all__ = ["EngineHandle", "assume_known", "engine_handle", "read_only"]


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


def engine_handle(config: CollectConfig, module, loaded) -> EngineHandle:
    """The model: prepared by the backend without weights, or one passed in, for tests and benchmarks that reuse one
    model (a model an engine loaded, or a loaded `Backend`: `engines.reuse`)."""
    if loaded is None:
        return EngineHandle(module.prepare(config.model, config.backend_options()))
    prepared, backend = engines.reuse(loaded, config.max_tokens)
    return EngineHandle(prepared, backend, owned=False)


def assume_known(wh, handle: EngineHandle) -> None:
    """A hosted model (`deferred`): its key becomes the snapshot this warehouse last saw (`runs.known_revision`);
    nothing is sent. Other models are left as prepared."""
    if handle.prepared.deferred:
        handle.prepared.assume(runs.known_revision(wh, handle.prepared))
        handle.refresh()


def read_only(path) -> Warehouse:
    """The warehouse at `path` opened read-only, or an empty one in memory where there is none yet."""
    return Warehouse.open(path, read_only=True) if Path(path).exists() else Warehouse.empty()
