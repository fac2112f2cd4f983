"""Exact mode on a model with sliding-window layers (Gemma 3's kind) over prompts longer than its window: the trie
levels run by cache copies there (tree attention's 4-D mask no longer matches a sliding layer's cut cache: a
DecodingTrust prompt with its trie passed Gemma 3 270M's 512 and stopped with a shape error), equal to brute-force
enumeration; forced onto tree attention past the window, the walk stops in one line."""

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


def test_a_trie_that_outgrows_the_window_is_explored_again_by_copies(sliding, tmp_path):
    """A prompt shorter than the window starts as tree attention; its trie passes the window at the second level,
    so the exploration (`choice._explore`, what `collect_exact` runs) is done again by cache copies: the same
    probabilities as brute force."""
    from biaslab.engines import reuse
    from biaslab.engines.hf.loading import load_model
    from biaslab.runners.protocols.choice import _explore
    from biaslab.runners.trie import probabilities

    model, tok = sliding
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    _, backend = reuse(load_model(str(tmp_path / "m"), dtype="fp32", device="cpu"))
    prompt = tok("The nurse", add_special_tokens=False)["input_ids"]
    assert len(prompt) < WINDOW
    parser = AnswerParser(("he", "she"), "'")

    class Params:
        temperature, top_k = 1.0, 5
    from biaslab.engines.base import WindowExceeded
    from biaslab.runners.trie import walk

    with pytest.raises(WindowExceeded):  # tree attention alone cannot: the fallback below is what answers
        walk(backend.expander([prompt], 64), tok, [parser], max_new_tokens=3, stop_ids=set(backend.stop_ids),
             temperature=1.0, top_k=5)
    [trie] = _explore(backend, [prompt], [1], 64, tok, [parser], 3, Params, 0.0)
    exact = probabilities(trie, parser.options, 1.0, 5)
    reference = brute_force(backend.model, tok, prompt, parser, 1.0, 5, 3, set(backend.stop_ids))
    for outcome, value in reference.items():
        assert exact[outcome] == pytest.approx(value, abs=1e-5), outcome
