"""Start-up of the commands people type most, against plain DuckDB run side by side (issue 57).

Usage: python benchmarks/bench_startup.py [--repeats 9] [--db WAREHOUSE]

Each command runs as a fresh process (the console scripts `biaslab` and `runners` of this environment), interleaved
with its baseline so that both see the same machine load; the median wall time of `--repeats` runs is reported:

- `biaslab sql "select 1"` and `biaslab sql "select count(*) from stimuli"` against a plain Python script that
  imports duckdb, opens the same file read-only and runs the same query (target: at most 2x);
- `biaslab --help`, `runners --help` and `biaslab info` against `python -c "import duckdb"` (target: at most 2x).

Without --db the warehouse is a fresh one with WinoPron's stimuli (3,600 rows) loaded from $BIASLAB_DATA.

The commands run with Python's bytecode cache on, as an installed package has it (pip compiles every module at
install; an editable install writes the cache on first use): PYTHONDONTWRITEBYTECODE is removed from their
environment, so the warm-up run writes biaslab's cache. Where that variable is set (some sandboxes set it), every
start would otherwise compile biaslab's modules again (~10 ms per module imported), which no installed copy pays.
Writes bench_out/startup.json (times, ratios, CPU facts and the load average before and after).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import cpu_facts, write_json

TARGET = 2.0


#: the commands' environment: the bytecode cache on (see the module docstring)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(command: list[str]) -> float:
    """Seconds one fresh process takes, start to exit (its output discarded; a failure stops the benchmark)."""
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return took


def side_by_side(command: list[str], baseline: list[str], repeats: int) -> dict:
    """Median wall seconds of `command` and of `baseline`, run alternately after one warm-up run of each."""
    wall(command), wall(baseline)  # warm the file cache and the bytecode cache of both
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(wall(command))
        theirs.append(wall(baseline))
    ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
    return {"command": " ".join(command), "baseline": " ".join(baseline), "median_s": ours_s,
            "baseline_median_s": theirs_s, "ratio": ours_s / theirs_s, "met": ours_s / theirs_s <= TARGET}


def fresh_warehouse(folder: Path) -> Path:
    db = folder / "w.duckdb"
    data = os.environ.get("BIASLAB_DATA")
    args = [script("biaslab"), "data", "load", "winopron", "--db", str(db)] + (["--data-dir", data] if data else [])
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return db


def script(name: str) -> str:
    """The console script of this environment (beside its python), else the one on PATH."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--db", default=None, help="an existing warehouse (default: a fresh one with WinoPron)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(args.db) if args.db else fresh_warehouse(Path(folder))
        python, biaslab, runners = sys.executable, script("biaslab"), script("runners")
        load_before = os.getloadavg()

        def duckdb_script(query: str) -> list[str]:
            return [python, "-c", f"import duckdb; print(duckdb.connect({str(db)!r}, read_only=True)"
                                  f".execute({query!r}).fetchall())"]

        import_duckdb = [python, "-c", "import duckdb"]
        rows = {
            "sql select 1": side_by_side([biaslab, "sql", "--db", str(db), "select 1"],
                                         duckdb_script("select 1"), args.repeats),
            "sql count(*) stimuli": side_by_side([biaslab, "sql", "--db", str(db), "select count(*) from stimuli"],
                                                 duckdb_script("select count(*) from stimuli"), args.repeats),
            "biaslab --help": side_by_side([biaslab, "--help"], import_duckdb, args.repeats),
            "runners --help": side_by_side([runners, "--help"], import_duckdb, args.repeats),
            "biaslab info": side_by_side([biaslab, "info", "--db", str(db)], import_duckdb, args.repeats),
        }
        load_after = os.getloadavg()
    width = max(len(name) for name in rows)
    print(f"{'command':<{width}}  {'median':>8}  {'baseline':>8}  ratio  target {TARGET:g}x")
    for name, row in rows.items():
        print(f"{name:<{width}}  {row['median_s']:8.3f}  {row['baseline_median_s']:8.3f}  {row['ratio']:5.2f}  "
              f"{'met' if row['met'] else 'NOT met'}")
    print(f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    path = write_json("startup", {"repeats": args.repeats, "target_ratio": TARGET, "rows": rows,
                                  "cpu": cpu_facts(), "load_before": load_before, "load_after": load_after,
                                  "caller_had_PYTHONDONTWRITEBYTECODE": "PYTHONDONTWRITEBYTECODE" in os.environ})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
