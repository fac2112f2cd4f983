"""The built-in datasets by name: a lazy map of dataset name -> loader module, each module declaring its datasets
(`DATASETS`, a tuple of `DatasetInfo`). Importing a loader module registers nothing: `get` imports the one module a
name needs, `datasets` all of them."""

from __future__ import annotations

import importlib
import os
from functools import lru_cache
from pathlib import Path

from ..errors import UsageError
from . import verify
from .dataset import DatasetInfo

#: dataset name -> the module of `biaslab.loaders` that declares it
MODULES: dict[str, str] = {
    "winogender": "winogender",
    "winopron": "winopron",
    "misgendered": "misgendered",
    "ruff": "ruff",
    "tango": "tango",
    "winobias": "winobias",
    "gece-winobias": "gece",
    "gece-winogender": "gece",
    "genderlex": "gece",
    "genderlex-person": "gece",
    "genderlex-someone": "gece",
    "negation-examples": "negation",
    "negation": "negation",
    "winoqueer": "winoqueer",
    "bbq": "bbq",
    "crows-pairs": "crows_pairs",
    "crows-pairs-revised": "crows_pairs",
    "decodingtrust": "decodingtrust",
    "holistic-bias": "holistic_bias",
}


def _declared(module: str) -> dict[str, DatasetInfo]:
    found = importlib.import_module(f"{__package__}.{module}").DATASETS
    return {info.name: info for info in found}


def datasets() -> dict[str, DatasetInfo]:
    """All built-in datasets by name, in the order of `MODULES`."""
    out: dict[str, DatasetInfo] = {}
    for module in dict.fromkeys(MODULES.values()):
        out.update(_declared(module))
    return {name: out[name] for name in MODULES}


def get(name: str) -> DatasetInfo:
    """The built-in dataset `name`; ValueError naming the known ones otherwise."""
    if name not in MODULES:
        raise UsageError(f"unknown dataset {name!r}; known: {', '.join(sorted(MODULES))}")
    return _declared(MODULES[name])[name]


@lru_cache(maxsize=1)
def upstream_pins() -> frozenset[str]:
    """Every pinned sha256 of every built-in dataset (its files and its fetch sources)."""
    return frozenset(sha for info in datasets().values()
                     for sha in [*info.files.values(), *(src.sha256 for src in info.sources.values())] if sha)


verify.use_pins(upstream_pins)


#: where this project keeps its datasets, relative to a source checkout's folder: `shared/datasets` beside it
PROJECT_DATA = Path("..") / "shared" / "datasets"


def project_data_dir() -> Path | None:
    """The `shared/datasets` folder beside the source checkout biaslab runs from (this project's layout), or None
    (an installed wheel, or a clone elsewhere)."""
    checkout = Path(__file__).resolve().parents[2]
    folder = (checkout / PROJECT_DATA).resolve()
    return folder if (checkout / "pyproject.toml").is_file() and folder.is_dir() else None


def default_data_dir(flag: str | os.PathLike | None = None) -> Path:
    """--data-dir, else $BIASLAB_DATA, else the project's `shared/datasets` beside a source checkout
    (`project_data_dir`), else a per-user cache directory (where `biaslab data fetch` puts datasets)."""
    if flag:
        return Path(flag).expanduser()
    env = os.environ.get("BIASLAB_DATA")
    if env:
        return Path(env).expanduser()
    beside = project_data_dir()
    if beside is not None:
        return beside
    import platformdirs

    return Path(platformdirs.user_cache_dir("biaslab")) / "datasets"
