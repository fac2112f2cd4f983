"""Seeded, batched sampling from cached prompts, with every sampling parameter set explicitly (docs/design.md
section 5).

Each step: logits z (float32) -> z / T -> keep z >= K-th largest (top-k, ties kept) -> keep the smallest
descending-probability prefix whose mass reaches top_p (at least one token) -> softmax -> draw. The draw of sample i
uses its own generator seeded with `seeds[i]` (inverse-CDF with one uniform per step), so a sample depends only on its
seed and its prompt, not on the other rows of the batch. No repetition penalty or other processor is applied.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..base import Sample, SamplingSettings
from .kvcache import PromptState, extend
from .scoring import _base_and_head


def warp(logits: torch.Tensor, params: SamplingSettings) -> torch.Tensor:
    """Sampling probabilities [rows, vocab] after temperature, top-k and top-p."""
    z = logits / params.temperature
    if params.top_k < z.shape[-1]:  # a top_k of the whole vocabulary keeps every token: no sort of it per step
        kth = torch.topk(z, params.top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_z, order = torch.sort(z, descending=True, dim=-1)
        cumulative = sorted_z.softmax(-1).cumsum(-1)
        remove_sorted = cumulative - sorted_z.softmax(-1) >= params.top_p  # mass before this token already enough
        remove_sorted[:, 0] = False
        remove = torch.zeros_like(remove_sorted).scatter(1, order, remove_sorted)
        z = z.masked_fill(remove, float("-inf"))
    return z.softmax(-1)


@torch.inference_mode()
def sample_from_state(model, state: PromptState, seeds: Sequence[int], params: SamplingSettings,
                      stop_ids: set[int], pad_id: int) -> list[Sample]:
    """Draw one sample per row of `state` (rows are prompts already repeated as needed).

    `params.min_new_tokens`: for the first that many steps the stop tokens get probability 0 (Hugging Face's
    MinNewTokensLengthLogitsProcessor); the stored log-probabilities stay the model's own.
    """
    params.validate()
    _, head = _base_and_head(model)
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    rows = len(seeds)
    out = [Sample([], [], "length") for _ in range(rows)]
    active = [True] * rows
    hidden = state.last_hidden
    stop = torch.tensor(sorted(stop_ids), dtype=torch.long)
    for step in range(params.max_new_tokens):
        logits = head.to_float(head.raw(hidden)).cpu()
        if step < params.min_new_tokens and len(stop):
            probs = warp(logits.index_fill(1, stop, float("-inf")), params)
        else:
            probs = warp(logits, params)
        uniforms = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])
        cdf = probs.double().cumsum(-1)
        cdf[:, -1] = 1.0
        tokens = torch.searchsorted(cdf, uniforms[:, None]).clamp(max=probs.shape[-1] - 1)[:, 0]
        # never pick a zero-probability token through rounding at a CDF plateau
        zero = probs.gather(1, tokens[:, None])[:, 0] == 0
        if zero.any():
            tokens[zero] = probs[zero].argmax(-1)
        model_logprobs = torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0]
        is_stop = torch.isin(tokens, stop)
        for r in range(rows):
            if not active[r]:
                continue
            if is_stop[r]:
                out[r].finish_reason = "stop"
                active[r] = False
            else:
                out[r].token_ids.append(int(tokens[r]))
                out[r].logprobs.append(float(model_logprobs[r]))
        if not any(active):
            break
        feed = torch.where(torch.tensor(active), tokens, torch.full_like(tokens, pad_id))
        state, new_hidden = extend(model, state, feed[:, None])
        hidden = new_hidden[:, -1]
    return out


@torch.inference_mode()
def sample_shared_prefixes(model, state: PromptState, row: int, seeds: Sequence[int], params: SamplingSettings,
                           stop_ids: set[int]) -> list[Sample]:
    """Many samples of ONE prompt (row `row` of `state`), running the model once per distinct generated prefix.

    Samples of a short answer share prefixes heavily (thousands of samples, a few dozen distinct prefixes), and
    the next-token distribution depends only on the prefix, so each distinct prefix is computed once and every
    sample draws from it with its own generator. Draws are the same as `sample_from_state`'s. Each level re-runs
    the prefix tokens from the cached prompt, which is cheap for short generations (forced choice).
    """
    params.validate()
    _, head = _base_and_head(model)
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    out = [Sample([], [], "length") for _ in seeds]
    paths: list[tuple[int, ...]] = [()] * len(seeds)
    active = list(range(len(seeds)))
    hidden_of: dict[tuple[int, ...], torch.Tensor] = {(): state.last_hidden[row]}
    for _step in range(params.max_new_tokens):
        new = sorted({paths[r] for r in active} - hidden_of.keys())
        if new:
            branch = state.select([row] * len(new))
            _, hidden = extend(model, branch, torch.tensor([list(p) for p in new], dtype=torch.long))
            hidden_of.update(zip(new, hidden[:, -1]))
        unique = sorted({paths[r] for r in active})
        logits = head.to_float(head.raw(torch.stack([hidden_of[p] for p in unique]))).cpu()
        probs = warp(logits, params).double()
        cdf = probs.cumsum(-1)
        cdf[:, -1] = 1.0
        logprobs = torch.log_softmax(logits, -1)
        index = {p: i for i, p in enumerate(unique)}
        still = []
        for r in active:
            i = index[paths[r]]
            u = torch.rand((), generator=generators[r], dtype=torch.float64)
            token = int(torch.searchsorted(cdf[i], u.reshape(1)).clamp(max=probs.shape[-1] - 1))
            if probs[i, token] == 0:
                token = int(probs[i].argmax())
            if token in stop_ids:
                out[r].finish_reason = "stop"
                continue
            out[r].token_ids.append(token)
            out[r].logprobs.append(float(logprobs[i, token]))
            paths[r] = (*paths[r], token)
            still.append(r)
        active = still
        if not active:
            break
    return out
