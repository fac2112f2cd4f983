"""The main job (exact-mode WinoPron) against its physical limit, in one process on one loaded model.

Usage: python benchmarks/bench_main_job.py [--prompts 96] [--dtype bf16|fp32] [--prompt-batch N] [--repeats 3]
       [--threads N] [--neighbour]

1. Production: `runners.collect.collect` (what `runners collect --dataset winopron --limit N` runs: shared-prefix
   cache, batched trie levels, writes into a fresh warehouse), timed from the moment the model is ready (the
   progress bar's start) to the last chunk written, after a warm-up collection of --warmup prompts into another
   warehouse; the median of --repeats collections, each into a fresh warehouse (the limit below is timed the same
   way: the median of repeats). The first collection of a size is slower (new matrix shapes, fresh memory), as
   the first chunk of a long run is.
2. The limit: plain batched forward passes over exactly the distinct tokens of those prompts, with the same model
   and dtype: the prompts' common prefix once; then one row per prompt holding its own suffix followed by the
   tokens of every trie node the production run explored (read back from the warehouse), over the cached prefix;
   then the output head, log-sum-exp and top-64 at every decision point (one per stored trie node). One forward
   over all rows is slower on a CPU than a few (activations leave the cache; padding to the longest row), so the
   rows, sorted by length, are also run 8, 16 and 32 per forward, and the fastest setting is the limit (median of
   --repeats each; all settings are in the JSON).

With --neighbour, everything is measured twice: quiet, then with a deterministic CPU-bound process pinned to the
last core this process may use (started before and killed after; production and the limit both under it), and
the ratio of the two ratios and each condition's spread of repeats (slowest / fastest) are reported.

Prints both times, the ratio, prompts/s, peak RSS, the CPU model, flags and dtype; the last line is
`main_job_ratio_to_limit=<float>`. JSON goes to bench_out/main_job_<dtype>.json. Only public entry points are used,
so the script also measures an older checkout (`PYTHONPATH=<old tree> python benchmarks/bench_main_job.py`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from _common import cpu_facts, first_prompts, neighbour, peak_rss_mb, timed_collection, write_json
from biaslab.runners.collect import CollectConfig, collect
try:
    from biaslab.engines.hf.kvcache import native_gqa
except ImportError:  # an older checkout: no such switch there
    from contextlib import nullcontext as native_gqa  # noqa: N813
from biaslab.engines.hf.loading import load_model
from biaslab.engines.hf.prefix_scoring import common_prefix_length
from biaslab.warehouse import Warehouse


def explored_tokens(db: Path, model_key: str, tokenizer) -> tuple[list[list[int]], list[list[int]]]:
    """Per stored request: its prompt's token ids, and the tokens of its trie nodes below the root (BFS order)."""
    with Warehouse.open(db, read_only=True) as wh:
        prompts = wh.con.execute("SELECT request_id, prompt_text FROM choice_requests WHERE model_key = ? "
                                 "ORDER BY request_id", [model_key]).fetchall()
        nodes = wh.con.execute("SELECT request_id, token_id FROM choice_nodes WHERE model_key = ? AND depth > 0 "
                               "ORDER BY request_id, depth, node_id", [model_key]).fetchall()
    by_request: dict[str, list[int]] = {rid: [] for rid, _ in prompts}
    for rid, token in nodes:
        by_request[rid].append(int(token))
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for _, text in prompts]
    return ids, [by_request[rid] for rid, _ in prompts]


def group_inputs(model, prefix_cache, prefix_len: int, rows: list[list[int]], decisions: list[list[int]],
                 members: list[int], pad_id: int, device):
    """One forward's inputs for the rows `members` over a cached prefix: (ids padded to the longest row, the
    attention mask with the prefix, position ids, a copy of the prefix's cache per row, and the (row, position)
    indices of the decision positions on `device`). Shared with `gpu/bench_gpu.py`."""
    from transformers import DynamicCache

    width = max(len(rows[i]) for i in members)
    ids = torch.full((len(members), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(members), prefix_len + width), dtype=torch.long)
    mask[:, :prefix_len] = 1
    for k, i in enumerate(members):
        ids[k, : len(rows[i])] = torch.as_tensor(rows[i])
        mask[k, prefix_len: prefix_len + len(rows[i])] = 1
    positions = (mask.cumsum(-1) - 1)[:, prefix_len:]
    cache = DynamicCache(config=model.config)
    for layer in range(len(prefix_cache.layers)):  # the cached prefix per row: a copy, not compute
        keys, values = prefix_cache.layers[layer].keys, prefix_cache.layers[layer].values
        cache.update(keys.expand(len(members), *keys.shape[1:]).contiguous(),
                     values.expand(len(members), *values.shape[1:]).contiguous(), layer)
    di = torch.as_tensor([k for k, i in enumerate(members) for _ in decisions[i]], device=device)
    dj = torch.as_tensor([j for i in members for j in decisions[i]], device=device)
    return ids, mask, positions, cache, di, dj


def decision_forward(base, head, ids, mask, positions, cache, di, dj, device) -> None:
    """One forward of a group (`group_inputs`), then head + log-sum-exp + top-64 at its decision positions: the
    work of one trie level of exact mode without the bookkeeping."""
    out = base(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
               past_key_values=cache, use_cache=True)
    logits = head(out.last_hidden_state[di, dj]).float()
    torch.logsumexp(logits, -1)
    logits.topk(64, dim=-1)


@torch.inference_mode()
def _plain_pass(model, prefix: list[int], rows: list[list[int]], decisions: list[list[int]], pad_id: int,
                group: int) -> float:
    """Seconds for: the prefix once, then the rows (sorted by length, `group` rows per forward, each group padded
    to its longest) over the cached prefix, then head + log-sum-exp + top-64 at the decision positions."""
    from transformers import DynamicCache

    base, head = model.base_model, model.get_output_embeddings()
    device = next(model.parameters()).device
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    elapsed = 0.0
    t0 = time.perf_counter()
    prefix_cache = DynamicCache(config=model.config)
    base(input_ids=torch.as_tensor([prefix], device=device), past_key_values=prefix_cache, use_cache=True)
    elapsed += time.perf_counter() - t0
    for start in range(0, len(order), group):
        members = order[start:start + group]
        ids, mask, positions, cache, di, dj = group_inputs(model, prefix_cache, len(prefix), rows, decisions,
                                                           members, pad_id, device)
        t0 = time.perf_counter()
        decision_forward(base, head, ids, mask, positions, cache, di, dj, device)
        elapsed += time.perf_counter() - t0
    return elapsed


def limit_seconds(model, prompts: list[list[int]], trie_tokens: list[list[int]], pad_id: int,
                  repeats: int) -> tuple[float, dict]:
    """Seconds of the fastest plain pass over exactly the distinct tokens (see the module docstring): median of
    `repeats` for each rows-per-forward setting (all rows in one forward, and 8 / 16 / 32 length-sorted rows) with
    every allowed core and with one thread fewer, the fastest setting kept."""
    cut = common_prefix_length(prompts)
    rows = [p[cut:] + t for p, t in zip(prompts, trie_tokens)]
    # decision points: each prompt's last token, then each trie node's token
    decisions = [[len(p) - cut - 1 + j for j in range(len(t) + 1)] for p, t in zip(prompts, trie_tokens)]
    medians = {}
    threads_before = torch.get_num_threads()
    with native_gqa(next(model.parameters()).device):  # the same attention kernels as production
        allowed = len(os.sched_getaffinity(0))
        for threads in sorted({allowed, max(1, allowed - 1)}, reverse=True):
            torch.set_num_threads(threads)  # the limit is the fastest thread count too (a neighbour: fewer)
            for group in sorted({len(rows), 8, 16, 32}):
                times = sorted(_plain_pass(model, prompts[0][:cut], rows, decisions, pad_id, group)
                               for _ in range(repeats))
                medians[(threads, group)] = times[len(times) // 2]
    torch.set_num_threads(threads_before)
    best = min(medians, key=medians.get)
    width = max(len(r) for r in rows)
    distinct = cut + sum(len(r) for r in rows)
    return medians[best], {
        "shared_prefix_tokens": cut, "suffix_tokens": sum(len(p) - cut for p in prompts),
        "trie_tokens": sum(len(t) for t in trie_tokens), "distinct_tokens": distinct,
        "decision_points": sum(len(d) for d in decisions), "limit_rows_per_forward": best[1],
        "limit_threads": best[0],
        "limit_seconds_by_threads_and_rows_per_forward": {f"{t} threads, {g} rows": v for (t, g), v in medians.items()},
        "padded_share_one_forward": 1 - (distinct - cut) / (len(rows) * width)}


def measure(loaded, args, tmp: Path, label: str) -> dict:
    """Production (median of repeats, after a warm-up) and the limit under the same conditions, as a dict."""
    tok = loaded.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    extra = {} if args.prompt_batch is None else {"prompt_batch": args.prompt_batch}
    if args.threads is not None:
        extra["threads"] = args.threads

    def config(name: str, limit: int) -> CollectConfig:
        return CollectConfig(dataset="winopron", model=args.model, dtype=loaded.spec.dtype,
                             db=str(tmp / f"{label}-{name}.duckdb"), data_dir=args.data_dir,
                             **first_prompts(limit), **extra)

    if args.warmup:  # the limit is timed warm (median of repeats): so is production
        collect(config("warmup", args.warmup), loaded=loaded)
    runs: list[tuple[float, float]] = []  # (production, whole collect call) per repeat
    for repeat in range(args.repeats):  # a fresh warehouse each time, so every repeat computes everything
        production, whole, result = timed_collection(config(f"run{repeat}", args.prompts), loaded)
        runs.append((production, whole))
        db = tmp / f"{label}-run{repeat}.duckdb"
    production, whole = sorted(runs)[len(runs) // 2]
    prompts, trie = explored_tokens(db, loaded.model_key, tok)
    with Warehouse.open(db, read_only=True) as wh:
        engine = wh.con.execute("SELECT json_extract_string(params, '$.engine'), "
                                "json_extract_string(params, '$.prompt_batch'), "
                                "json_extract_string(params, '$.threads') FROM runs "
                                "WHERE run_id = ?", [result.run_id]).fetchone()
    limit, facts = limit_seconds(loaded.model, prompts, trie, pad, args.repeats)
    times = [p for p, _ in runs]
    return {"production_seconds": production, "production_seconds_by_repeat": times,
            "repeat_spread": max(times) / min(times), "collect_call_seconds": whole, "limit_seconds": limit,
            "ratio_to_limit": production / limit, "prompts": len(prompts),
            "prompts_per_second": len(prompts) / production, "engine": engine[0], "prompt_batch": engine[1],
            "run_threads": engine[2], "torch_threads_after": torch.get_num_threads(), **facts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default=None, help="bf16 / fp32 (default: the CPU's default dtype)")
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--prompt-batch", type=int, default=None, help="default: the production default")
    ap.add_argument("--threads", type=int, default=None, help="default: the production default")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of production and of the limit pass (median)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--warmup", type=int, default=8,
                    help="prompts collected into a throwaway warehouse before production is timed (0: none)")
    ap.add_argument("--neighbour", action="store_true",
                    help="measure twice: quiet, then with a CPU-bound process pinned to the last allowed core "
                         "(production and limit both under it); report both ratios and the repeats' spread")
    args = ap.parse_args()

    loaded = load_model(args.model, dtype=args.dtype)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label in (["quiet", "neighbour"] if args.neighbour else ["quiet"]):
            with neighbour(label == "neighbour") as core:
                results[label] = {**measure(loaded, args, Path(tmp), label), "neighbour_core": core,
                                  "load_average": os.getloadavg()}
    quiet = results["quiet"]
    payload = {"model": args.model, "dtype": loaded.spec.dtype, "warmup": args.warmup, **cpu_facts(),
               **quiet, "peak_rss_mb": peak_rss_mb(), "conditions": results}
    if args.neighbour:
        payload["neighbour_ratio_over_quiet"] = results["neighbour"]["ratio_to_limit"] / quiet["ratio_to_limit"]
    path = write_json(f"main_job_{loaded.spec.dtype}" + ("_neighbour" if args.neighbour else ""), payload)
    print(f"{quiet['prompts']} WinoPron prompts (exact, T=0.5, top_k=40), {args.model} {loaded.spec.dtype}, "
          f"CPU {payload['cpu_model']} [{' '.join(payload['cpu_flags'])}], engine {quiet['engine']}, "
          f"prompt batch {quiet['prompt_batch']}")
    print(f"distinct tokens {quiet['distinct_tokens']:,} = shared prefix {quiet['shared_prefix_tokens']} + suffixes "
          f"{quiet['suffix_tokens']:,} + trie {quiet['trie_tokens']:,}; {quiet['decision_points']:,} decision points")
    for label, r in results.items():
        print(f"{label}: production {r['production_seconds']:.2f} s (repeats "
              + ", ".join(f"{p:.2f}" for p in r["production_seconds_by_repeat"])
              + f"; spread {r['repeat_spread']:.2f}x; threads {r['run_threads']}), limit {r['limit_seconds']:.2f} s "
              f"({r['limit_rows_per_forward']} rows per forward, {r['limit_threads']} threads), "
              f"ratio {r['ratio_to_limit']:.2f}, "
              f"{r['prompts_per_second']:.2f} prompts/s, load {r['load_average'][0]:.1f}")
    if args.neighbour:
        print(f"neighbour ratio / quiet ratio = {payload['neighbour_ratio_over_quiet']:.2f}")
    print(f"json: {path}")
    print(f"main_job_ratio_to_limit={quiet['ratio_to_limit']:.3f}")


if __name__ == "__main__":
    main()
