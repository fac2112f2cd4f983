"""Sequence scoring speed on the same requests: biaslab's engine vs the naive per-candidate loop vs a bare forward.

Usage: python benchmarks/bench_scoring.py [--model smollm2-135m] [--dataset ruff] [--stimuli 100] [--repeats 3]
       [--neighbour]

All run in this one process on one loaded model (bf16 on CPU by default), over the `prob` protocol's requests
(every candidate pronoun filled into each stimulus):
- biaslab: `score_causal_grouped`, the production path (candidates of one stimulus share their common prefix's
  forward pass; length-sorted token-budget batches; output head only at scored positions);
- biaslab without prefix sharing: `score_causal` on the full sequences;
- naive: one forward pass per candidate text, log-softmax over the full logits (how the misgendering paper scores);
- bare forward: `model(input_ids, attention_mask)` over exactly biaslab's batches, outputs discarded (the floor
  any scorer built on the model's forward pays).
It also checks that biaslab and the naive loop agree: max abs difference of per-token log-probabilities in the run's
dtype, and in fp32 on a copy of the model (bf16 rounding alone moves single logits by ~0.1).

With --neighbour (issue 35), only the production path and the bare forward are timed, twice: quiet, then with a
deterministic CPU-bound process pinned to the last core this process may use. Production runs as `runners collect`
runs it (the free cores measured once at the start and fixed, `engines.threads.FreeCores`), and also with every allowed
core fixed (what it did before); the bare forward is the faster of every allowed core and one fewer, under the
same conditions. Printed per condition: seconds (median of --repeats), the spread of repeats (slowest / fastest)
and production / bare forward; the last line is `scoring_neighbour_ratio_over_quiet=<float>`.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch

from _common import cpu_facts, median_time, neighbour, peak_rss_mb, prob_sequences, write_json
from biaslab.engines.hf.batching import token_budget_batches
from biaslab.engines.hf.loading import load_model
from biaslab.engines.models import bos_token_id
from biaslab.engines.hf.prefix_scoring import score_causal_grouped
from biaslab.engines.hf.scoring import score_causal
from biaslab.engines.threads import FreeCores


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


def _timed(fn, repeats: int) -> dict:
    median, times = median_time(fn, repeats)
    return {"seconds": median, "by_repeat": times, "spread": max(times) / min(times)}


def neighbour_measure(model, seqs, groups, args, pad: int) -> dict:
    """Production (the free cores measured once, and every allowed core fixed) and the bare forward (the faster
    of every allowed core and one fewer), quiet and with the neighbour (the module docstring)."""
    allowed = len(os.sched_getaffinity(0))
    before = torch.get_num_threads()
    results = {}
    try:
        for label in ("quiet", "neighbour"):
            with neighbour(label == "neighbour") as core:
                torch.set_num_threads(allowed)

                def following():
                    torch.set_num_threads(FreeCores().threads())  # measured once per run, as `runners collect` does
                    return score_causal_grouped(model, seqs, groups, max_tokens=args.batch_tokens, pad_id=pad)

                following()  # warm-up
                row = {"production": _timed(following, args.repeats)}
                torch.set_num_threads(allowed)
                row["production_fixed_threads"] = _timed(lambda: score_causal_grouped(
                    model, seqs, groups, max_tokens=args.batch_tokens, pad_id=pad), args.repeats)
                bare = {}
                for threads in sorted({allowed, max(1, allowed - 1)}, reverse=True):
                    torch.set_num_threads(threads)
                    bare[threads] = _timed(lambda: bare_forward(model, seqs, args.batch_tokens, pad), args.repeats)
                best = min(bare, key=lambda t: bare[t]["seconds"])
                row.update(bare_forward=bare[best], bare_forward_threads=best, neighbour_core=core,
                           load_average=os.getloadavg())
                row["ratio"] = row["production"]["seconds"] / bare[best]["seconds"]
                row["ratio_fixed_threads"] = row["production_fixed_threads"]["seconds"] / bare[best]["seconds"]
                results[label] = row
    finally:
        torch.set_num_threads(before)
    results["neighbour_ratio_over_quiet"] = results["neighbour"]["ratio"] / results["quiet"]["ratio"]
    return results


def print_neighbour(results: dict) -> None:
    for label in ("quiet", "neighbour"):
        r = results[label]
        print(f"{label}: production {r['production']['seconds']:.2f} s (spread {r['production']['spread']:.2f}x), "
              f"fixed threads {r['production_fixed_threads']['seconds']:.2f} s "
              f"(spread {r['production_fixed_threads']['spread']:.2f}x), bare forward "
              f"{r['bare_forward']['seconds']:.2f} s ({r['bare_forward_threads']} threads); production / bare "
              f"{r['ratio']:.2f} (fixed threads {r['ratio_fixed_threads']:.2f}); load {r['load_average'][0]:.1f}")
    print(f"scoring_neighbour_ratio_over_quiet={results['neighbour_ratio_over_quiet']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--dataset", default="ruff")
    ap.add_argument("--stimuli", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--neighbour", action="store_true",
                    help="time production and the bare forward quiet and beside a CPU-bound process (docstring)")
    args = ap.parse_args()

    loaded = load_model(args.model, dtype=args.dtype)
    _, seqs, groups = prob_sequences(loaded.tokenizer, args.dataset, args.stimuli, args.data_dir)
    bos, _ = bos_token_id(loaded.tokenizer)
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else bos
    n_tokens = sum(len(s) for s in seqs)
    model = loaded.model

    if args.neighbour:
        results = neighbour_measure(model, seqs, groups, args, pad)
        path = write_json(f"scoring_{loaded.spec.dtype}_neighbour", {
            "model": args.model, "dtype": loaded.spec.dtype, "dataset": args.dataset, "requests": len(seqs),
            "tokens": n_tokens, **cpu_facts(), **results})
        print(f"{len(seqs)} requests, {n_tokens:,} tokens, {args.model} {loaded.spec.dtype}, CPU "
              f"{cpu_facts()['cpu_model']}; json: {path}")
        print_neighbour(results)
        return
    shared_tokens = 0
    for g in dict.fromkeys(groups):
        members = [s for s, gg in zip(seqs, groups) if gg == g]
        cut = min(len(m) for m in members)
        while cut and any(m[:cut] != members[0][:cut] for m in members):
            cut -= 1
        shared_tokens += cut * (len(members) - 1)

    def ours():
        return score_causal_grouped(model, seqs, groups, max_tokens=args.batch_tokens, pad_id=pad)

    got = ours()
    naive = naive_scores(model, seqs)
    max_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(got, naive))
    t_ours, _ = median_time(ours, args.repeats)
    t_plain, _ = median_time(lambda: score_causal(model, seqs, max_tokens=args.batch_tokens, pad_id=pad), args.repeats)
    t_bare, _ = median_time(lambda: bare_forward(model, seqs, args.batch_tokens, pad), args.repeats)
    t_naive, _ = median_time(lambda: naive_scores(model, seqs), max(1, args.repeats - 2))

    fp32 = load_model(args.model, dtype="fp32").model  # a separate fp32 copy: agreement without bf16 rounding
    sub = list(range(min(40, len(seqs))))
    got32 = score_causal_grouped(fp32, [seqs[i] for i in sub], [groups[i] for i in sub], pad_id=pad)
    max_diff_fp32 = max(float(np.max(np.abs(a - b)))
                        for a, b in zip(got32, naive_scores(fp32, [seqs[i] for i in sub])))

    names = ("biaslab", "biaslab_no_sharing", "naive_loop", "bare_forward")
    seconds = dict(zip(names, (t_ours, t_plain, t_naive, t_bare)))
    result = {
        "model": args.model, "dtype": loaded.spec.dtype, "dataset": args.dataset, "requests": len(seqs),
        "tokens": n_tokens, "tokens_shared_by_prefix_sharing": shared_tokens, "batch_tokens": args.batch_tokens,
        "seconds": seconds, "tokens_per_s": {k: n_tokens / v for k, v in seconds.items()},
        "speedup_vs_naive": t_naive / t_ours, "efficiency_vs_bare_forward": t_bare / t_ours,
        "efficiency_no_sharing_vs_bare_forward": t_bare / t_plain,
        "max_abs_logprob_diff_vs_naive": max_diff, "max_abs_logprob_diff_vs_naive_fp32": max_diff_fp32,
        "peak_rss_mb": peak_rss_mb(),
    }
    print(f"{len(seqs)} requests, {n_tokens:,} tokens ({shared_tokens:,} of them in shared prefixes), "
          f"{args.model} {loaded.spec.dtype} on {loaded.device}")
    print(f"{'method':<20}{'seconds':>10}{'tokens/s':>12}")
    for name in names:
        print(f"{name:<20}{seconds[name]:>10.2f}{n_tokens / seconds[name]:>12,.0f}")
    print(f"speed-up vs naive loop: {result['speedup_vs_naive']:.1f}x   "
          f"throughput vs bare forward: {result['efficiency_vs_bare_forward']:.2f} "
          f"(without sharing {result['efficiency_no_sharing_vs_bare_forward']:.2f})")
    print(f"max |logprob diff| vs naive: {max_diff:.2e} ({loaded.spec.dtype}), {max_diff_fp32:.2e} (fp32)")
    print(f"json: {write_json('scoring', result)}")


if __name__ == "__main__":
    main()
