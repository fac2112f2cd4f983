"""Kill a real `runners collect` at 30% and resume it: does it equal an uninterrupted run? (issue 46)

Usage: python benchmarks/bench_resume_equality.py [--prompts 480] [--dtype bf16 fp32] [--threads 2]
       [--model smollm2-135m] [--neighbour]

For each dtype: one uninterrupted `runners collect --dataset winopron --limit N` (exact mode) into a fresh
warehouse; then the same command into another warehouse, sent SIGINT once 30% of its prompts are stored (read from
the warehouse between its chunks), and run again to resume. Both runs pass the same --threads unless --threads 0
(then each run measures its own count and the resume takes the count its first run recorded). With --neighbour a
CPU-bound process runs beside the killed run and its resumption (not beside the reference): the evidence must not
depend on it. Printed per dtype: prompts kept at the kill, the resumed run's added prompts, how many of the
probabilities differ and the largest |difference| in a probability; the last line is
`resume_max_abs_diff=<float>` (the largest over the dtypes). JSON to bench_out/resume_equality.json.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import cpu_facts, neighbour, write_json
from biaslab.warehouse import Warehouse


def command(db: Path, args, dtype: str) -> list[str]:
    cmd = [sys.executable, "-m", "biaslab.cli.runners_entry", "collect", "--dataset", "winopron", "--model",
           args.model, "--dtype", dtype, "--limit", str(-(-args.prompts // 10)), "--limit-order", "file",
           "--db", str(db)]  # --limit counts templates of 10 prompts
    return cmd + (["--threads", str(args.threads)] if args.threads else [])


def probs(db: Path) -> dict:
    with Warehouse.open(db, read_only=True, wait=60) as wh:
        return {(r, o): p for r, o, p in wh.rows("SELECT request_id, option, prob FROM choice_probs")}


def stored(db: Path) -> int:
    try:
        with Warehouse.open(db, read_only=True, wait=0.5) as wh:
            return wh.count("choice_requests")
    except Exception:  # noqa: BLE001 - not created yet, or the writer is appending
        return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=480)
    ap.add_argument("--dtype", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--threads", type=int, default=2, help="0: each run measures the free cores")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--neighbour", action="store_true")
    args = ap.parse_args()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtype:
            reference, db = Path(tmp) / f"ref-{dtype}.duckdb", Path(tmp) / f"killed-{dtype}.duckdb"
            t0 = time.perf_counter()
            subprocess.run(command(reference, args, dtype), check=True, capture_output=True)
            took = time.perf_counter() - t0
            with neighbour(args.neighbour):
                proc = subprocess.Popen(command(db, args, dtype), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                while proc.poll() is None and stored(db) < 0.3 * args.prompts:
                    time.sleep(0.2)
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=600)
                kept = stored(db)
                resumed = subprocess.run(command(db, args, dtype), check=True, capture_output=True, text=True)
            a, b = probs(reference), probs(db)
            assert a.keys() == b.keys(), "the resumed warehouse holds other requests"
            diffs = [abs(a[k] - b[k]) for k in a]
            row = {"seconds_reference": round(took, 1), "kept_at_kill": kept, "exit_code_at_kill": proc.returncode,
                   "kill_line": err.decode().strip().splitlines()[-1:] if err else [],
                   "resumed_stdout": resumed.stdout.strip().splitlines(),
                   "probabilities": len(diffs), "differ": sum(d > 0 for d in diffs), "max_abs_diff": max(diffs)}
            out[dtype] = row
            print(f"{dtype}: reference {took:.1f} s; killed at {kept}/{args.prompts} prompts (exit "
                  f"{proc.returncode}); {row['differ']} of {len(diffs)} probabilities differ, max |diff| "
                  f"{row['max_abs_diff']:.3g}")
    facts = cpu_facts()
    print(f"CPU {facts['cpu_model']} flags {facts['cpu_flags']}; threads {args.threads or 'measured'}; "
          f"neighbour {args.neighbour}")
    path = write_json("resume_equality", {"cpu": facts, "args": vars(args), "results": out})
    print(f"wrote {path}")
    print(f"resume_max_abs_diff={max(r['max_abs_diff'] for r in out.values())}")


if __name__ == "__main__":
    main()
