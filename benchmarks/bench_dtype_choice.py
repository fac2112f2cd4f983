"""The default dtype's decision, quiet and beside CPU-bound neighbours (issue 46): does it depend on the load?

Usage: python benchmarks/bench_dtype_choice.py [--decisions 10] [--neighbours 3]

Makes --decisions decisions quiet, then --decisions with --neighbours CPU-bound processes running (the first on
the last allowed core, the others spread over the allowed cores: on 2 cores, 3 neighbours give a load of about
4, as the issue measured), each decision measured afresh (no cache) by biaslab's probe
(`dtype_choice.block_times_ms`: one thread, this thread's CPU time, interleaved rounds, fastest round) and, side by
side, by the probe it replaced (every allowed thread, wall clock, fp32 then bf16, fastest run) as the baseline.
Prints per condition the decisions, the fp32 / bf16 ratios (min, median, max) and whether all 2 x --decisions
decisions agree; JSON to bench_out/dtype_choice.json. The last line is `dtype_choice_agree=<0|1>`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

import torch

from _common import NEIGHBOUR, cpu_facts, write_json
from biaslab.engines import dtype_choice
from biaslab.engines.threads import allowed_cpus


@contextmanager
def neighbours(count: int):
    """`count` CPU-bound processes, pinned round-robin from the last allowed core down."""
    cores = sorted(os.sched_getaffinity(0), reverse=True)
    procs = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(cores[i % len(cores)])]) for i in range(count)]
    time.sleep(0.5 if count else 0)
    try:
        yield [cores[i % len(cores)] for i in range(count)]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def wall_clock_probe(shape) -> tuple[float, float]:
    """The replaced probe: all allowed threads, wall clock, fp32 then bf16 (0.2 s each), fastest run."""
    torch.set_num_threads(allowed_cpus())
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        block = dtype_choice._block(dtype, shape)
        with torch.inference_mode():
            block(), block()
            best, start = float("inf"), time.perf_counter()
            while time.perf_counter() - start < 0.2:
                t0 = time.perf_counter()
                block()
                best = min(best, time.perf_counter() - t0)
        out.append(best * 1e3)
    return out[0], out[1]


def decide(fp32_ms: float, bf16_ms: float) -> str:
    return "bf16" if bf16_ms * dtype_choice.MARGIN <= fp32_ms else "fp32"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=10)
    ap.add_argument("--neighbours", type=int, default=3)
    args = ap.parse_args()
    shape = dtype_choice.DEFAULT_SHAPE
    results: dict = {}
    for label, count in (("quiet", 0), ("neighbours", args.neighbours)):
        with neighbours(count) as cores:
            rows = []
            for _ in range(args.decisions):
                t0 = time.perf_counter()
                probe = dtype_choice.block_times_ms(shape)
                took = time.perf_counter() - t0
                rows.append({"probe": [round(v, 3) for v in probe], "probe_s": round(took, 3),
                             "baseline": [round(v, 3) for v in wall_clock_probe(shape)],
                             "load_average": os.getloadavg()[0]})
        for r in rows:
            r["decision"], r["baseline_decision"] = decide(*r["probe"]), decide(*r["baseline"])
        results[label] = {"neighbour_cores": cores, "rows": rows}
        for name, key in (("probe", "probe"), ("baseline", "baseline")):
            ratios = [r[key][0] / r[key][1] for r in rows]
            decisions = [r["decision" if key == "probe" else "baseline_decision"] for r in rows]
            print(f"{label:10s} {name:8s} decisions {dict(sorted({d: decisions.count(d) for d in decisions}.items()))}"
                  f"  fp32/bf16 min {min(ratios):.2f} median {statistics.median(ratios):.2f} max {max(ratios):.2f}")
    probe = [r["decision"] for v in results.values() for r in v["rows"]]
    base = [r["baseline_decision"] for v in results.values() for r in v["rows"]]
    agree, base_agree = len(set(probe)) == 1, len(set(base)) == 1
    print(f"biaslab's probe: {len(probe)} decisions, {'all ' + probe[0] if agree else 'they disagree'}; "
          f"the replaced wall-clock probe: {'all ' + base[0] if base_agree else 'they disagree'}")
    facts = cpu_facts()
    took = statistics.median(r["probe_s"] for v in results.values() for r in v["rows"])
    print(f"CPU {facts['cpu_model']} flags {facts['cpu_flags']} allowed {facts['allowed_cpus']} torch "
          f"{torch.__version__}; one decision takes {took:.2f} s (median)")
    path = write_json("dtype_choice", {"cpu": facts, "shape": list(shape), "margin": dtype_choice.MARGIN,
                                       "decisions": args.decisions, "neighbours": args.neighbours,
                                       "results": results, "agree": agree, "baseline_agree": base_agree})
    print(f"wrote {path}")
    print(f"dtype_choice_agree={int(agree)}")


if __name__ == "__main__":
    main()
