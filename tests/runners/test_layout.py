"""Layout moves of the backends issue: one protocol table, one request base, one resume query."""

from __future__ import annotations

import pytest

from biaslab import loaders
from biaslab.runners.protocols.choice import ChoiceRequest
from biaslab.runners.protocols.gen import GenRequest
from biaslab.runners.requests import Request
from biaslab.runners.protocols.prob import ScoreRequest
from biaslab.warehouse import WarehouseError


def test_every_dataset_declares_protocols_that_exist():
    from biaslab.runners import protocols

    known = loaders.datasets()
    assert all(info.protocols and set(info.protocols) <= set(protocols.NAMES) for info in known.values())
    assert known["tango"].protocols == ("gen", "prob") and known["winopron"].protocols == ("choice", "meta")
    assert {n for n, info in known.items() if "gen" in info.protocols} == {"misgendered", "ruff", "tango",
                                                                                 "decodingtrust"}


def test_one_request_base():
    for cls in (ScoreRequest, ChoiceRequest, GenRequest):
        assert issubclass(cls, Request)
        assert [f for f in cls.__dataclass_fields__][:3] == ["request_id", "stimulus_id", "protocol"]


def test_stored_returns_what_is_there_for_these_keys(warehouse):
    rows = [dict(model_key=m, request_id=r, sample_index=i, seed=10 + i, temperature=t, top_k=40, top_p=1.0,
                 max_new_tokens=6, stimulus_id="s", text="x", token_ids=[1], token_logprobs=[-0.5],
                 finish_reason="length", valid=True)
            for m in ("A", "B") for r in ("r1", "r2") for i in (0, 1) for t in (0.5, 1.0)]
    warehouse.append("samples", rows)
    got = warehouse.stored("samples", "A", ["r1", "zz"], ("request_id", "sample_index", "seed"),
                           temperature=0.5, top_k=40, top_p=1.0, max_new_tokens=6)
    assert got == {("r1", 0, 10), ("r1", 1, 11)}
    assert warehouse.stored("samples", "B", ["r2"]) == {("r2",)}
    assert warehouse.stored("samples", "A", []) == set()
    assert warehouse.stored("samples", "C", ["r1"]) == set()
    with pytest.raises(WarehouseError, match="not key columns of samples"):
        warehouse.stored("samples", "A", ["r1"], ("text",))
    with pytest.raises(WarehouseError, match="not an evidence table keyed by request"):
        warehouse.stored("runs", "A", ["r1"])


def test_pronoun_knowledge_lives_in_lexicon_and_loaders_only_read_files():
    import importlib
    import importlib.util

    for name in ("pronouns", "pronoun_detection", "tango_convert"):
        assert importlib.import_module(f"biaslab.lexicon.{name}")
        assert importlib.util.find_spec(f"biaslab.loaders.{name}") is None
