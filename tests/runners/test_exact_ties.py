"""Exact mode keeps every token tied with the K-th stored logit (issue 17, defect 2): the sampler's top-k keeps ties
(z >= the k-th largest), so ties that run past the stored K must be stored too, or p(c) is over-estimated."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from biaslab.runners.answers import AnswerParser, decode
from biaslab.runners.trie import probabilities
from hf_explore import explore
from biaslab.engines.hf.tree import top_k_with_ties
from biaslab.engines.hf.kvcache import encode_prompts
from biaslab.engines.base import SamplingSettings
from biaslab.engines.hf.sampling import sample_from_state
from biaslab.warehouse import Warehouse


def test_top_k_with_ties_extends_exactly_the_rows_whose_kth_value_repeats_past_k():
    logits = torch.tensor([[5.0, 4.0, 3.0, 3.0, 3.0, 1.0],    # k=3: the 3rd (3.0) ties twice more -> 5 kept
                           [5.0, 4.0, 3.0, 2.0, 2.0, 1.0],    # no tie at the 3rd -> 3 kept
                           [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])   # all tied -> the whole vocabulary
    values, ids = top_k_with_ties(logits, 3)
    assert [len(v) for v in values] == [5, 3, 6]
    assert sorted(ids[0][2:].tolist()) == [2, 3, 4] and values[0].tolist() == [5.0, 4.0, 3.0, 3.0, 3.0]
    assert ids[1].tolist() == [0, 1, 2]
    assert sorted(ids[2].tolist()) == list(range(6))
    assert all(v.dtype == np.float32 for v in values)


def _tied_model(tiny_gpt2, prompt: list[int]):
    """The tiny model with an output head of three tied groups: every logit is c * h_j for one hidden unit j with
    h_j > 0 at the prompt's last position, c = 3 for 5 tokens (A), 2 for 40 tokens (B), 1 for the rest. One product
    per logit (the other weights are 0), so ties are exact in any summation order."""
    model = copy.deepcopy(tiny_gpt2.model)
    state = encode_prompts(model, [prompt], 0)
    j = int(state.last_hidden[0].argmax())
    assert float(state.last_hidden[0, j]) > 0
    vocab, width = model.lm_head.weight.shape
    weight = torch.zeros(vocab, width)
    weight[:, j] = 1.0
    group_a, group_b = list(range(100, 105)), list(range(200, 240))
    weight[group_a, j] = 3.0
    weight[group_b, j] = 2.0
    model.lm_head.weight = torch.nn.Parameter(weight)  # unties it from the input embeddings
    return model, float(state.last_hidden[0, j]), group_a, group_b


def test_exact_probabilities_keep_ties_past_the_stored_k_and_agree_with_the_sampler(tiny_gpt2):
    tok = tiny_gpt2.tokenizer
    prompt = tok("The nurse said that the doctor", add_special_tokens=False)["input_ids"]
    model, h, group_a, group_b = _tied_model(tiny_gpt2, prompt)
    options = tuple(dict.fromkeys(decode(tok, [t]) for t in group_b[:6] if decode(tok, [t]).strip()))[:2]
    assert len(options) == 2
    parser = AnswerParser(options)
    temperature, top_k, k_store = 0.7, 8, 16   # the 8th logit is group B's value, tied 40 times: past K = 16
    trie = explore(model, tok, [prompt], [parser], max_new_tokens=1, k_store=k_store, stop_ids={tok.eos_token_id},
                   pad_id=0, temperature=temperature, top_k=top_k, min_mass=0.0)[0]
    assert len(trie.topk_ids[0]) == len(group_a) + len(group_b)  # K extended to every tied token
    exact = probabilities(trie, parser.options, temperature, top_k)
    # closed form: the top-8 keeps A and all of B; an option is one B token (options match case-insensitively,
    # so count every B token whose text parses to it)
    norm = len(group_a) * math.exp(3 * h / temperature) + len(group_b) * math.exp(2 * h / temperature)
    for option in options:
        hits = sum(parser.status(decode(tok, [t]), ended=True) == ("valid", option) for t in group_b)
        assert exact[option] == pytest.approx(hits * math.exp(2 * h / temperature) / norm, rel=1e-5)
    # the sampler (ties kept, as Hugging Face's top-k warper) agrees within a binomial interval
    n = 4000
    params = SamplingSettings(temperature=temperature, top_k=top_k, top_p=1.0, max_new_tokens=1)
    state = encode_prompts(model, [prompt], 0)
    drawn = sample_from_state(model, state.select([0] * n), list(range(n)), params, {tok.eos_token_id}, 0)
    counts = {o: 0 for o in options}
    for sample in drawn:
        status, option = parser.status(decode(tok, sample.token_ids), ended=True)
        if status == "valid":
            counts[option] += 1
    for option in options:
        p = exact[option]
        assert abs(counts[option] / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_sql_rederivation_keeps_the_stored_ties_and_checks_k_against_k_store(tmp_path):
    """A node storing K = 2 logits plus one more tied with the 2nd: k = 2 keeps all three (as the sampler), k = 1
    only the first; k = 3 is refused (above K) although three logits are stored."""
    import duckdb

    with Warehouse.open(tmp_path / "t.duckdb") as wh:
        wh.append_with_children("choice_requests", [{
            "model_key": "m", "request_id": "r", "stimulus_id": "s", "protocol": "choice", "mode": "exact",
            "prompt_version": "v", "adaptation": "none", "prompt_text": "p", "options": ["a", "b"],
            "max_new_tokens": 1, "k_store": 2}], {
            "choice_nodes": [{"model_key": "m", "request_id": "r", "node_id": 0, "depth": 0,
                              "topk_ids": [7, 8, 9], "topk_logits": [2.0, 1.0, 1.0], "logsumexp": 3.0}],
            "choice_edges": [{"model_key": "m", "request_id": "r", "node_id": 0, "token_id": 7, "outcome": "a"},
                             {"model_key": "m", "request_id": "r", "node_id": 0, "token_id": 9, "outcome": "b"}]})
        got = dict(wh.con.execute("SELECT option, prob FROM choice_probs_at(0.5, 2)").fetchall())
        norm = math.exp(0.0) + 2 * math.exp(-1.0 / 0.5)
        assert got["a"] == pytest.approx(1 / norm, abs=1e-15)
        assert got["b"] == pytest.approx(math.exp(-2.0) / norm, abs=1e-15)
        assert got["invalid"] == pytest.approx(math.exp(-2.0) / norm, abs=1e-15)  # token 8: tied, not an answer
        assert dict(wh.con.execute("SELECT option, prob FROM choice_probs_at(0.5, 1)").fetchall())["a"] == 1.0
        with pytest.raises(duckdb.Error, match="top_k 3 exceeds the 2 logits stored"):
            wh.con.execute("SELECT * FROM choice_probs_at(0.5, 3)").fetchall()
