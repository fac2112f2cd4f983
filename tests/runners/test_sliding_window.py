"""Exact mode on a model with sliding-window layers (Gemma 3's kind). A prompt longer than the window runs its trie
levels by cache copies (its sliding layers' prompt cache is already cut), equal to brute-force enumeration; forced
onto tree attention, the walk stops in one line. A prompt inside the window whose trie passes it (a DecodingTrust
prompt on Gemma 3 270M) runs as tree attention: the tree cache keeps every slot and the sliding layers' mask hides
what the window leaves out, equal to brute force and to the cache copies node by node."""

from __future__ import annotations

import pytest
import torch

from biaslab.errors import EngineError
from biaslab.runners.answers import AnswerParser
from hf_explore import brute_force, explore
from tiny_models import _byte_level_tokenizer, _spread_logits

WINDOW = 8


@pytest.fixture(scope="module")
def sliding():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = _byte_level_tokenizer(300)
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=WINDOW,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
                              bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=0)
    model = Gemma3ForCausalLM(config).eval()
    _spread_logits(model)
    model.config._attn_implementation = "sdpa"
    return model, tok


def test_prompts_longer_than_the_window_are_explored_by_cache_copies_equal_to_brute_force(sliding):
    from biaslab.engines.hf.tree import tree_fits_window

    model, tok = sliding
    prompt = tok("The nurse said that she had finished the shift early, and the", add_special_tokens=False)[
        "input_ids"]
    assert len(prompt) > WINDOW and not tree_fits_window(model, len(prompt))
    parser = AnswerParser(("he", "she"), "'")
    stops = {tok.eos_token_id}
    [trie] = explore(model, tok, [prompt], [parser], max_new_tokens=3, k_store=64, stop_ids=stops, pad_id=0,
                     temperature=1.0, top_k=5)
    from biaslab.runners.trie import probabilities

    exact = probabilities(trie, parser.options, 1.0, 5)
    reference = brute_force(model, tok, prompt, parser, 1.0, 5, 3, stops)
    for outcome, value in reference.items():
        assert exact[outcome] == pytest.approx(value, abs=1e-5), outcome


def test_tree_attention_past_the_window_stops_in_one_line(sliding):
    model, tok = sliding
    prompt = tok("The nurse said that she had finished the shift early, and the", add_special_tokens=False)[
        "input_ids"]
    with pytest.raises(EngineError, match="more than the model.s sliding window"):  # WindowExceeded
        explore(model, tok, [prompt], [AnswerParser(("he", "she"), "'")], max_new_tokens=3, k_store=64,
                stop_ids={tok.eos_token_id}, pad_id=0, temperature=1.0, top_k=5, tree=True)


def _backend(model, tok, folder):
    from biaslab.engines import reuse
    from biaslab.engines.hf.loading import load_model

    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return reuse(load_model(str(folder), dtype="fp32", device="cpu"))[1]


def test_a_trie_that_outgrows_the_window_runs_as_tree_attention_equal_to_brute_force(sliding, tmp_path):
    """A prompt shorter than the window whose trie passes it (a DecodingTrust prompt on Gemma 3 270M: before, the
    whole exploration was done again by cache copies, 25 s a prompt): the tree cache keeps every slot and the
    sliding layers' mask hides what the window leaves out. The prompt is long enough that the window bites: its
    deeper nodes no longer see its first tokens, as in the model's own cache. The probabilities equal brute force
    (one full forward per path, the model's own sliding mask) and the cache copies."""
    from biaslab.engines.hf.tree import TreeLevels
    from biaslab.runners.protocols.choice import _explore
    from biaslab.runners.trie import probabilities, walk

    model, tok = sliding
    backend = _backend(model, tok, tmp_path / "m")
    prompt = tok("The nurse", add_special_tokens=False)["input_ids"]
    max_new = 4
    assert len(prompt) < WINDOW <= len(prompt) + max_new - 1  # the window bites at the deeper levels
    parser = AnswerParser(("he", "she"), "'")
    stops = set(backend.stop_ids)
    expander = backend.expander([prompt], 64)
    assert isinstance(expander.levels, TreeLevels)
    [tree] = walk(expander, tok, [parser], max_new_tokens=max_new, stop_ids=stops, temperature=1.0, top_k=5)
    assert max(tree.node_depth) + len(prompt) >= WINDOW and len(tree.node_parent) + len(prompt) > WINDOW

    class Params:
        temperature, top_k = 1.0, 5
    [explored] = _explore(backend, [prompt], [1], 64, tok, [parser], max_new, Params, 0.0)
    [copies] = walk(backend.expander([prompt], 64, tree=False), tok, [parser], max_new_tokens=max_new,
                    stop_ids=stops, temperature=1.0, top_k=5)
    reference = brute_force(backend.model, tok, prompt, parser, 1.0, 5, max_new, stops)
    for trie in (tree, explored):
        exact = probabilities(trie, parser.options, 1.0, 5)
        by_copies = probabilities(copies, parser.options, 1.0, 5)
        for outcome, value in reference.items():
            assert exact[outcome] == pytest.approx(value, abs=1e-5), outcome
            assert exact[outcome] == pytest.approx(by_copies[outcome], abs=1e-6), outcome


def test_tree_attention_past_the_window_equals_cache_copies_node_by_node(sliding, tmp_path):
    """Six prompts of different lengths explored together (left-padded: the pads count in the window, as in the
    model's own cache; the widest tries move to a cache of their own, a copy that keeps every slot): every node of
    every trie, its top-K ids and logits, as by cache copies; and the window matters here (without the sliding
    layers' mask, the deeper logits differ)."""
    import numpy as np

    from biaslab.engines.hf import tree as tree_module
    from biaslab.runners.trie import walk

    model, tok = sliding
    backend = _backend(model, tok, tmp_path / "m")
    texts = ("The nurse", "A doc", "Then", "He", "She said", "Once")
    prompts = [tok(text, add_special_tokens=False)["input_ids"] for text in texts]
    parser = AnswerParser(("he", "she"), "'")
    settings = dict(max_new_tokens=5, stop_ids=set(backend.stop_ids), temperature=1.0, top_k=8)

    def tries(tree):
        return walk(backend.expander(prompts, 64, tree=tree), tok, [parser] * len(prompts), **settings)

    moved = []
    take = tree_module._Part.take

    def recorded(self, rows, copy, config=None):
        moved.append(copy)
        return take(self, rows, copy, config)

    tree_module._Part.take = recorded
    try:
        by_tree = tries(None)
    finally:
        tree_module._Part.take = take
    assert True in moved  # some rows moved to a cache of their own
    by_copies = tries(False)
    for a, b in zip(by_tree, by_copies):
        assert a.node_parent == b.node_parent and a.node_token == b.node_token and a.edges == b.edges
        for ids_a, ids_b, la, lb in zip(a.topk_ids, b.topk_ids, a.topk_logits, b.topk_logits):
            assert np.array_equal(ids_a, ids_b)
            np.testing.assert_allclose(la, lb, atol=2e-5)
    unmasked = tree_module.TreeLevels._masks

    def full_sight(self, allowed, part, depth):  # every layer sees the whole prompt: the window ignored
        masks = unmasked(self, allowed, part, depth)
        return {name: masks["full_attention"] for name in masks} if isinstance(masks, dict) else masks

    tree_module.TreeLevels._masks = full_sight
    try:
        blind = tries(None)
    finally:
        tree_module.TreeLevels._masks = unmasked
    gaps = [float(np.abs(x - y).max()) for a, b in zip(blind, by_copies)
            for x, y in zip(a.topk_logits, b.topk_logits) if len(x) == len(y)]
    assert max(gaps) > 1e-3
