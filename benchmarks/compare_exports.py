"""Evidence and metrics before and after a change, compared row by row (the redesign's "nothing a user stored
changes" check).

``snapshot DIR`` runs a fixed fp32 collection through the command line into a fresh warehouse in DIR:

* ``runners collect --dataset winopron --limit 5`` (choice, exact mode: 5 templates, 50 prompts),
* ``runners collect --dataset winogender --limit 40`` (prob),
* ``runners collect --dataset ruff --protocol gen --limit 10`` (gen),
* ``runners collect --dataset negation-examples`` (prob, whole sentences),
* and, beyond those, ``gece-winogender --limit 40`` (calibration), ``winopron --protocol meta --limit 1`` and
  ``winopron --mode sample --limit 1 --samples 20 --seed 1`` (limits count items: a WinoPron template is 10 prompts),

then ``biaslab warehouse export DIR/export`` and ``biaslab metrics STUDY --format json`` for every study (the text
printed, or the one-line error, in ``DIR/metrics/STUDY.json``). ``compare A B`` compares two snapshots: every
exported Parquet table row by row (rows matched by the table's identity key; columns that are new per run, such as
run ids and timestamps, are left out and listed), and every study's JSON byte for byte. It prints one line per
table and study and exits 1 when anything differs.

Run the snapshot once with the old tree (``PYTHONPATH=/path/to/old/checkout``) and once with the new one, then
compare::

    PYTHONPATH=/tmp/old python benchmarks/compare_exports.py snapshot /tmp/before
    python benchmarks/compare_exports.py snapshot /tmp/after
    python benchmarks/compare_exports.py compare /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

#: the fixed collection: (dataset, extra arguments)
COLLECTIONS = (
    ("winopron", ["--limit", "5"]),
    ("winogender", ["--limit", "40"]),
    ("ruff", ["--protocol", "gen", "--limit", "10"]),
    ("negation-examples", []),
    # beyond the fixed set: a calibration dataset (gold labels), the meta protocol and choice sample mode
    ("gece-winogender", ["--limit", "40"]),
    ("winopron", ["--protocol", "meta", "--limit", "1"]),
    ("winopron", ["--mode", "sample", "--limit", "1", "--samples", "20", "--seed", "1"]),
)
STUDIES = ("contextuality", "misgendering", "negation", "calibration", "metaprompt")
#: columns that are new for every run (uuid run ids, wall-clock times, process ids): not compared
VOLATILE = {"run_id", "registered_at", "started_at", "finished_at", "pid", "host", "process_started", "boot_id",
            "exported_at"}
#: identity key per table (as `biaslab.warehouse` keys appends); tables not listed are compared on all their columns
KEYS = {
    "stimuli": ["stimulus_id"], "models": ["model_key"],
    "sequence_scores": ["model_key", "request_id"], "token_scores": ["model_key", "request_id", "position"],
    "choice_requests": ["model_key", "request_id"], "choice_nodes": ["model_key", "request_id", "node_id"],
    "choice_edges": ["model_key", "request_id", "node_id", "token_id"],
    "choice_probs": ["model_key", "request_id", "option", "temperature", "top_k", "top_p"],
    "samples": ["model_key", "request_id", "sample_index", "seed", "temperature", "top_k", "top_p",
                "max_new_tokens"],
    "gen_requests": ["model_key", "request_id"],
}
#: tables of provenance only (new ids and times each run): row counts compared, not values
PROVENANCE = {"runs", "meta"}


def _cli(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"biaslab.cli.{module}", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"})


def snapshot(out: Path) -> None:
    """Collect, export and compute every study's metrics into `out` (which must not exist)."""
    out = out.resolve()
    out.mkdir(parents=True)
    db = out / "warehouse.duckdb"
    for dataset, extra in COLLECTIONS:
        started = time.perf_counter()
        done = _cli("runners_entry", "collect", "--dataset", dataset, "--dtype", "fp32", "--db", str(db), *extra,
                    cwd=out)
        if done.returncode != 0:
            raise SystemExit(f"runners collect --dataset {dataset} failed:\n{done.stderr[-2000:]}")
        print(f"collect {dataset}: {done.stdout.strip().splitlines()[0]} ({time.perf_counter() - started:.0f} s)")
    done = _cli("biaslab_entry", "warehouse", "export", str(out / "export"), "--db", str(db), cwd=out)
    if done.returncode != 0:
        raise SystemExit(f"export failed:\n{done.stderr[-2000:]}")
    print(done.stdout.strip())
    (out / "metrics").mkdir()
    for study in STUDIES:
        done = _cli("biaslab_entry", "metrics", study, "--format", "json", "--db", str(db), cwd=out)
        text = done.stdout if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()}\n"
        (out / "metrics" / f"{study}.json").write_text(text, encoding="utf-8")
        print(f"metrics {study}: exit {done.returncode}, {len(done.stdout)} characters")


def compare_table(name: str, a: Path, b: Path) -> tuple[bool, str]:
    """(equal, one line) for one exported table."""
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    if name in PROVENANCE:
        same = ta.num_rows == tb.num_rows
        return same, f"{name}: {ta.num_rows} vs {tb.num_rows} rows (provenance: counts only)"
    skipped = sorted(VOLATILE & set(ta.column_names))
    if ta.schema.remove_metadata() != tb.schema.remove_metadata():
        return False, f"{name}: schemas differ:\n{ta.schema}\n---\n{tb.schema}"
    columns = [c for c in ta.column_names if c not in VOLATILE]
    keys = KEYS.get(name, columns)
    if ta.num_rows != tb.num_rows:
        return False, f"{name}: {ta.num_rows} vs {tb.num_rows} rows"
    ta, tb = (t.select(columns) for t in (ta, tb))
    ta, tb = (t.take(t.select(keys).to_pandas().astype(str).sort_values(keys, kind="stable").index.to_numpy())
              for t in (ta, tb))
    differing = {}
    for c in columns:
        if ta.column(c).equals(tb.column(c)):  # Arrow equality: bit for bit, lists element by element
            continue
        left, right = ta.column(c).to_pylist(), tb.column(c).to_pylist()
        bad = sum(repr(x) != repr(y) for x, y in zip(left, right))  # NaN == NaN here (same repr)
        if bad:
            differing[c] = bad
    rows = f"{ta.num_rows} rows x {len(columns)} columns"
    note = f" (not compared: {', '.join(skipped)})" if skipped else ""
    if differing:
        cells = ", ".join(f"{c} ({n} rows)" for c, n in differing.items())
        return False, f"{name}: {rows}: values differ in {cells}{note}"
    return True, f"{name}: {rows} identical{note}"


def compare(a: Path, b: Path) -> bool:
    """Print one line per table and study; True when everything is equal."""
    ok = True
    tables_a = sorted(p.name for p in (a / "export").glob("*.parquet"))
    tables_b = sorted(p.name for p in (b / "export").glob("*.parquet"))
    if tables_a != tables_b:
        print(f"tables differ: {tables_a} vs {tables_b}")
        ok = False
    for file in sorted(set(tables_a) & set(tables_b)):
        same, line = compare_table(file[: -len(".parquet")], a / "export" / file, b / "export" / file)
        ok &= same
        print(("  ok    " if same else "  DIFF  ") + line)
    for study in STUDIES:
        ja = (a / "metrics" / f"{study}.json").read_bytes()
        jb = (b / "metrics" / f"{study}.json").read_bytes()
        same = ja == jb
        ok &= same
        print(("  ok    " if same else "  DIFF  ") + f"metrics {study} --format json: {len(ja)} vs {len(jb)} bytes"
              + (" identical" if same else ""))
    print("identical" if ok else "DIFFERENT")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("snapshot", help="collect, export and compute metrics into DIR").add_argument("dir", type=Path)
    cmp = sub.add_parser("compare", help="compare two snapshots row by row")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        snapshot(args.dir)
        return 0
    return 0 if compare(args.a, args.b) else 1


if __name__ == "__main__":
    raise SystemExit(main())
