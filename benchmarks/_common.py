"""Helpers shared by the benchmark scripts: machine facts, timing, peak memory, JSON output."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from biaslab.provenance import library_versions


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "versions": library_versions()}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


OUT_DIR = Path(__file__).resolve().parent.parent / "bench_out"  # the repository's bench_out/, whatever the cwd


def write_json(name: str, payload: dict[str, Any], out_dir: str | os.PathLike = OUT_DIR) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=str))
    return path


def prob_sequences(tokenizer, dataset: str, n_stimuli: int, data_dir: str | None):
    """The `prob` protocol's sentences of the first `n_stimuli` stimuli (every candidate filled in), as the scoring
    benchmarks all use them: texts, BOS + token ids (biaslab's causal tokenization), and each one's stimulus."""
    from biaslab import loaders
    from biaslab.runners.loading import bos_token_id
    from biaslab.runners.requests import score_requests, tokenize_causal

    stimuli = loaders.get(dataset).load(loaders.default_data_dir(data_dir))[:n_stimuli]
    requests = score_requests(stimuli, "prob", "causal")
    bos, _ = bos_token_id(tokenizer)
    seqs = [tokenize_causal(tokenizer, r.text, bos).input_ids for r in requests]
    return [r.text for r in requests], seqs, [r.stimulus_id for r in requests]
