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
    assert "24 added" in first.output
    second = CliRunner().invoke(runners, args, catch_exceptions=False)
    assert "0 pending, 0 added" in second.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("sequence_scores") == 24
        model = wh.con.execute("SELECT name, dtype, bos_policy, kind FROM models").fetchall()
        # the default dtype depends on the processor (bf16 where it has AVX512-BF16 / AMX, else fp32)
        assert model == [("smollm2-135m", default_dtype(torch.device("cpu")), "prepend", "causal")]
        ppl = dict(wh.con.execute(
            "SELECT s.item_id, m.perplexity FROM sequence_metrics m JOIN stimuli s USING (stimulus_id)").fetchall())
        assert len(ppl) == 24
        # a real language model: natural sentences get perplexities far below the vocabulary size
        assert all(1.0 < p < 5000 and math.isfinite(p) for p in ppl.values())
        assert wh.count("token_scores") == wh.con.execute("SELECT sum(n_tokens) FROM sequence_scores").fetchone()[0]


CPUINFO_AVX2 = "processor : 0\nflags : fpu sse sse2 avx avx2 fma bmi2\n"
CPUINFO_BF16 = CPUINFO_AVX2.replace("bmi2", "bmi2 avx512f avx512_bf16")
CPUINFO_AMX = CPUINFO_AVX2.replace("bmi2", "bmi2 amx_bf16 amx_tile")


@pytest.mark.parametrize("cpuinfo, expected", [(CPUINFO_AVX2, "fp32"), (CPUINFO_BF16, "bf16"), (CPUINFO_AMX, "bf16"),
                                               (None, "fp32")])
def test_default_dtype_follows_the_cpu_flags(cpuinfo, expected, monkeypatch):
    """The default-dtype rule on both kinds of CPU, whatever this machine is (None: /proc/cpuinfo unreadable)."""
    from pathlib import Path

    real_read_text = Path.read_text

    def fake_read_text(self, *args, **kwargs):
        if str(self) == "/proc/cpuinfo":
            if cpuinfo is None:
                raise OSError("no /proc")
            return cpuinfo
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", fake_read_text)
    assert models.cpu_supports_bf16() == (expected == "bf16")
    assert default_dtype(torch.device("cpu")) == expected
    prepared = loading.prepare_model("smollm2-135m", device="cpu")
    assert prepared.spec.dtype == expected
    # an explicit dtype wins on either kind
    assert loading.prepare_model("smollm2-135m", device="cpu", dtype="fp32").spec.dtype == "fp32"
