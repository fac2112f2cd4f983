"""`explore`: the trie walk (`biaslab.runners.trie.walk`) over a transformers model's cache through the Hugging Face
engine's expander (`engines.hf.tree.HFExpander`), for the tests that check exact mode on the model itself. The
runners never name an engine; collections reach the same expander through `Backend.expander`."""

from __future__ import annotations

from collections.abc import Sequence

from biaslab.runners.answers import AnswerParser
from biaslab.runners.trie import DEFAULT_MIN_MASS, Trie, walk


def explore(model, tokenizer, prompts: Sequence[Sequence[int]], parsers: Sequence[AnswerParser], *,
            max_new_tokens: int, k_store: int, stop_ids: set[int], pad_id: int, temperature: float, top_k: int,
            min_mass: float = DEFAULT_MIN_MASS, state=None,
            tree: bool | None = None) -> list[Trie]:
    """`walk` over a transformers model's cache.

    `state`: the prompts already encoded (e.g. by `kvcache.SharedPrefixes.encode`, continuing a cached shared
    prefix); by default each prompt is encoded from its first token (`kvcache.encode_prompts`). The state's cache
    is consumed (grown in place).
    `tree`: levels as tree attention over the prompts' cache (`TreeLevels`, default where the model's attention
    takes a 4-D mask: sdpa, eager) or by cache copies (`CopyLevels`); both compute the same trie up to the dtype's
    rounding.
    """
    import torch

    from biaslab.engines.hf.kvcache import encode_prompts
    from biaslab.engines.hf.tree import HFExpander

    with torch.inference_mode():
        if state is None:
            state = encode_prompts(model, prompts, pad_id)
        return walk(HFExpander(model, state, k_store, tree), tokenizer, parsers, max_new_tokens=max_new_tokens,
                    stop_ids=stop_ids, temperature=temperature, top_k=top_k, min_mass=min_mass)


def brute_force(model, tok, prompt, parser, temperature, top_k, max_new, stops) -> dict[str, float]:
    """Enumerate every token path within the top-k, with Hugging Face's own warpers and a full forward per path
    (the independent reference of exact mode: no cache, no trie, no pruning)."""
    import torch
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    from biaslab.runners.answers import decode
    from biaslab.runners.trie import INVALID

    warpers = [TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k)]
    totals = {o: 0.0 for o in parser.options}

    def walk(path: tuple[int, ...], mass: float) -> None:
        with torch.no_grad():
            scores = model(torch.tensor([prompt + list(path)], device=model.device)).logits[:, -1].float()
        for w in warpers:
            scores = w(None, scores)
        probs = scores.softmax(-1)[0].double()
        for token in torch.nonzero(probs > 0).flatten().tolist():
            p = mass * probs[token].item()
            stop = token in stops
            text = decode(tok, path if stop else (*path, token))
            status, option = parser.status(text, ended=stop or len(path) + 1 == max_new)
            if status == "valid":
                totals[option] += p
            elif status == "live":
                walk((*path, token), p)

    walk((), 1.0)
    totals[INVALID] = 1.0 - sum(totals.values())
    return totals


def prompts_inside_99_percent(requests, exact: dict, drawn: dict, samples: int) -> int:
    """How many prompts' seeded samples agree with their exact probabilities: every option's count and the invalid
    answers' lie inside the 99% binomial interval around the exact probability (an unresolved path's mass counts as
    invalid: a sample always ends). `requests`: (request id, prompt text, options); `exact`: request id -> outcome ->
    probability; `drawn`: request id -> outcome -> count, `samples` per prompt (checked)."""
    from scipy.stats import binom

    from biaslab.runners.trie import INVALID, UNRESOLVED

    agree = 0
    for rid, _, options in requests:
        counts, outcomes = drawn[rid], exact[rid]
        assert sum(counts.values()) == samples
        inside = True
        for outcome in (*options, INVALID):
            p = min(max(outcomes[outcome] + (outcomes[UNRESOLVED] if outcome == INVALID else 0.0), 0.0), 1.0)
            inside &= binom.ppf(0.005, samples, p) <= counts[outcome] <= binom.ppf(0.995, samples, p)
        agree += inside
    return agree
