"""Latency of every metric command on a large synthetic warehouse (10M token-score rows, 1M samples).

Usage: python benchmarks/bench_metrics_latency.py [--token-rows 10000000] [--samples 1000000] [--repeats 3]

The warehouse holds the real stimuli of WinoPron, GECE-WinoBias, GenderLex and the negation examples, and synthetic
evidence of one model: exact choice probabilities and `--samples` samples for WinoPron, pronoun-pair scores for the
calibration datasets, sentence scores for the negation examples, and filler sequence scores whose token rows bring
`token_scores` to `--token-rows`. Each metric command runs as its own process (as a user runs it), timed end to end;
the median of `--repeats` runs is reported with the largest peak RSS of its runs (each child's own rusage).
With `--gen-samples` (default 111,600: one model's full misgendering run, MISGENDERED and RUFF pre/post x 5 plus
TANGO x 5) the warehouse also holds synthetic 50-word continuations of the real misgendering prompts and probability
scores of every MISGENDERED / RUFF option, and `metrics misgendering` is timed too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import peak_rss_mb, write_json

MODEL = "synthetic0000000"


WORDS = ("the", "a", "day", "was", "going", "badly", "for", "and", "said", "that", "office", "walked", "into", "home",
         "because", "work", "very", "happy", "he", "she", "they", "xe", "him", "her", "them", "xem", "his", "their")


def build_misgendering(wh, data_dir: Path, n_samples: int, rng) -> None:
    """Generation evidence (gen_requests + samples) for real MISGENDERED / RUFF / TANGO prompts, and option scores
    of every MISGENDERED / RUFF stimulus."""
    import pyarrow as pa

    from biaslab import loaders
    from biaslab.runners.protocols.gen import gen_requests

    stimuli = [s for name in ("misgendered", "ruff", "tango") for s in loaders.get(name).load(data_dir)]
    wh.append("stimuli", [s.to_row() for s in stimuli])
    requests = gen_requests(stimuli)
    from biaslab.lexicon.pronoun_detection import vocabulary

    vocab = {d: json.dumps(vocabulary(d), sort_keys=True) for d in ("misgendered", "ruff", "tango")}
    wh.append("gen_requests", pa.table({
        "model_key": [MODEL] * len(requests), "request_id": [r.request_id for r in requests],
        "stimulus_id": [r.stimulus_id for r in requests], "dataset": [r.dataset for r in requests],
        "context": [r.context for r in requests], "prompt_version": ["gen-v1"] * len(requests),
        "prompt_text": [r.prompt_text for r in requests], "declared": [r.declared for r in requests],
        "pronoun_vocabulary": [vocab[r.dataset] for r in requests],
        "max_new_tokens": pa.array([50] * len(requests), pa.int32()),
        "min_new_tokens": pa.array([50] * len(requests), pa.int32())}))
    per = max(1, n_samples // len(requests))
    index = [i for i in range(len(requests)) for _ in range(per)]
    words = rng.choice(len(WORDS), size=(len(index), 50))
    texts = [" " + " ".join(WORDS[w] for w in row) + "." for row in words]
    wh.append("samples", pa.table({
        "model_key": [MODEL] * len(index), "request_id": [requests[i].request_id for i in index],
        "sample_index": pa.array([k % per for k in range(len(index))], pa.int32()),
        "seed": pa.array(range(len(index)), pa.int64()), "temperature": [1.0] * len(index),
        "top_k": pa.array([50] * len(index), pa.int32()), "top_p": [0.95] * len(index),
        "max_new_tokens": pa.array([50] * len(index), pa.int32()),
        "stimulus_id": [requests[i].stimulus_id for i in index], "text": texts,
        "token_ids": pa.array([[1] * 50] * len(index), pa.list_(pa.int32())),
        "token_logprobs": pa.array([[-1.0] * 50] * len(index), pa.list_(pa.float64())),
        "finish_reason": ["length"] * len(index), "answer": pa.array([None] * len(index), pa.string()),
        "valid": [True] * len(index)}))
    rows = [(s, o) for s in stimuli if s.options is not None for o in s.options]
    wh.append("sequence_scores", pa.table({
        "model_key": [MODEL] * len(rows), "request_id": [f"m{s.stimulus_id}:{o}" for s, o in rows],
        "stimulus_id": [s.stimulus_id for s, _ in rows], "protocol": ["prob"] * len(rows),
        "option": [o for _, o in rows], "scheme": ["causal"] * len(rows), "text": ["-"] * len(rows),
        "n_tokens": pa.array(rng.integers(20, 40, len(rows)), pa.int32()),
        "sum_logprob": -rng.uniform(40, 120, len(rows))}))


def build(db: Path, data_dir: Path, token_rows: int, n_samples: int, gen_samples: int = 0,
          seed: int = 0) -> dict[str, int]:
    import numpy as np
    import pyarrow as pa

    from biaslab import loaders
    from biaslab.warehouse import Warehouse

    rng = np.random.default_rng(seed)
    with Warehouse.open(db) as wh:
        wh.append("models", [{"model_key": MODEL, "name": "synthetic", "source": "synthetic", "kind": "causal",
                              "dtype": "bf16", "quant": "none", "bos_policy": "prepend",
                              "registered_at": "2026-01-01 00:00:00"}])
        stimuli = {name: loaders.get(name).load(data_dir)
                   for name in ("winopron", "gece-winobias", "genderlex", "negation-examples")}
        for items in stimuli.values():
            wh.append("stimuli", [s.to_row() for s in items])
        # WinoPron exact probabilities
        wp = stimuli["winopron"]
        p_valid, p_f = rng.uniform(0.1, 0.9, len(wp)), rng.uniform(0, 1, len(wp))
        requests = {"model_key": [MODEL] * len(wp), "request_id": [f"x{s.stimulus_id}" for s in wp],
                    "stimulus_id": [s.stimulus_id for s in wp], "protocol": ["choice"] * len(wp),
                    "mode": ["exact"] * len(wp), "prompt_version": ["bench"] * len(wp), "adaptation": ["-"] * len(wp),
                    "prompt_text": ["-"] * len(wp), "options": [list(s.options) for s in wp],
                    "max_new_tokens": [6] * len(wp)}
        probs: dict[str, list] = {"model_key": [], "request_id": [], "option": [], "prob": [], "temperature": [],
                                  "top_k": [], "top_p": []}
        for s, pv, pf in zip(wp, p_valid, p_f):
            female = s.options[s.option_labels.index("female")]
            male = s.options[s.option_labels.index("male")]
            for option, p in ((female, pv * pf), (male, pv * (1 - pf)), ("invalid", 1 - pv), ("unresolved", 0.0)):
                for k, v in (("model_key", MODEL), ("request_id", f"x{s.stimulus_id}"), ("option", option),
                             ("prob", p), ("temperature", 0.5), ("top_k", 40), ("top_p", 1.0)):
                    probs[k].append(v)
        wh.append_with_children("choice_requests", pa.table(requests), {"choice_probs": pa.table(probs)})
        # WinoPron samples, under their own sample-mode requests (samples reach the metrics through choice_requests)
        wh.append("choice_requests", pa.table({
            "model_key": [MODEL] * len(wp), "request_id": [f"s{s.stimulus_id}" for s in wp],
            "stimulus_id": [s.stimulus_id for s in wp], "protocol": ["choice"] * len(wp),
            "mode": ["sample"] * len(wp), "prompt_version": ["bench"] * len(wp), "adaptation": ["-"] * len(wp),
            "prompt_text": ["-"] * len(wp), "options": [list(s.options) for s in wp],
            "max_new_tokens": [6] * len(wp)}))
        per = max(1, n_samples // len(wp))
        index = np.repeat(np.arange(len(wp)), per)
        valid = rng.random(len(index)) < 0.5
        female_pick = rng.random(len(index)) < p_f[index]
        answers = [wp[i].options[wp[i].option_labels.index("female" if f else "male")] if v else "<text>"
                   for i, v, f in zip(index, valid, female_pick)]
        samples = pa.table({
            "model_key": pa.array([MODEL] * len(index)),
            "request_id": pa.array([f"s{wp[i].stimulus_id}" for i in index]),
            "sample_index": pa.array(np.tile(np.arange(per), len(wp)), pa.int32()),
            "seed": pa.array(np.arange(len(index)), pa.int64()), "temperature": pa.array(np.full(len(index), 0.5)),
            "top_k": pa.array(np.full(len(index), 40), pa.int32()), "top_p": pa.array(np.full(len(index), 1.0)),
            "max_new_tokens": pa.array(np.full(len(index), 6), pa.int32()),
            "stimulus_id": pa.array([wp[i].stimulus_id for i in index]), "text": pa.array(answers),
            "token_ids": pa.array([[1, 2]] * len(index), pa.list_(pa.int32())),
            "token_logprobs": pa.array([[-0.1, -0.2]] * len(index), pa.list_(pa.float64())),
            "finish_reason": pa.array(["stop"] * len(index)), "answer": pa.array(answers), "valid": pa.array(valid),
        })
        wh.append("samples", samples)
        # calibration pairs and negation sentences
        seq_rows = []
        for name in ("gece-winobias", "genderlex"):
            for s in stimuli[name]:
                for option in s.options:
                    seq_rows.append((s.stimulus_id, option, -rng.uniform(20, 60)))
        for s in stimuli["negation-examples"]:
            seq_rows.append((s.stimulus_id, None, -rng.uniform(40, 90)))
        # filler sequences carrying the token rows
        filler_stimulus = stimuli["negation-examples"][0].stimulus_id
        per_seq = 50
        n_filler = max(0, token_rows // per_seq)
        seq = pa.table({
            "model_key": [MODEL] * (len(seq_rows) + n_filler),
            "request_id": [f"q{i}" for i in range(len(seq_rows) + n_filler)],
            "stimulus_id": [r[0] for r in seq_rows] + [filler_stimulus] * n_filler,
            "protocol": ["prob"] * len(seq_rows) + ["filler"] * n_filler,
            "option": [r[1] for r in seq_rows] + [None] * n_filler,
            "scheme": ["causal"] * (len(seq_rows) + n_filler), "text": ["-"] * (len(seq_rows) + n_filler),
            "n_tokens": pa.array([20] * len(seq_rows) + [per_seq] * n_filler, pa.int32()),
            "sum_logprob": [r[2] for r in seq_rows] + list(-rng.uniform(100, 300, n_filler)),
        })
        tokens = pa.table({
            "model_key": pa.array([MODEL] * (n_filler * per_seq)),
            "request_id": pa.array(np.repeat([f"q{len(seq_rows) + i}" for i in range(n_filler)], per_seq)),
            "position": pa.array(np.tile(np.arange(per_seq, dtype=np.int32), n_filler)),
            "token_id": pa.array(rng.integers(0, 49152, n_filler * per_seq, dtype=np.int32)),
            "logprob": pa.array(-rng.exponential(2.0, n_filler * per_seq)),
        })
        wh.append_with_children("sequence_scores", seq, {"token_scores": tokens})
        if gen_samples:
            build_misgendering(wh, data_dir, gen_samples, rng)
        return {t: wh.count(t) for t in ("stimuli", "sequence_scores", "token_scores", "choice_probs", "samples",
                                         "gen_requests")}


def timed(args: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and stdout of one command run as a child process (its own rusage, from wait4).

    A forked child starts with its parent's peak RSS on Linux, so this process stays small: it imports no data
    library and builds the warehouse in a child process too."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            out.seek(0)
            err.seek(0)
            message = err.read().decode(errors="replace").strip()[-500:] or out.read().decode(errors="replace")[-500:]
            raise SystemExit(f"{' '.join(args)} failed: {message}")
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    return elapsed, usage.ru_maxrss / 1024, stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--token-rows", type=int, default=10_000_000)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--gen-samples", type=int, default=111_600,
                    help="misgendering continuations (0: no misgendering evidence, metrics misgendering not timed)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--build-only", metavar="DB", help=argparse.SUPPRESS)  # the child process that builds
    args = ap.parse_args()
    if args.build_only:
        from biaslab import loaders

        sizes = build(Path(args.build_only), loaders.default_data_dir(args.data_dir), args.token_rows, args.samples,
                      args.gen_samples)
        print(json.dumps(sizes))
        return
    biaslab = [sys.executable, "-m", "biaslab.cli.biaslab_entry"]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.duckdb"
        builder = [sys.executable, str(Path(__file__).resolve()), "--build-only", str(db),
                   "--token-rows", str(args.token_rows), "--samples", str(args.samples),
                   "--gen-samples", str(args.gen_samples),
                   *(["--data-dir", args.data_dir] if args.data_dir else [])]
        build_s, build_rss, out = timed(builder)
        sizes = json.loads(out.strip().splitlines()[-1])
        commands = {
            "metrics contextuality": ["metrics", "contextuality", "--format", "json"],
            "metrics calibration": ["metrics", "calibration", "--format", "json"],
            "metrics negation": ["metrics", "negation", "--format", "json"],
            **({"metrics misgendering": ["metrics", "misgendering", "--format", "json"]} if args.gen_samples else {}),
            "sql perplexity over 10M token rows": ["sql", "select avg(perplexity), count(*) from sequence_metrics"],
            "info": ["info"],
        }
        results = {}
        for name, cmd in commands.items():
            runs = [timed([*biaslab, *cmd, "--db", str(db)]) for _ in range(args.repeats)]
            results[name] = {"median_s": statistics.median(r[0] for r in runs), "peak_rss_mb": max(r[1] for r in runs)}
    launcher_rss = peak_rss_mb()
    slowest = max(results, key=lambda n: results[n]["median_s"])
    payload = {"sizes": sizes, "build_seconds": build_s, "commands": results, "repeats": args.repeats,
               "slowest_command": slowest, "slowest_median_s": results[slowest]["median_s"], "target_s": 5.0,
               "peak_rss_mb": max(r["peak_rss_mb"] for r in results.values()),
               "builder_peak_rss_mb": build_rss, "launcher_peak_rss_mb": launcher_rss}
    print(f"synthetic warehouse: {sizes} (built in {build_s:.0f} s)")
    print(f"{'command':<38}{'median s':>10}{'peak MB':>10}")
    for name, r in results.items():
        print(f"{name:<38}{r['median_s']:>10.2f}{r['peak_rss_mb']:>10.0f}")
    print(f"slowest: {slowest} {results[slowest]['median_s']:.2f} s (target < 5 s: "
          f"{'met' if results[slowest]['median_s'] < 5 else 'MISSED'}); builder peak RSS {build_rss:.0f} MB, "
          f"launcher (inherited by each child at fork) {launcher_rss:.0f} MB")
    print(f"json: {write_json('metrics_latency', payload)}")


if __name__ == "__main__":
    main()
