"""The main job (WinoPron, exact forced choice) on the two real models side by side, in one process and one run
(issue 55): SmolLM2-135M-Instruct (the default model) and Gemma 3 270M (base), each asked with the chat prompt
(forced_choice_v1, the default) and with the base-model prompt (forced_choice_plain_v1).

Usage: python benchmarks/bench_two_models.py [--prompts 32] [--repeats 3] [--dtype fp32|bf16]
       [--models smollm2-135m gemma3-270m] [--prompt-versions forced_choice_v1 forced_choice_plain_v1]

Both models are loaded first (not timed). Then, for each repeat, every (model, prompt) pair in turn collects the
first --prompts WinoPron prompts into a fresh warehouse with `runners.collect.collect` (what `runners collect
--dataset winopron --limit N` runs), timed from the moment the model is ready (the progress bar's start) to the last
chunk written; the pairs are interleaved repeat by repeat, so they see the same machine load. A warm-up collection
of --warmup prompts per pair comes first. Reported per pair: the median seconds, prompts/s, the trie nodes explored
per prompt (the work a prompt costs: a model that spreads its mass over more paths explores more), the valid share
(mass on an option, mean over prompts), and each pair's prompts/s over SmolLM2's with the same prompt.

Writes bench_out/two_models_<dtype>.json with the CPU model, flags, dtype, load and every repeat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from _common import cpu_facts, first_prompts, peak_rss_mb, timed_collection, write_json
from biaslab.engines.hf.loading import load_model
from biaslab.runners.collect import CollectConfig
from biaslab.warehouse import Warehouse


def timed_collect(loaded, model: str, prompt: str, db: Path, prompts: int, data_dir: str | None) -> float:
    """Seconds from the progress bar's start to the last chunk written, of one fresh collection."""
    config = CollectConfig(dataset="winopron", model=model, dtype=loaded.spec.dtype, db=str(db), data_dir=data_dir,
                           prompt=prompt, **first_prompts(prompts))
    seconds, _, result = timed_collection(config, loaded)
    expected = 10 * first_prompts(prompts)["limit"]  # whole templates: the prompts rounded up to tens
    if result.added != expected:
        raise SystemExit(f"{model} / {prompt}: {result.added} prompts added, expected {expected}")
    return seconds


def explored(db: Path) -> tuple[float, float]:
    """(trie nodes per prompt, mean valid share) of the collection in `db`."""
    with Warehouse.open(db, read_only=True) as wh:
        nodes = wh.rows("SELECT count(*) / count(DISTINCT request_id) FROM choice_nodes")[0][0]
        valid = wh.rows("SELECT avg(v) FROM (SELECT sum(p.prob) FILTER (WHERE list_contains(r.options, p.option)) "
                        "AS v FROM choice_probs p JOIN choice_requests r USING (model_key, request_id) "
                        "GROUP BY p.request_id)")[0][0]
    return float(nodes), float(valid or 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--prompt-versions", nargs="+", default=["forced_choice_v1", "forced_choice_plain_v1"])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--dtype", default=None, help="bf16 / fp32 (default: the CPU's default dtype)")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()

    loaded = {m: load_model(m, dtype=args.dtype, device="cpu") for m in args.models}
    pairs = [(m, p) for m in args.models for p in args.prompt_versions]
    load_before = os.getloadavg()
    seconds: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
    work: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m, p in pairs:
            if args.warmup:
                timed_collect(loaded[m], m, p, Path(tmp) / f"warm-{m}-{p}.duckdb", args.warmup, args.data_dir)
        for repeat in range(args.repeats):
            for m, p in pairs:
                db = Path(tmp) / f"{m}-{p}-{repeat}.duckdb"
                seconds[(m, p)].append(timed_collect(loaded[m], m, p, db, args.prompts, args.data_dir))
                work[(m, p)] = explored(db)
    rows = []
    for m, p in pairs:
        median = statistics.median(seconds[(m, p)])
        nodes, valid = work[(m, p)]
        rows.append({"model": m, "prompt": p, "dtype": loaded[m].spec.dtype, "median_seconds": median,
                     "seconds_by_repeat": seconds[(m, p)], "prompts_per_second": args.prompts / median,
                     "trie_nodes_per_prompt": nodes, "valid_share": valid})
    base = {r["prompt"]: r["prompts_per_second"] for r in rows if r["model"] == args.models[0]}
    for r in rows:
        r["speed_over_first_model"] = r["prompts_per_second"] / base[r["prompt"]]
    facts = cpu_facts()
    payload = {"prompts": args.prompts, "repeats": args.repeats, "warmup": args.warmup, **facts,
               "load_average": {"before": load_before, "after": os.getloadavg()}, "peak_rss_mb": peak_rss_mb(),
               "pairs": rows}
    dtype = "-".join(sorted({r["dtype"] for r in rows}))
    path = write_json(f"two_models_{dtype}", payload)
    print(f"WinoPron exact (T=0.5, top_k=40), first {args.prompts} prompts, median of {args.repeats}; CPU "
          f"{facts['cpu_model']} [{' '.join(facts['cpu_flags'])}]; load {load_before[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'model':<14} {'prompt':<24} {'dtype':<5} {'s':>7} {'prompts/s':>9} {'nodes/prompt':>12} {'valid':>6} "
          f"{'vs ' + args.models[0]:>18}")
    for r in rows:
        print(f"{r['model']:<14} {r['prompt']:<24} {r['dtype']:<5} {r['median_seconds']:7.2f} "
              f"{r['prompts_per_second']:9.2f} {r['trie_nodes_per_prompt']:12.1f} {r['valid_share']:6.3f} "
              f"{r['speed_over_first_model']:17.2f}x")
    print(f"json: {path}")


if __name__ == "__main__":
    main()
