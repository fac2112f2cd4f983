from __future__ import annotations

import pytest

from tiny_models import make_tiny_bert, make_tiny_gpt2


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory):
    return make_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_gpt2_dir):
    from biaslab.runners.loading import load_model

    return load_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu")


@pytest.fixture(scope="session")
def tiny_bert(tiny_bert_dir):
    from biaslab.runners.loading import load_model

    return load_model(str(tiny_bert_dir), dtype="fp32", device="cpu")
