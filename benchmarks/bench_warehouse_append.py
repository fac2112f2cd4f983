"""Warehouse append throughput: 1,000,000 token-level score rows, bulk Arrow appends vs row-by-row INSERT.

Usage: python benchmarks/bench_warehouse_append.py [--rows 1000000] [--batch-requests 1000]

Both paths run in this one process on fresh warehouses. The bulk path is biaslab's: per batch, one transaction
that writes sequence_scores parents and their token_scores children, skipping keys already stored. The baseline
is a parameterized row-by-row INSERT (executemany) of a slice, extrapolated per row.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from biaslab.warehouse import Warehouse

from _common import peak_rss_mb, write_json

TOKENS_PER_REQUEST = 50


def batch(start: int, n_requests: int, rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    ids = [f"req{start + i:08d}" for i in range(n_requests)]
    logprobs = -rng.exponential(2.0, size=n_requests * TOKENS_PER_REQUEST)
    seq = pa.table({
        "model_key": ["m" * 16] * n_requests, "request_id": ids, "stimulus_id": ["s" * 16] * n_requests,
        "protocol": ["bench"] * n_requests, "scheme": ["causal"] * n_requests, "text": ["x"] * n_requests,
        "n_tokens": pa.array([TOKENS_PER_REQUEST] * n_requests, pa.int32()),
        "sum_logprob": logprobs.reshape(n_requests, -1).sum(axis=1),
    })
    tok = pa.table({
        "model_key": pa.array(["m" * 16] * (n_requests * TOKENS_PER_REQUEST)),
        "request_id": pa.array(np.repeat(ids, TOKENS_PER_REQUEST)),
        "position": pa.array(np.tile(np.arange(TOKENS_PER_REQUEST, dtype=np.int32), n_requests)),
        "token_id": pa.array(rng.integers(0, 49152, size=n_requests * TOKENS_PER_REQUEST, dtype=np.int32)),
        "logprob": pa.array(logprobs),
    })
    return seq, tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="token-score rows to append")
    ap.add_argument("--batch-requests", type=int, default=1000, help="requests per append (x50 token rows)")
    ap.add_argument("--baseline-rows", type=int, default=5_000, help="rows for the row-by-row baseline")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n_requests = args.rows // TOKENS_PER_REQUEST
    batches = [batch(i, min(args.batch_requests, n_requests - i), rng)
               for i in range(0, n_requests, args.batch_requests)]
    with tempfile.TemporaryDirectory() as tmp:
        with Warehouse.open(Path(tmp) / "bulk.duckdb") as wh:
            t0 = time.perf_counter()
            for seq, tok in batches:
                wh.append_with_children("sequence_scores", seq, {"token_scores": tok})
            bulk_s = time.perf_counter() - t0
            stored = wh.count("token_scores")
            t0 = time.perf_counter()
            for seq, tok in batches[:10]:  # re-append: idempotence check cost
                wh.append_with_children("sequence_scores", seq, {"token_scores": tok})
            reappend_s = (time.perf_counter() - t0) / min(10, len(batches))
            assert wh.count("token_scores") == stored == n_requests * TOKENS_PER_REQUEST
        with Warehouse.open(Path(tmp) / "rows.duckdb") as wh:
            rows = batches[0][1].slice(0, args.baseline_rows).to_pylist()
            t0 = time.perf_counter()
            wh.con.executemany(
                "INSERT INTO token_scores (model_key, request_id, position, token_id, logprob) VALUES (?, ?, ?, ?, ?)",
                [(r["model_key"], r["request_id"], r["position"], r["token_id"], r["logprob"]) for r in rows],
            )
            row_s = time.perf_counter() - t0
    bulk_rate = stored / bulk_s
    row_rate = len(rows) / row_s
    result = {
        "rows": stored, "batches": len(batches), "bulk_seconds": bulk_s, "bulk_rows_per_s": bulk_rate,
        "reappend_seconds_per_batch": reappend_s, "row_by_row_rows": len(rows), "row_by_row_rows_per_s": row_rate,
        "ratio_bulk_vs_row_by_row": bulk_rate / row_rate, "peak_rss_mb": peak_rss_mb(),
    }
    print(f"bulk append:      {stored:,} token rows in {bulk_s:.2f} s = {bulk_rate:,.0f} rows/s "
          f"({len(batches)} transactions)")
    print(f"idempotent re-append of a stored batch: {reappend_s * 1000:.1f} ms")
    print(f"row-by-row INSERT: {row_rate:,.0f} rows/s  ->  bulk is {bulk_rate / row_rate:,.0f}x faster")
    print(f"peak RSS: {result['peak_rss_mb']:.0f} MB;  json: {write_json('warehouse_append', result)}")


if __name__ == "__main__":
    main()
