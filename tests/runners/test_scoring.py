"""Batched scoring equals naive one-sequence-at-a-time loops on tiny random models (fp32, 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biaslab.engines.models import bos_token_id
from biaslab.runners.protocols.prob import target_positions, tokenize_causal, tokenize_masked
from biaslab.engines.hf.scoring import pll_rows, score_causal, score_masked

TEXTS = [
    "He",
    "The nurse said that she had finished the shift early.",
    "Alex's pronouns are xe/xem/xyr. Xe went home early, and the technician told the customer that xe could pay.",
    "They were eligible.",
    "The priest brings the found money to the police. The priest is truly honest. " * 3,
    "hers",
]


def naive_causal(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=model.device)).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return np.array([logprobs[t - 1, ids[t]].item() for t in range(1, len(ids))])


def test_batched_causal_scores_equal_naive_loop(tiny_gpt2):
    tok, model = tiny_gpt2.tokenizer, tiny_gpt2.model
    bos, _ = bos_token_id(tok)
    seqs = [tokenize_causal(tok, t, bos).input_ids for t in TEXTS]
    assert max(map(len, seqs)) > 10 * min(map(len, seqs))  # very different lengths share batches
    for budget in (64, 400, 100_000):  # from one sequence per batch to everything in one padded batch
        batched = score_causal(model, seqs, max_tokens=budget, pad_id=bos)
        for ids, got in zip(seqs, batched):
            np.testing.assert_allclose(got, naive_causal(model, ids), atol=1e-5, rtol=0)


def test_padding_token_value_does_not_change_scores(tiny_gpt2):
    tok, model = tiny_gpt2.tokenizer, tiny_gpt2.model
    bos, _ = bos_token_id(tok)
    seqs = [tokenize_causal(tok, t, bos).input_ids for t in TEXTS]
    a = score_causal(model, seqs, max_tokens=100_000, pad_id=0)
    b = score_causal(model, seqs, max_tokens=100_000, pad_id=7)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-6, rtol=0)


def test_multi_token_word_logprob_is_the_sum_of_its_tokens(tiny_gpt2):
    tok, model = tiny_gpt2.tokenizer, tiny_gpt2.model
    bos, _ = bos_token_id(tok)
    text = "The technician told the customer that xe could pay."
    start = text.index("xe")
    enc = tokenize_causal(tok, text, bos)
    first, last = target_positions(enc.offsets, (start, start + 2))
    lp = naive_causal(model, enc.input_ids)
    assert last - first >= 1
    # log p(word | prefix) from the chain rule over the word's tokens, computed independently
    with torch.no_grad():
        logits = model(torch.tensor([enc.input_ids])).logits[0].double().log_softmax(-1)
    chain = sum(logits[t, enc.input_ids[t + 1]].item() for t in range(first, last))
    assert lp[first:last].sum() == pytest.approx(chain, abs=1e-9)


def naive_pll(model, ids: list[int], word_ids: list, mask_id: int, scheme: str) -> np.ndarray:
    out = []
    for t, w in enumerate(word_ids):
        if w is None:
            continue
        masked = list(ids)
        masked[t] = mask_id
        if scheme == "within_word_l2r":  # also mask the rest of the same word, to the right
            for j in range(t + 1, len(ids)):
                if word_ids[j] == w:
                    masked[j] = mask_id
        with torch.no_grad():
            logits = model(torch.tensor([masked])).logits[0, t].double()
        out.append(torch.log_softmax(logits, -1)[ids[t]].item())
    return np.array(out)


@pytest.mark.parametrize("scheme", ["original", "within_word_l2r"])
def test_batched_pll_equals_naive_mask_loop(tiny_bert, scheme):
    tok, model = tiny_bert.tokenizer, tiny_bert.model
    encs = [tokenize_masked(tok, t) for t in TEXTS]
    assert any(len(set(w for w in e.word_ids if w is not None)) < len(e.scored_ids) for e in encs)  # multi-piece words
    for budget in (64, 100_000):
        got = score_masked(model, [e.input_ids for e in encs], [e.word_ids for e in encs], scheme=scheme,
                           mask_id=tok.mask_token_id, pad_id=tok.pad_token_id, max_tokens=budget)
        for e, g in zip(encs, got):
            np.testing.assert_allclose(g, naive_pll(model, e.input_ids, e.word_ids, tok.mask_token_id, scheme),
                                       atol=1e-5, rtol=0)


def test_pll_schemes_differ_only_on_multi_piece_words():
    words = [None, 0, 1, 1, 1, 2, None]
    original = pll_rows([words], "original")
    l2r = pll_rows([words], "within_word_l2r")
    assert [r.masked for r in original] == [(1,), (2,), (3,), (4,), (5,)]
    assert [r.masked for r in l2r] == [(1,), (2, 3, 4), (3, 4), (4,), (5,)]
    with pytest.raises(ValueError, match="unknown PLL scheme"):
        pll_rows([words], "whole_word")


def test_shared_prefix_scoring_equals_naive_loop(tiny_gpt2):
    from biaslab.engines.hf.prefix_scoring import common_prefix_length, score_causal_grouped

    tok, model = tiny_gpt2.tokenizer, tiny_gpt2.model
    bos, _ = bos_token_id(tok)
    contexts = ["The technician told the customer that {} could pay with cash.",
                "Alex's pronouns are xe/xem/xyr. The priest is truly honest and {} went home early.",
                "{} said so.",                                   # slot first: only BOS is shared
                "The nurse said that the teacher asked whether {} had read the book about the shift."]
    texts, groups = [], []
    for g, context in enumerate(contexts):
        for pronoun in ("he", "she", "they", "xe"):
            texts.append(context.format(pronoun))
            groups.append(g)
    texts.append("A lone sentence with no siblings.")
    groups.append("alone")
    seqs = [tokenize_causal(tok, t, bos).input_ids for t in texts]
    assert common_prefix_length(seqs[:4]) >= 8
    for budget in (64, 100_000):
        got = score_causal_grouped(model, seqs, groups, max_tokens=budget, pad_id=bos)
        for ids, lp in zip(seqs, got):
            np.testing.assert_allclose(lp, naive_causal(model, ids), atol=1e-5, rtol=0)


def test_a_float64_model_is_scored_in_float64(tiny_gpt2_dir):
    """A float64 model's head output is not rounded to float32 (`OutputHead.to_float`): plain and shared-prefix
    scores equal the naive float64 loop to 1e-10 (in float32 they differ by ~1e-6), so a benchmark can compare
    biaslab's arithmetic with a peer's without fp32 rounding (bench_crows_lm_eval.py)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from biaslab.engines.hf.prefix_scoring import score_causal_grouped

    model = AutoModelForCausalLM.from_pretrained(tiny_gpt2_dir, dtype=torch.float64).eval()
    tok = AutoTokenizer.from_pretrained(tiny_gpt2_dir)
    bos, _ = bos_token_id(tok)
    seqs = [tokenize_causal(tok, t, bos).input_ids for t in TEXTS]
    plain = score_causal(model, seqs, max_tokens=400, pad_id=bos)
    grouped = score_causal_grouped(model, seqs, [0] * len(seqs), max_tokens=400, pad_id=bos)
    for ids, a, b in zip(seqs, plain, grouped):
        reference = naive_causal(model, ids)
        np.testing.assert_allclose(a, reference, atol=1e-10, rtol=0)
        np.testing.assert_allclose(b, reference, atol=1e-10, rtol=0)
