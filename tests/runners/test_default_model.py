"""The default model (smollm2-135m from PyPI) end to end through the CLI, on the 24 negation-bias sentences."""

from __future__ import annotations

import math

import pytest
import torch
from click.testing import CliRunner

from biaslab.engines import models
from biaslab.engines.hf import loading
from biaslab.engines.hf.loading import default_dtype

from biaslab.cli.runners_cli import runners
from biaslab.warehouse import Warehouse


def test_default_model_scores_negation_examples_once(tmp_path, data_dir, dataset_folder):
    dataset_folder("negation_bias_examples")
    db = str(tmp_path / "n.duckdb")
    args = ["collect", "--dataset", "negation-examples", "--db", db, "--data-dir", str(data_dir)]
    first = CliRunner().invoke(runners, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert "24 scored sequences added" in first.output
    second = CliRunner().invoke(runners, args, catch_exceptions=False)
    assert "0 pending, 0 scored sequences added" in second.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("sequence_scores") == 24
        model = wh.con.execute("SELECT name, dtype, bos_policy, kind FROM models").fetchall()
        # the default dtype depends on the processor (measured where it has AVX512-BF16 / AMX, else fp32)
        assert model == [("smollm2-135m", default_dtype(torch.device("cpu"), read_model_config()), "prepend",
                          "causal")]
        ppl = dict(wh.con.execute(
            "SELECT s.item_id, m.perplexity FROM sequence_metrics m JOIN stimuli s USING (stimulus_id)").fetchall())
        assert len(ppl) == 24
        # a real language model: natural sentences get perplexities far below the vocabulary size
        assert all(1.0 < p < 5000 and math.isfinite(p) for p in ppl.values())
        assert wh.count("token_scores") == wh.con.execute("SELECT sum(n_tokens) FROM sequence_scores").fetchone()[0]


def read_model_config():
    from biaslab.engines.models import read_model

    return read_model("smollm2-135m", dtype="fp32").config


CPUINFO_AVX2 = "processor : 0\nflags : fpu sse sse2 avx avx2 fma bmi2\n"
CPUINFO_BF16 = CPUINFO_AVX2.replace("bmi2", "bmi2 avx512f avx512_bf16")
CPUINFO_AMX = CPUINFO_AVX2.replace("bmi2", "bmi2 amx_bf16 amx_tile")


@pytest.fixture
def fake_cpu(monkeypatch):
    """Call with a /proc/cpuinfo text (None: unreadable); that is what the process reads from then on."""
    from pathlib import Path

    real_read_text = Path.read_text

    def set_cpuinfo(cpuinfo):
        def fake_read_text(self, *args, **kwargs):
            if str(self) == "/proc/cpuinfo":
                if cpuinfo is None:
                    raise OSError("no /proc")
                return cpuinfo
            return real_read_text(self, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", fake_read_text)

    return set_cpuinfo


def timings(fp32_ms: float, bf16_ms: float, calls: list):
    def measure(shape):
        calls.append(shape)
        return fp32_ms, bf16_ms
    return measure


@pytest.mark.parametrize("cpuinfo, fp32_ms, bf16_ms, expected", [
    (CPUINFO_AVX2, 1.0, 0.1, "fp32"),       # no native bf16: never measured, never bf16
    (None, 1.0, 0.1, "fp32"),               # /proc/cpuinfo unreadable
    (CPUINFO_BF16, 5.2, 2.6, "bf16"),       # AMD EPYC with AVX512-BF16 (issue 34: bf16 1.9x faster)
    (CPUINFO_BF16, 6.4, 9.7, "fp32"),       # Intel Xeon with AVX512-BF16, no AMX (bf16 1.5x slower)
    (CPUINFO_AMX, 3.0, 1.0, "bf16"),
    (CPUINFO_BF16, 1.05, 1.0, "fp32"),      # a near tie keeps the more exact fp32 (MARGIN)
])
def test_the_default_dtype_is_measured_on_cpus_with_native_bf16(fake_cpu, tmp_path, monkeypatch, cpuinfo, fp32_ms,
                                                                bf16_ms, expected):
    """The default on every kind of CPU, whatever this machine is; cached per CPU model, torch, shape."""
    from biaslab.engines import dtype_choice

    threads = torch.get_num_threads()
    monkeypatch.setenv("BIASLAB_CACHE", str(tmp_path))
    fake_cpu(cpuinfo if cpuinfo is None else cpuinfo + "model name : Test CPU 9000\n")
    calls: list = []
    monkeypatch.setattr(dtype_choice, "block_times_ms", timings(fp32_ms, bf16_ms, calls))
    assert models.cpu_supports_bf16() == (cpuinfo is not None and cpuinfo != CPUINFO_AVX2)
    prepared = loading.prepare_model("smollm2-135m", device="cpu")
    assert prepared.spec.dtype == expected
    record = prepared.provenance["dtype_choice"]
    assert record["dtype"] == expected and record["torch"] == torch.__version__
    assert record["shape"] == [576, 1536, 9]  # SmolLM2-135M's hidden, intermediate, heads
    if not models.cpu_supports_bf16():
        assert calls == [] and "no native bf16" in record["reason"]
        return
    assert calls == [(576, 1536, 9)] and record["cpu"] == "Test CPU 9000"
    assert (record["fp32_ms"], record["bf16_ms"], record["cached"]) == (fp32_ms, bf16_ms, False)
    again = loading.prepare_model("smollm2-135m", device="cpu")  # from the cache: not measured again
    assert again.spec.dtype == expected and again.provenance["dtype_choice"]["cached"] and len(calls) == 1
    torch.set_num_threads(1)  # the cache is per CPU, torch and shape: the thread count does not re-measure it
    try:
        assert loading.prepare_model("smollm2-135m", device="cpu").spec.dtype == expected and len(calls) == 1
    finally:
        torch.set_num_threads(threads)
    # an explicit dtype wins on either kind, and records no measurement
    explicit = loading.prepare_model("smollm2-135m", device="cpu", dtype="fp32")
    assert explicit.spec.dtype == "fp32" and explicit.provenance == {}


def test_the_probe_times_a_real_block_in_both_dtypes_within_a_second(monkeypatch):
    """The probe runs interleaved rounds on one thread and reads this thread's CPU time (issue 46: a decision that
    does not depend on what other processes do); torch's thread count comes back as it was."""
    import time

    from biaslab.engines import dtype_choice

    seen: list = []
    clock = time.thread_time
    monkeypatch.setattr(dtype_choice.time, "thread_time", lambda: (seen.append(torch.get_num_threads()), clock())[1])
    before = torch.get_num_threads()
    started = time.monotonic()
    fp32_ms, bf16_ms = dtype_choice.block_times_ms((64, 128, 4), budget_s=0.05, min_rounds=3)
    assert 0 < fp32_ms < 1000 and 0 < bf16_ms < 1000 and dtype_choice.BUDGET_S <= 0.5
    assert len(seen) >= 2 * 2 * 3 and set(seen) == {1}  # two readings per timed run, 3 rounds x 2 dtypes at least
    assert torch.get_num_threads() == before
    assert time.monotonic() - started < 5  # sub-second in practice; generous for a busy machine


def test_the_run_records_the_measured_default(tmp_path, data_dir, dataset_folder):
    import json

    dataset_folder("negation_bias_examples")
    db = str(tmp_path / "n.duckdb")
    result = CliRunner().invoke(runners, ["collect", "--dataset", "negation-examples", "--db", db, "--data-dir",
                                          str(data_dir), "--limit", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with Warehouse.open(db, read_only=True) as wh:
        [(params, dtype)] = wh.rows("SELECT r.params, m.dtype FROM runs r JOIN models m USING (model_key)")
    choice = json.loads(params)["dtype_choice"]
    assert choice["dtype"] == dtype and choice["threads"] >= 1 and choice["torch"] == torch.__version__
