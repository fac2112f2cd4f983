"""Helpers shared by the benchmark scripts: machine facts, timing, peak memory, JSON output."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from biaslab.warehouse.provenance import library_versions


def first_prompts(prompts: int) -> dict[str, Any]:
    """`CollectConfig` arguments for the first WinoPron prompts of the file: `--limit` counts templates (10 prompts
    each, whole), so N prompts are the first ceil(N / 10) templates in the file's order (N rounded up to tens)."""
    return {"limit": -(-prompts // 10), "limit_order": "file"}


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


def timed_collection(config, loaded):
    """Collect `config` with the model already `loaded` (`runners.collect.collect`, what `runners collect` runs) and
    time it as the benchmarks of the main job do: (seconds from the progress bar's start, the pending work known, to
    the last chunk written; seconds of the whole call, its set-up included; the collection's result)."""
    from biaslab.runners.collect import collect

    started: list[float] = []

    def progress(total: int, done: int):
        started.append(time.perf_counter())
        return lambda n: None

    t0 = time.perf_counter()
    result = collect(config, progress=progress, loaded=loaded)
    end = time.perf_counter()
    return end - started[0], end - t0, result


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
    from biaslab.engines.models import bos_token_id
    from biaslab.runners.protocols.prob import score_requests, tokenize_causal

    stimuli = loaders.get(dataset).load(loaders.default_data_dir(data_dir))[:n_stimuli]
    requests = score_requests(stimuli, "prob", "causal")
    bos, _ = bos_token_id(tokenizer)
    seqs = [tokenize_causal(tokenizer, r.text, bos).input_ids for r in requests]
    return [r.text for r in requests], seqs, [r.stimulus_id for r in requests]


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_facts() -> dict[str, Any]:
    """The CPU model, the flags that decide matrix-product speed and the default dtype, and the CPUs this process may
    use (its affinity), as every benchmark records them."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = os.cpu_count()
    return {"cpu_model": model, "cpu_flags": [f for f in CPU_FLAGS if f in flags], "allowed_cpus": allowed,
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}


#: the neighbour: a deterministic CPU-bound loop (no memory traffic, no I/O), pinned to one core
NEIGHBOUR = ("import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nx = 0\nwhile True:\n"
             "    x = (x * 1103515245 + 12345) % 2147483648\n")


@contextmanager
def neighbour(enabled: bool):
    """With `enabled`, a CPU-bound process pinned to the last core this process may use, for the duration."""
    if not enabled:
        yield None
        return
    core = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(core)])
    time.sleep(0.5)  # running before anything is timed
    try:
        yield core
    finally:
        proc.kill()
        proc.wait()
