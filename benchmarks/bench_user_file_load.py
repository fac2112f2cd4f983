"""Load a big file of your own stimuli: rows per second and peak memory of `biaslab data load --file` (issue 45).

Usage: python benchmarks/bench_user_file_load.py [--rows 100000 1000000 10000000] [--format csv jsonl parquet]
       [--max-stimuli N] [--edit]

For each size and format: writes a file of N stimuli (a names study: `text` with a BLANK, two options, an item of
four rows (four primes), a `name` and a numeric `rating` attribute; about 150 bytes a row in CSV), then runs
`biaslab data load --file F --name big` in a fresh process into a fresh warehouse and reports its wall time,
rows/s, its peak resident memory (the child's ru_maxrss) and its last line (what it loaded, or the one line that
refused the file). A file above `--max-stimuli` (default: the command's own default) is refused before any row is
validated, so its time is the counting pass. JSON to bench_out/user_file_load.json; the last line is
`peak_rss_mb_max=<float>` (the largest peak over every run).

`--edit` (issue 44, item 4: attributes are not identity): after the first load, the same file is loaded again into
the same warehouse (`again`: nothing new) and then the file with every row's rating changed (`edited`: every stored
row updated and its edit recorded, none new); each is reported with its ratio to the first load's wall time.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write_json


def rows(n: int, shift: float = 0.0):
    for i in range(n):
        item = i // 4
        yield {"item_id": f"n{item}", "text": f"Name{item} said that BLANK would call back in {i % 4} minutes.",
               "slot": "BLANK", "options": "she|he", "option_labels": "female|male", "prime": f"Prime number {i % 4}.",
               "name": f"Name{item}", "rating": round((item % 97) / 96 + shift, 4)}


def write(path: Path, n: int, kind: str, shift: float = 0.0) -> None:
    if kind == "csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(next(rows(1))))
            writer.writeheader()
            writer.writerows(rows(n, shift))
    elif kind == "jsonl":
        with open(path, "w", encoding="utf-8") as f:
            for r in rows(n, shift):
                f.write(json.dumps(r) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        chunk = 500_000
        columns = list(next(rows(1)))
        with pq.ParquetWriter(path, pa.Table.from_pylist(list(rows(1))).schema) as writer:
            batch = []
            for r in rows(n, shift):
                batch.append(r)
                if len(batch) == chunk:
                    writer.write_table(pa.Table.from_pylist(batch))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch))
        del columns


def run_one(folder: Path, n: int, kind: str, max_stimuli: int | None, edit: bool = False) -> list[dict]:
    """The first load of a file of `n` rows into a fresh warehouse; with `edit`, then the same file again and the
    file with every rating changed, into the same warehouse."""
    data = folder / f"big-{n}.{kind}"
    if not data.exists():
        write(data, n, kind)
    db = folder / f"wh-{n}-{kind}.duckdb"
    runs = [("first", data)]
    if edit:
        edited = folder / f"big-{n}-edited.{kind}"
        if not edited.exists():
            write(edited, n, kind, shift=0.5)
        runs += [("again", data), ("edited", edited)]
    out = []
    for step, path in runs:
        out.append({"step": step, **_load(path, db, n, kind, max_stimuli)})
        out[-1]["ratio_to_first"] = round(out[-1]["wall_s"] / out[0]["wall_s"], 2)
    db.unlink(missing_ok=True)
    return out


def _load(data: Path, db: Path, n: int, kind: str, max_stimuli: int | None) -> dict:
    cmd = [sys.executable, "-m", "biaslab.cli.biaslab_entry", "data", "load", "--file", str(data), "--name", "big",
           "--db", str(db)] + (["--max-stimuli", str(max_stimuli)] if max_stimuli else [])
    script = ("import resource, subprocess, sys, json; p = subprocess.run(sys.argv[1:], capture_output=True, "
              "text=True); print(json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr, "
              "'peak_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script, *cmd], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    result = json.loads(done.stdout)
    shown = result["out"] if result["rc"] == 0 else result["err"]  # stderr also holds the progress bar
    last = shown.strip().splitlines()[-1:] or [""]
    return {"rows": n, "format": kind, "file_mb": round(data.stat().st_size / 1e6, 1), "rc": result["rc"],
            "wall_s": round(wall, 2), "rows_per_s": round(n / wall) if result["rc"] == 0 else None,
            "peak_rss_mb": round(result["peak_kib"] / 1024, 1), "last_line": last[0][:300]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--format", nargs="+", default=["csv", "jsonl", "parquet"], choices=["csv", "jsonl", "parquet"])
    ap.add_argument("--max-stimuli", type=int, default=None)
    ap.add_argument("--folder", default=None, help="where the generated files go (default: a temporary folder)")
    ap.add_argument("--edit", action="store_true", help="then load the same file again and the file with every "
                                                        "rating edited, into the same warehouse")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for n in args.rows:
            for kind in args.format:
                for r in run_one(folder, n, kind, args.max_stimuli, args.edit):
                    results.append(r)
                    print(f"{n:>10,} rows {kind:<8} {r['step']:<7} {r['file_mb']:>8} MB  rc {r['rc']}  "
                          f"{r['wall_s']:>8} s (x{r['ratio_to_first']})  {r['rows_per_s'] or '-':>8} rows/s  "
                          f"peak {r['peak_rss_mb']:>7} MB  | {r['last_line']}", flush=True)
    path = write_json("user_file_load", {"results": results, "self_peak_mb":
                                         resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print(f"written {path}")
    print(f"peak_rss_mb_max={max(r['peak_rss_mb'] for r in results)}")


if __name__ == "__main__":
    main()
