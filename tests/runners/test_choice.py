"""Forced choice: the answer parser, exact probabilities vs brute force and vs seeded sampling, SQL re-derivation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import binom
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

from biaslab.runners.answers import AnswerParser, decode
from biaslab.runners.requests import sample_seed
from biaslab.runners.trie import INVALID, UNRESOLVED, probabilities
from hf_explore import brute_force, explore
from biaslab.engines.hf.kvcache import encode_prompts, extend
from biaslab.engines.base import SamplingSettings
from biaslab.engines.hf.sampling import sample_from_state, warp
from biaslab.engines.hf.scoring import _base_and_head


def test_parser_reads_up_to_the_closing_quote_ignoring_case_and_space():
    p = AnswerParser(("she", "he"))
    assert p.parse(" She'}") == ("She", "she")
    assert p.parse("he") == ("he", "he")
    assert p.parse("she, he'") == ("she, he", None)
    assert p.status("", ended=False) == ("live", None)
    assert p.status(" s", ended=False) == ("live", None)
    assert p.status("sh", ended=False) == ("live", None)
    assert p.status("she ", ended=False) == ("live", None)      # a closing quote may still come
    assert p.status("she,", ended=False) == ("invalid", None)
    assert p.status("HE'", ended=False) == ("valid", "he")
    assert p.status("he", ended=True) == ("valid", "he")
    assert p.status("<text>", ended=False) == ("invalid", None)
    with pytest.raises(ValueError):
        AnswerParser(("She", "she"))


def _printable(tok, ids) -> bool:
    """Usable as an answer: something left after trimming, no closing quote, no undecodable bytes."""
    text = decode(tok, ids)
    return text.strip() != "" and "'" not in text and "\ufffd" not in text


@torch.inference_mode()
def _model_options(model, tok, prompt: list[int], n_tokens: int = 2, n_options: int = 2) -> tuple[str, ...]:
    """`n_options` multi-token answers the tiny model finds likely: its top usable first tokens, each followed by
    the most likely usable continuation."""
    _, head = _base_and_head(model)
    state = encode_prompts(model, [prompt], 0)
    ranked = head.to_float(head.raw(state.last_hidden))[0].argsort(descending=True).tolist()
    options: list[str] = []
    for token in ranked:
        if len(options) == n_options:
            break
        if not _printable(tok, [token]):
            continue
        path = [token]
        while len(path) < n_tokens:
            _, hidden = extend(model, state.select([0]), torch.tensor([path], device=model.device))
            nxt = head.to_float(head.raw(hidden[:, -1]))[0].argsort(descending=True).tolist()
            path.append(next(t for t in nxt if _printable(tok, [*path, t])))
        text = decode(tok, path)
        if text.strip().lower() not in {o.strip().lower() for o in options}:
            options.append(text)
    return tuple(options)


def _prompts(tok, n: int) -> list[list[int]]:
    words = ["nurse", "teacher", "priest", "technician", "customer", "doctor", "student", "junkie"]
    texts = [f"The {a} said that the {b}" for a, b in itertools.product(words, words) if a != b][:n]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.parametrize("n_options", [2, 3, 5])
def test_exact_probabilities_equal_brute_force_enumeration(tiny_gpt2, n_options):
    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    stops = {tok.eos_token_id}
    prompts = _prompts(tok, 3)
    parsers = [AnswerParser(_model_options(model, tok, p, n_tokens=3, n_options=n_options)) for p in prompts]
    assert all(len(p.options) == n_options for p in parsers)
    assert all(len(tok(o, add_special_tokens=False)["input_ids"]) >= 2 for p in parsers for o in p.options)
    tries = explore(model, tok, prompts, parsers, max_new_tokens=3, k_store=64, stop_ids=stops, pad_id=0,
                    temperature=0.3, top_k=5, min_mass=0.0)
    for prompt, parser, trie in zip(prompts, parsers, tries):
        exact = probabilities(trie, parser.options, 0.3, 5)
        assert exact[UNRESOLVED] == 0.0
        reference = brute_force(model, tok, prompt, parser, 0.3, 5, 3, stops)
        for outcome, value in reference.items():
            assert exact[outcome] == pytest.approx(value, abs=1e-6)
        assert sum(v for k, v in exact.items() if k != INVALID) > 0.01  # the test exercises real mass


def test_warp_matches_hugging_face_warpers():
    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 3
    ref = logits.clone()
    for w in (TemperatureLogitsWarper(0.7), TopKLogitsWarper(10)):
        ref = w(None, ref)
    ours = warp(logits, SamplingSettings(0.7, 10, 1.0, 1))
    torch.testing.assert_close(ours, ref.softmax(-1))
    # a top_k of the whole vocabulary (or more: DecodingTrust's "no truncation") keeps every token, as the plain
    # tempered softmax does; it skips the per-step sort of the vocabulary, not a token
    for k in (50, 262_144):
        assert torch.equal(warp(logits, SamplingSettings(0.7, k, 1.0, 1)), (logits / 0.7).softmax(-1))


@pytest.mark.parametrize("n_options", [2, 3])
def test_sampled_fractions_agree_with_exact_probabilities(tiny_gpt2, n_options):
    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    stops = {tok.eos_token_id}
    n_samples, params = 2000, SamplingSettings(temperature=0.8, top_k=5, top_p=1.0, max_new_tokens=2)
    prompts = _prompts(tok, 20)
    parsers = [AnswerParser(_model_options(model, tok, p, n_options=n_options)) for p in prompts]
    assert all(len(p.options) == n_options for p in parsers)
    tries = explore(model, tok, prompts, parsers, max_new_tokens=2, k_store=64, stop_ids=stops, pad_id=0,
                    temperature=params.temperature, top_k=params.top_k)
    state = encode_prompts(model, prompts, 0)
    agree, valid_mass = 0, 0.0
    for row, (parser, trie) in enumerate(zip(parsers, tries)):
        exact = probabilities(trie, parser.options, params.temperature, params.top_k)
        valid_mass += sum(exact[o] for o in parser.options)
        # seeds as collections derive them (hashed): the first draws of consecutive integer seeds are not uniform
        # enough for this check (Kolmogorov-Smirnov p 0.014 over 8,000 seeds from 867,777)
        seeds = [sample_seed(0, f"prompt {row}", i) for i in range(n_samples)]
        drawn = sample_from_state(model, state.select([row] * n_samples), seeds, params, stops, 0)
        answers = [parser.parse(decode(tok, s.token_ids))[1] for s in drawn]
        ok = True
        for outcome in (*parser.options, INVALID):
            count = sum(a == (None if outcome == INVALID else outcome) for a in answers)
            p = min(max(exact[outcome], 0.0), 1.0)
            lo, hi = binom.ppf(0.005, n_samples, p), binom.ppf(0.995, n_samples, p)
            ok &= lo <= count <= hi
        agree += ok
    assert agree >= 19
    assert valid_mass / len(prompts) > 0.05  # the options carry real mass: the comparison is not all-invalid


def test_same_seed_same_samples(tiny_gpt2):
    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    params = SamplingSettings(1.0, 50, 0.95, 8)
    state = encode_prompts(model, _prompts(tok, 2), 0)
    a = sample_from_state(model, state.select([0, 1, 0]), [7, 8, 9], params, {tok.eos_token_id}, 0)
    b = sample_from_state(model, state.select([0, 1, 0, 1]), [7, 8, 9, 10], params, {tok.eos_token_id}, 0)
    assert [s.token_ids for s in a] == [s.token_ids for s in b[:3]]
    assert a[0].token_ids != a[2].token_ids or a[0].logprobs != a[2].logprobs  # different seeds differ
    for s in a:
        assert all(lp <= 0 for lp in s.logprobs) and len(s.token_ids) == len(s.logprobs)


def test_binomial_interval_check_can_fail():
    """The agreement criterion rejects a wrong probability: 2000 draws at 0.30 are outside the interval of 0.25."""
    count = int(0.30 * 2000)
    assert not binom.ppf(0.005, 2000, 0.25) <= count <= binom.ppf(0.995, 2000, 0.25)
    assert np.isclose(binom.ppf(0.5, 2000, 0.25), 500)


def test_shared_prefix_sampler_draws_the_same_samples(tiny_gpt2):
    from biaslab.engines.hf.sampling import sample_shared_prefixes

    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    params = SamplingSettings(0.7, 8, 1.0, 4)
    state = encode_prompts(model, _prompts(tok, 2), 0)
    seeds = list(range(300, 360))
    plain = sample_from_state(model, state.select([1] * len(seeds)), seeds, params, {tok.eos_token_id}, 0)
    shared = sample_shared_prefixes(model, state, 1, seeds, params, {tok.eos_token_id})
    assert [s.token_ids for s in plain] == [s.token_ids for s in shared]
    assert [s.finish_reason for s in plain] == [s.finish_reason for s in shared]
    np.testing.assert_allclose(np.concatenate([s.logprobs for s in plain]),
                               np.concatenate([s.logprobs for s in shared]), atol=1e-5)
    assert len({tuple(s.token_ids) for s in shared}) > 5


def test_trie_levels_are_capped_and_the_cut_mass_is_reported(tiny_gpt2):
    from collections import Counter

    from biaslab.runners.trie import MAX_LIVE_PER_LEVEL

    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    prompts = _prompts(tok, 2)
    parsers = [AnswerParser(("she", "he")) for _ in prompts]
    tries = explore(model, tok, prompts, parsers, max_new_tokens=6, k_store=64, stop_ids={tok.eos_token_id},
                    pad_id=0, temperature=1.0, top_k=64, min_mass=0.0)
    for parser, trie in zip(parsers, tries):
        per_level = Counter(trie.node_depth)
        assert max(per_level.values()) <= MAX_LIVE_PER_LEVEL
        probs = probabilities(trie, parser.options, 1.0, 64)
        assert sum(probs.values()) == pytest.approx(1.0) and all(v >= 0 for v in probs.values())
