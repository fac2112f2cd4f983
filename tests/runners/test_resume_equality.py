"""Issue 46: a collection killed at 30% and resumed equals an uninterrupted one, bit for bit, in fp32 and in bf16.

A resumed exact-mode run explores the explorations that hold a pending prompt whole, formed over the whole request
list (`collect_exact(everything=...)`), so each prompt is computed with the same batch neighbours as in an
uninterrupted run; and the resumed run takes the thread count the first run recorded. The reference here is
another uninterrupted run with the same thread count; the killed run measured its count (2 free cores) and the
resumed run, on a machine that has become busy (1 free core), must still use 2."""

from __future__ import annotations

import pytest
import torch

from biaslab.engines import threads as threads_module
from biaslab.engines.hf.loading import load_model
from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse


def _evidence(db) -> tuple[dict, dict]:
    with Warehouse.open(db, read_only=True) as wh:
        probs = {(r, o): p for r, o, p in wh.rows("SELECT request_id, option, prob FROM choice_probs")}
        nodes = {(r, n): (list(i), list(v), s) for r, n, i, v, s in wh.rows(
            "SELECT request_id, node_id, topk_ids, topk_logits, logsumexp FROM choice_nodes")}
    return probs, nodes


def _stopping_at(share: float):
    """A progress factory whose callback raises Ctrl-C once `share` of the prompts are done."""
    def factory(total: int, done: int):
        count = [done]

        def advance(n: int) -> None:
            count[0] += n
            if count[0] >= share * total:
                raise KeyboardInterrupt
        return advance
    return factory


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_killed_at_30_percent_and_resumed_equals_an_uninterrupted_run(tmp_path, tiny_gpt2_dir, data_dir,
                                                                       dataset_folder, monkeypatch, dtype):
    dataset_folder("winopron")
    loaded = load_model(str(tiny_gpt2_dir), dtype=dtype, device="cpu")
    free = {"count": 2}

    class Measured(threads_module.FreeCores):
        def _measure(self) -> int:
            return free["count"]

    monkeypatch.setattr(threads_module, "FreeCores", Measured)
    # top_k 5: the random tiny model's answer tries stay small (the default 40 explores hundreds of nodes a prompt)
    common = dict(dataset="winopron", data_dir=str(data_dir), limit=4, dtype=dtype, prompt_batch=8,
                  chunk_size=4, top_k=5)
    before = torch.get_num_threads()
    try:
        reference = tmp_path / "reference.duckdb"
        assert collect(CollectConfig(db=str(reference), threads=2, **common), loaded=loaded).added == 40
        db = tmp_path / "killed.duckdb"
        with pytest.raises(KeyboardInterrupt):
            collect(CollectConfig(db=str(db), **common), loaded=loaded, progress=_stopping_at(0.3))
        kept = len({r for r, _ in _evidence(db)[0]})
        assert 0 < kept < 40
        free["count"] = 1  # the machine is busy now: the resumed run must still use the recorded 2 threads
        resumed = collect(CollectConfig(db=str(db), **common), loaded=loaded)
    finally:
        torch.set_num_threads(before)
    assert resumed.added == 40 - kept
    assert any(n.startswith("threads: 2 (as run") for n in resumed.notes)
    (expected_probs, expected_nodes), (probs, nodes) = _evidence(reference), _evidence(db)
    assert probs.keys() == expected_probs.keys() and nodes.keys() == expected_nodes.keys()
    assert max(abs(probs[k] - expected_probs[k]) for k in probs) == 0.0
    assert nodes == expected_nodes  # every stored logit, bit for bit
