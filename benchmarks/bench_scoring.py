"""Sequence scoring speed on the same requests: biaslab's engine vs the naive per-candidate loop vs a bare forward.

Usage: python benchmarks/bench_scoring.py [--model smollm2-135m] [--dataset ruff] [--stimuli 100] [--repeats 3]

All three run in this one process on one loaded model (bf16 on CPU by default), over the `prob` protocol's requests
(every candidate pronoun filled into each stimulus):
- biaslab: `score_causal` (length-sorted token-budget batches, head only at scored positions);
- naive: one forward pass per candidate text, log-softmax over the full logits (how the misgendering paper scores);
- bare forward: `model(input_ids, attention_mask)` over exactly biaslab's batches, outputs discarded (the floor
  any scorer built on the model's forward pays).
It also checks that biaslab and the naive loop agree (max abs difference of per-token log-probabilities).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from _common import median_time, peak_rss_mb, write_json
from biaslab import loaders
from biaslab.runners.batching import token_budget_batches
from biaslab.runners.loading import bos_token_id, load_model
from biaslab.runners.requests import score_requests, tokenize_causal
from biaslab.runners.scoring import score_causal


def naive_scores(model, seqs: list[list[int]]) -> list[np.ndarray]:
    out = []
    with torch.inference_mode():
        for ids in seqs:
            logits = model(torch.tensor([ids])).logits[0].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            out.append(logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].double().numpy())
    return out


def bare_forward(model, seqs: list[list[int]], max_tokens: int, pad: int) -> None:
    with torch.inference_mode():
        for batch in token_budget_batches([len(s) for s in seqs], max_tokens):
            longest = max(len(seqs[i]) for i in batch)
            ids = torch.full((len(batch), longest), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, i in enumerate(batch):
                ids[r, : len(seqs[i])] = torch.tensor(seqs[i])
                mask[r, : len(seqs[i])] = 1
            model(input_ids=ids, attention_mask=mask)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--dataset", default="ruff")
    ap.add_argument("--stimuli", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()

    loaded = load_model(args.model, dtype=args.dtype)
    stimuli = loaders.get(args.dataset).load(loaders.default_data_dir(args.data_dir))[: args.stimuli]
    requests = score_requests(stimuli, "prob", "causal")
    bos, _ = bos_token_id(loaded.tokenizer)
    seqs = [tokenize_causal(loaded.tokenizer, r.text, bos).input_ids for r in requests]
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else bos
    n_tokens = sum(len(s) for s in seqs)
    model = loaded.model

    ours = score_causal(model, seqs, max_tokens=args.batch_tokens, pad_id=pad)
    naive = naive_scores(model, seqs)
    max_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, naive))

    t_ours, _ = median_time(lambda: score_causal(model, seqs, max_tokens=args.batch_tokens, pad_id=pad), args.repeats)
    t_bare, _ = median_time(lambda: bare_forward(model, seqs, args.batch_tokens, pad), args.repeats)
    t_naive, _ = median_time(lambda: naive_scores(model, seqs), max(1, args.repeats - 2))

    result = {
        "model": args.model, "dtype": loaded.spec.dtype, "dataset": args.dataset, "requests": len(seqs),
        "tokens": n_tokens, "batch_tokens": args.batch_tokens,
        "seconds": {"biaslab": t_ours, "naive_loop": t_naive, "bare_forward": t_bare},
        "tokens_per_s": {"biaslab": n_tokens / t_ours, "naive_loop": n_tokens / t_naive, "bare_forward": n_tokens / t_bare},
        "speedup_vs_naive": t_naive / t_ours, "efficiency_vs_bare_forward": t_bare / t_ours,
        "max_abs_logprob_diff_vs_naive": max_diff, "peak_rss_mb": peak_rss_mb(),
    }
    print(f"{len(seqs)} requests, {n_tokens:,} tokens, {args.model} {loaded.spec.dtype} on {loaded.device}")
    print(f"{'method':<14}{'seconds':>10}{'tokens/s':>12}")
    for name in ("biaslab", "naive_loop", "bare_forward"):
        print(f"{name:<14}{result['seconds'][name]:>10.2f}{result['tokens_per_s'][name]:>12,.0f}")
    print(f"speed-up vs naive loop: {result['speedup_vs_naive']:.1f}x   "
          f"efficiency vs bare forward: {result['efficiency_vs_bare_forward']:.2f}   "
          f"max |logprob diff| vs naive: {max_diff:.2e}")
    print(f"json: {write_json('scoring', result)}")


if __name__ == "__main__":
    main()
