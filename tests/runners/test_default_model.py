"""The default model (smollm2-135m from PyPI) end to end through the CLI, on the 24 negation-bias sentences."""

from __future__ import annotations

import math

from click.testing import CliRunner

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
        assert model == [("smollm2-135m", "bf16", "prepend", "causal")]
        ppl = dict(wh.con.execute(
            "SELECT s.item_id, m.perplexity FROM sequence_metrics m JOIN stimuli s USING (stimulus_id)").fetchall())
        assert len(ppl) == 24
        # a real language model: natural sentences get perplexities far below the vocabulary size
        assert all(1.0 < p < 5000 and math.isfinite(p) for p in ppl.values())
        assert wh.count("token_scores") == wh.con.execute("SELECT sum(n_tokens) FROM sequence_scores").fetchone()[0]
