"""The GPU kit (benchmarks/gpu/) keeps working without a GPU: `run_device.sh --cpu-smoke` runs bench_gpu.py's whole
path (random model of a real architecture saved and loaded by biaslab, the exact-mode sweep and run through
`runners.collect`, the bare forward, HF `generate` sampling, the bf16-vs-fp32 check) on a tiny shape and 20
WinoPron prompts, and writes the JSON keys the GPU run reports, with values that follow from one another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))


def test_cpu_smoke_writes_every_key(tmp_path, data_dir):
    if not (data_dir / "winopron").is_dir():
        pytest.skip("WinoPron is absent from the dataset folder")
    from bench_gpu import ALL_PROMPTS, PAPER_H200_SECONDS, PAPER_SAMPLES, REQUIRED_KEYS

    env = {**os.environ, "BIASLAB_DATA": str(data_dir), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "benchmarks/gpu/run_device.sh"), "--cpu-smoke", "--out", str(tmp_path),
                           "--work", str(tmp_path / "work")], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_tiny.json").read_text())
    assert result["missing_keys"] == [] and "error" not in result
    assert all(result[k] is not None for k in REQUIRED_KEYS)
    assert result["model_shape"]["name"] == "tiny" and result["device_type"] == "cpu" and result["dtype"] == "bf16"
    # the exact run: 20 prompts collected, the 3,600-prompt time extrapolated from their rate
    assert result["exact_prompts"] == 20 and result["exact_extrapolated"] is True
    assert result["exact_gpu_seconds_3600"] == pytest.approx(ALL_PROMPTS / result["exact_prompts_per_s"])
    assert result["trie_nodes_per_prompt"] > 1  # the answer bias makes tries grow past their root
    # sampling: 200 per prompt, the paper's cost and the ratios computed from the measured rates
    assert result["samples"] == PAPER_SAMPLES * result["sampling_prompts"] > 0
    assert result["paper_protocol_gpu_seconds"] == pytest.approx(ALL_PROMPTS * PAPER_SAMPLES / result["samples_per_s"])
    assert result["ratio_paper_to_exact"] == pytest.approx(result["paper_protocol_gpu_seconds"]
                                                           / result["exact_gpu_seconds_3600"])
    assert result["ratio_paper_reported_to_exact"] == pytest.approx(PAPER_H200_SECONDS
                                                                    / result["exact_gpu_seconds_3600"])
    assert result["efficiency_vs_bare_forward"] == pytest.approx(result["bare_seconds"] / result["exact_seconds"])
    assert result["distinct_tokens"] > result["decision_points"] >= 20
    # the dtype check compared the same requests in both dtypes
    assert result["dtype_check_request_ids_equal"] is True and result["dtype_check_values"] > 0
    assert 0 <= result["bf16_vs_fp32_max_abs_diff"] <= 1
    assert len(result["sweep"]) >= 1 and result["best_prompt_batch"] in {r["prompt_batch"] for r in result["sweep"]}


def test_run_device_refuses_an_unknown_option():
    done = subprocess.run(["bash", str(ROOT / "benchmarks/gpu/run_device.sh"), "--gpu"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "usage: run_device.sh" in done.stderr
