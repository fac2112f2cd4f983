"""Shared fixtures: the dataset directory (skips with the missing folder named) and fresh warehouses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from biaslab.warehouse import Warehouse
from tiny_models import make_tiny_bert, make_tiny_gpt2


if os.environ.get("BIASLAB_DATA"):  # the README's relative ../shared/datasets, resolved once: some tests change
    os.environ["BIASLAB_DATA"] = str(Path(os.environ["BIASLAB_DATA"]).resolve())  # directory (subprocesses inherit)


def data_root() -> Path | None:
    env = os.environ.get("BIASLAB_DATA")
    if env:
        return Path(env)
    sibling = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    return sibling if sibling.is_dir() else None


@pytest.fixture(scope="session", autouse=True)
def biaslab_cache(tmp_path_factory) -> Path:
    """The suite's own cache folder (the measured default dtype): nothing is written under the user's home. Subprocesses
    inherit it through the environment."""
    folder = tmp_path_factory.mktemp("biaslab-cache")
    previous = os.environ.get("BIASLAB_CACHE")
    os.environ["BIASLAB_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("BIASLAB_CACHE", None)
    else:
        os.environ["BIASLAB_CACHE"] = previous


@pytest.fixture(scope="session")
def data_dir() -> Path:
    root = data_root()
    if root is None or not root.is_dir():
        pytest.skip("no dataset directory: set BIASLAB_DATA to the folder holding the upstream datasets")
    return root


@pytest.fixture
def dataset_folder(data_dir: Path):
    """Call with a folder name; skips naming the folder when it is absent."""

    def _get(folder: str) -> Path:
        path = data_dir / folder
        if not path.is_dir():
            pytest.skip(f"dataset folder {path} is absent")
        return path

    return _get


@pytest.fixture
def warehouse(tmp_path: Path):
    wh = Warehouse.open(tmp_path / "w.duckdb")
    yield wh
    wh.close()


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory):
    return make_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


#: the device of the tiny models (`BIASLAB_TEST_DEVICE`, default cpu): the GPU kit runs the exact-vs-sampling and
#: scoring-vs-naive tests with `BIASLAB_TEST_DEVICE=cuda` (benchmarks/gpu/run_device.sh)
TEST_DEVICE = os.environ.get("BIASLAB_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_gpt2_dir):
    from biaslab.engines.hf.loading import load_model

    return load_model(str(tiny_gpt2_dir), dtype="fp32", device=TEST_DEVICE)


@pytest.fixture(scope="session")
def tiny_bert(tiny_bert_dir):
    from biaslab.engines.hf.loading import load_model

    return load_model(str(tiny_bert_dir), dtype="fp32", device=TEST_DEVICE)
