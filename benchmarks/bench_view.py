"""`biaslab view` page latency: the index, then a stimulus page (asked right after the app starts, while its
tokenizers load in the background), then each study page and comparison page with evidence, first request (cold: the
metrics computed) against the following ones (warm: answered from the per-warehouse-state cache), through Flask's
test client on one warehouse.

Usage: python benchmarks/bench_view.py --db WAREHOUSE [--repeats 7]

Targets: a warm page under 300 ms; the first stimulus page within 2 s of the index. The ratio warm / cold is the
cache's gain on this machine, measured side by side in one process. Writes bench_out/view.json (times, ratios, CPU
facts, load before and after).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import cpu_facts, write_json

TARGET_S = 0.300


def timed(client, url: str) -> float:
    start = time.perf_counter()
    response = client.get(url)
    took = time.perf_counter() - start
    if response.status_code != 200:
        raise SystemExit(f"{url}: HTTP {response.status_code}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    from biaslab.cli.view import create_app
    from biaslab.metrics.registry import studies
    from biaslab.warehouse import Warehouse

    load_before = os.getloadavg()
    client = create_app(args.db).test_client()
    with Warehouse.open(args.db, read_only=True) as wh:
        present = {d for (d,) in wh.rows("SELECT DISTINCT dataset FROM stimuli")}
        stimulus = wh.rows("SELECT stimulus_id FROM sequence_scores UNION ALL SELECT stimulus_id FROM "
                           "choice_requests LIMIT 1")
    pages = [f"/study/{name}" for name, s in studies().items()
             if name != "options" and set(s.dataset_names) & present]
    pages += [f"/compare/{p.split('/')[-1]}" for p in pages if studies()[p.split("/")[-1]].compare is not None]
    if stimulus:  # first after the index: the page that used to wait on importing transformers and a tokenizer
        pages.insert(0, f"/stimulus/{stimulus[0][0]}")
    pages.insert(0, "/")
    rows = []
    for url in pages:
        cold = timed(client, url)
        warm = statistics.median(timed(client, url) for _ in range(args.repeats))
        rows.append({"page": url, "cold_s": cold, "warm_median_s": warm, "warm_over_cold": warm / cold,
                     "warm_met": warm <= TARGET_S})
        print(f"{url:40s} cold {cold * 1000:8.1f} ms  warm {warm * 1000:7.1f} ms  ratio {warm / cold:.3f}  "
              f"{'met' if warm <= TARGET_S else 'NOT met'} (<= {TARGET_S * 1000:.0f} ms)")
    path = write_json("view", {"db": args.db, "repeats": args.repeats, "target_s": TARGET_S, "pages": rows,
                               "cpu": cpu_facts(), "load_before": load_before, "load_after": os.getloadavg()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
