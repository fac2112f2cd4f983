"""Fixtures shared by the loader tests of one dataset: the test module names its dataset with a module-level
`INFO` (the loader module's registered `DatasetInfo`)."""

from __future__ import annotations

from pathlib import Path

import pytest


def module_info(request: pytest.FixtureRequest):
    """The `INFO` of the requesting test module; a clear error when the module does not define one."""
    info = getattr(request.module, "INFO", None)
    if info is None:
        raise RuntimeError(f"{request.module.__name__} uses a dataset fixture but defines no INFO")
    return info


@pytest.fixture(scope="module")
def folder(request: pytest.FixtureRequest, data_dir: Path) -> Path:
    """The module's dataset folder under the data directory; skips naming the folder when it is absent."""
    path = module_info(request).path(data_dir)
    if not path.is_dir():
        pytest.skip(f"dataset folder {path} is absent")
    return path


@pytest.fixture(scope="module")
def stimuli(request: pytest.FixtureRequest, folder: Path, data_dir: Path):
    """The module's dataset loaded with its default options (once per module)."""
    return module_info(request).load(data_dir)
