"""A whole dataset collected on each model, timed (issue 55: a study the README shows at a limit has its whole run
timed here): `runners collect --dataset D [--protocol P] --model M` for every model in turn, each into a fresh
warehouse, as a user runs it.

Usage: python benchmarks/bench_whole_run.py --dataset misgendered [--protocol prob] [--models smollm2-135m gemma3-270m]
       [--dtype bf16|fp32] [--limit N]

Each model is loaded first (not timed: the conversion cache and the weights' load are a one-off); the time is from
the progress bar's start (the pending work known) to the last chunk written. Reported per model: requests, what was
added, seconds and requests/s, and each model's rate over the first model's. One run, no repeats: a whole dataset
is minutes per model, and the two models run one after the other on the same machine.

Writes bench_out/whole_<dataset>_<protocol>.json with the CPU model, flags, dtype and the load before and after.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from _common import cpu_facts, peak_rss_mb, timed_collection, write_json
from biaslab.engines.hf.loading import load_model
from biaslab.runners.collect import CollectConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--protocol", default="prob")
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--limit", type=int, default=None, help="a check of the script (default: the whole dataset)")
    parser.add_argument("--data-dir", default=os.environ.get("BIASLAB_DATA"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            loaded = load_model(model, dtype=args.dtype, device="cpu")
            config = CollectConfig(dataset=args.dataset, protocol=args.protocol, model=model,
                                   dtype=loaded.spec.dtype, db=str(Path(folder) / f"{model}.duckdb"),
                                   data_dir=args.data_dir, limit=args.limit)
            seconds, _, result = timed_collection(config, loaded)
            rows.append({"model": model, "requests": result.requests, "added": result.added,
                         "added_unit": result.added_unit, "seconds": seconds,
                         "requests_per_s": result.requests / seconds})
            print(f"{model:16s} {result.requests:7d} requests  {seconds:8.1f} s  {result.requests / seconds:7.1f}/s  "
                  f"({result.added} {result.added_unit} added)", flush=True)
            del loaded
    for row in rows:
        row["rate_over_first"] = row["requests_per_s"] / rows[0]["requests_per_s"]
    path = write_json(f"whole_{args.dataset}_{args.protocol}",
                      {"dataset": args.dataset, "protocol": args.protocol, "dtype": args.dtype, "limit": args.limit,
                       "cpu": cpu_facts(), "load_before": load_before, "load_after": os.getloadavg(),
                       "peak_rss_mb": peak_rss_mb(), "runs": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
