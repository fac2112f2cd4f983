"""Registry of known datasets: where their files live, pinned checksums, licence, and the loader to call."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..schema import Stimulus
from .errors import DataError
from .readers import sha256_file

Loader = Callable[..., list[Stimulus]]


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset biaslab knows how to load from its upstream layout under `<data-dir>/<folder>/`."""

    name: str
    folder: str
    loader: Loader
    licence: str
    description: str
    files: Mapping[str, str | None] = field(default_factory=dict)  # relative path -> pinned sha256 (None: unpinned)
    options: Mapping[str, Any] = field(default_factory=dict)       # accepted options and their defaults
    url: str | None = None

    def path(self, data_dir: Path) -> Path:
        return Path(data_dir) / self.folder

    def present(self, data_dir: Path) -> bool:
        return all((self.path(data_dir) / rel).is_file() for rel in self.files) and self.path(data_dir).is_dir()

    def verify(self, data_dir: Path) -> dict[str, str]:
        """Per file: 'ok', 'missing', 'mismatch' or 'unpinned'."""
        status = {}
        for rel, pinned in self.files.items():
            p = self.path(data_dir) / rel
            if not p.is_file():
                status[rel] = "missing"
            elif pinned is None:
                status[rel] = "unpinned"
            else:
                status[rel] = "ok" if sha256_file(p) == pinned else "mismatch"
        return status

    def load(self, data_dir: Path, **options: Any) -> list[Stimulus]:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(f"dataset {self.name}: unknown option(s) {unknown}; accepted: {sorted(self.options)}")
        folder = self.path(data_dir)
        if not folder.is_dir():
            raise DataError(folder, f"dataset folder not found (dataset {self.name}; set --data-dir or BIASLAB_DATA)")
        merged = {**self.options, **{k: v for k, v in options.items() if v is not None}}
        return self.loader(folder, **merged)


_REGISTRY: dict[str, DatasetInfo] = {}


def register(info: DatasetInfo) -> DatasetInfo:
    if info.name in _REGISTRY:
        raise RuntimeError(f"dataset {info.name} registered twice")
    _REGISTRY[info.name] = info
    return info


def datasets() -> dict[str, DatasetInfo]:
    """All registered datasets by name (importing the loader modules registers them)."""
    from . import _all  # noqa: F401  (import side effect: registration)

    return dict(_REGISTRY)


def get(name: str) -> DatasetInfo:
    known = datasets()
    if name not in known:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(known))}")
    return known[name]


def default_data_dir(flag: str | os.PathLike | None = None) -> Path:
    """--data-dir, else $BIASLAB_DATA, else a per-user cache directory."""
    if flag:
        return Path(flag).expanduser()
    env = os.environ.get("BIASLAB_DATA")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("biaslab")) / "datasets"
