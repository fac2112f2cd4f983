"""`biaslab compare` on the full main-job shape: every WinoPron prompt (3,600) collected in exact mode by two settings
(one model in fp32 and bf16, synthetic probabilities), timed end to end as a user runs it, beside
`biaslab metrics contextuality` on the same warehouse (the baseline, run side by side).

Usage: python benchmarks/bench_compare.py [--repeats 3] [--bootstrap 2000] [--permutations 5000]

Targets (issue 43): compare of two settings in under 10 s; a `biaslab view` stimulus page (/stimulus/<id>, its
Flask app in process; each stimulus has both settings' requests, a 64-logit trie root and its edges) in under 300 ms.
Writes bench_out/bench_compare.json (times, the ratio to the baseline, CPU facts).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from _common import cpu_facts, write_json

KEYS = {"fp32": "c0mpare0fp32aaaa", "bf16": "c0mpare0bf16bbbb"}


def build(db: Path, data_dir: Path) -> int:
    """The warehouse: WinoPron's stimuli and exact choice probabilities of both settings; returns the prompts."""
    from biaslab import loaders
    from biaslab.warehouse import Warehouse

    stimuli = list(loaders.get("winopron").load(data_dir))
    rng = np.random.default_rng(0)
    with Warehouse.open(db) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append("models", [{"model_key": key, "name": "synthetic-1b", "source": "synthetic", "revision": None,
                              "kind": "causal", "dtype": dtype, "quant": "none", "tokenizer": None,
                              "bos_policy": "prepend", "registered_at": datetime(2026, 1, 1)}
                             for dtype, key in KEYS.items()])
        base = rng.normal(0, 1, len(stimuli))
        for dtype, key in KEYS.items():
            requests, probs, nodes, edges = [], [], [], []
            for s, b in zip(stimuli, base):
                rid = f"{key}-{s.stimulus_id}"
                p_f = 1 / (1 + math.exp(-(b + rng.normal(0, 0.1 if dtype == "bf16" else 0.0))))
                valid = rng.uniform(0.7, 1.0)
                requests.append({"model_key": key, "request_id": rid, "stimulus_id": s.stimulus_id,
                                 "protocol": "choice", "mode": "exact", "prompt_version": "forced-choice-v1",
                                 "adaptation": "-", "prompt_text": "-", "options": list(s.options),
                                 "max_new_tokens": 6, "k_store": 64})
                female = s.options[s.option_labels.index("female")]
                male = s.options[s.option_labels.index("male")]
                for option, p in ((female, valid * p_f), (male, valid * (1 - p_f)), ("invalid", 1 - valid),
                                  ("unresolved", 0.0)):
                    probs.append({"model_key": key, "request_id": rid, "option": option, "prob": p,
                                  "temperature": 0.5, "top_k": 40, "top_p": 1.0})
                # a one-level trie the size of the main job's root nodes (k_store 64) for the stimulus page
                logits = np.sort(rng.normal(0, 3, 64))[::-1].astype(np.float32)
                nodes.append({"model_key": key, "request_id": rid, "node_id": 0, "parent_id": None, "token_id": None,
                              "depth": 0, "topk_ids": list(range(100, 164)), "topk_logits": logits.tolist(),
                              "logsumexp": float(np.log(np.exp(logits.astype(float)).sum()))})
                edges += [{"model_key": key, "request_id": rid, "node_id": 0, "token_id": 100 + j, "outcome": o,
                           "child_id": None} for j, o in enumerate((female, male))]
            wh.append_with_children("choice_requests", requests, {"choice_probs": probs, "choice_nodes": nodes,
                                                                  "choice_edges": edges})
    return len(stimuli)


def stimulus_pages(db: Path, repeats: int) -> list[float]:
    """Seconds per /stimulus/<id> page of `biaslab view` (its Flask app, in process), 20 stimuli x `repeats`."""
    from biaslab.cli.view import create_app
    from biaslab.warehouse import Warehouse

    with Warehouse.open(db, read_only=True) as wh:
        ids = [r[0] for r in wh.rows("SELECT stimulus_id FROM stimuli USING SAMPLE 20 ROWS (reservoir, 7)")]
    client = create_app(db).test_client()
    times = []
    for _ in range(repeats):
        for sid in ids:
            start = time.perf_counter()
            assert client.get(f"/stimulus/{sid}").status_code == 200
            times.append(time.perf_counter() - start)
    return times


def timed(command: list[str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--permutations", type=int, default=5000)
    parser.add_argument("--data-dir", default=os.environ.get("BIASLAB_DATA", "../shared/datasets"))
    args = parser.parse_args()
    biaslab = [sys.executable, "-m", "biaslab.cli.biaslab_entry"]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "compare.duckdb"
        prompts = build(db, Path(args.data_dir))
        compare = timed([*biaslab, "compare", "contextuality", "--db", str(db), "--between", KEYS["fp32"][:12],
                         KEYS["bf16"][:12], "--format", "json", "--bootstrap", str(args.bootstrap),
                         "--permutations", str(args.permutations)], args.repeats)
        baseline = timed([*biaslab, "metrics", "contextuality", "--db", str(db), "--format", "json"], args.repeats)
        pages = stimulus_pages(db, args.repeats)
    median = float(np.median(compare))
    payload = {"prompts": prompts, "settings": 2, "bootstrap": args.bootstrap, "permutations": args.permutations,
               "compare_s": compare, "compare_median_s": median, "metrics_contextuality_s": baseline,
               "metrics_contextuality_median_s": float(np.median(baseline)),
               "ratio_compare_to_metrics": median / float(np.median(baseline)), "target_s": 10.0,
               "within_target": median < 10.0, "stimulus_page_s": pages,
               "stimulus_page_median_s": float(np.median(pages)),
               "stimulus_page_p95_s": float(np.quantile(pages, 0.95)),
               "stimulus_page_target_s": 0.3, "cpu": cpu_facts()}
    path = write_json("bench_compare", payload)
    print(f"compare of 2 settings x {prompts} prompts: median {median:.2f} s (target < 10 s); "
          f"metrics contextuality {payload['metrics_contextuality_median_s']:.2f} s; ratio "
          f"{payload['ratio_compare_to_metrics']:.2f}; stimulus page median "
          f"{payload['stimulus_page_median_s'] * 1000:.0f} ms, p95 {payload['stimulus_page_p95_s'] * 1000:.0f} ms "
          f"(target < 300 ms); {path}")


if __name__ == "__main__":
    main()
