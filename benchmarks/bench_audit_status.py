"""`biaslab audit status PLAN` and `biaslab audit run PLAN --dry-run` against `biaslab collections` on the same
warehouse, side by side (issue 72, item 1): the goal is status and dry run within 2x `collections` for a plan whose
units are stored, growing with the units, not with a model preparation per unit.

Usage: python benchmarks/bench_audit_status.py [--models smollm2-135m,smollm2-135m@bf16] [--repeats 3]
                                              [--before CHECKOUT]

The plan: each model x four dataset entries (crows-pairs, crows-pairs-revised, bbq scored, winopron asked; a few
items each), so two models give 8 units, collected first by `biaslab audit run PLAN` (local executor). Then each
command is run as a whole process `--repeats` times, alternating, and the median wall times and their ratios are
printed and written as JSON. `--before CHECKOUT` (a checkout of an earlier release, e.g. a `git worktree`) runs
the three commands from it too, in the same rounds on the same warehouse: a before/after measured side by side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import cpu_facts, write_json

DATASETS = ["{dataset: crows-pairs, limit: 3}", "{dataset: crows-pairs-revised, limit: 3}",
            "{dataset: bbq, limit: 2, protocol: prob}", "{dataset: winopron, limit: 1}"]


def plan_text(db: Path, data_dir: str | None, models: list[str]) -> str:
    lines = ["name: bench", f"db: {db}", *([f"data_dir: {data_dir}"] if data_dir else []), "models:"]
    for k, model in enumerate(models):
        name, _, dtype = model.partition("@")
        lines.append(f"  - {{name: m{k}, model: {name}, dtype: {dtype or 'fp32'}}}")
    lines += ["datasets:", *[f"  - {d}" for d in DATASETS]]
    return "\n".join(lines) + "\n"


def timed(command: list[str], tree: str | None = None) -> float:
    """Wall seconds of `command`, run from the checkout `tree` (its biaslab first on the path) where given."""
    env = dict(os.environ, PYTHONPATH=tree) if tree else None  # `-m` puts the working directory first: cwd too
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=tree, env=env)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2-135m,smollm2-135m@bf16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--before", default=None, help="a checkout of an earlier release, measured alongside")
    args = parser.parse_args()
    biaslab = [sys.executable, "-m", "biaslab.cli.biaslab_entry"]
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as folder:
        db, plan = Path(folder) / "w.duckdb", Path(folder) / "plan.yaml"
        plan.write_text(plan_text(db, args.data_dir, args.models.split(",")), encoding="utf-8")
        collected = timed([*biaslab, "audit", "run", str(plan)])
        commands = {"collections": [*biaslab, "collections", "--db", str(db)],
                    "audit status": [*biaslab, "audit", "status", str(plan)],
                    "audit dry run": [*biaslab, "audit", "run", str(plan), "--dry-run"]}
        trees = {"": None, **({"before: ": str(Path(args.before).resolve())} if args.before else {})}
        times: dict[str, list[float]] = {prefix + name: [] for prefix in trees for name in commands}
        for _ in range(args.repeats):
            for prefix, tree in trees.items():
                for name, command in commands.items():
                    times[prefix + name].append(timed(command, tree))
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["collections"]  # this release's: the commands' ratios are to one baseline
    result = {"models": args.models.split(","), "units": 4 * len(args.models.split(",")), "collect_s": collected,
              "times_s": times, "median_s": medians,
              "ratio_to_collections": {name: m / base for name, m in medians.items()}, "cpu": cpu_facts()}
    for name, m in medians.items():
        print(f"{name}: median {m:.2f} s ({m / base:.2f}x collections) over {args.repeats} runs")
    print(write_json("audit_status", result))


if __name__ == "__main__":
    main()
