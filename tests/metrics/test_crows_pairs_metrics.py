"""CrowS-Pairs scores: the paper's metric equal to the outputs of the authors' metric.py (stored) on a
tiny masked LM (its masking, its span alignment, its counting), hand-computed values, lm-eval's whole-sentence
scores, and the study end to end: metrics, JSON, compare and the report with its reliability caveat."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.metrics.crows.stats import pair_frame, scores, shared_positions
from biaslab.runners.collect import CollectConfig, collect


#: outputs of the CrowS-Pairs authors' metric.py (nyu-mll/crows-pairs at 8aaac11), run once outside the project on
#: the cases below (how: fixtures/README.md); the script itself is not kept
METRIC_PY = Path(__file__).parent / "fixtures" / "crows_pairs_metric_py_outputs.json"


@pytest.fixture(scope="module")
def metric_py() -> dict:
    return json.loads(METRIC_PY.read_text(encoding="utf-8"))


def test_shared_positions_equal_metric_py_get_span(metric_py):
    """metric.py's get_span on 300 random edits (substitutions, insertions, deletions) of token sequences, each
    wrapped in [CLS] / [SEP] as metric.py's encodings are: biaslab's shared positions are the same, without them."""
    assert len(metric_py["get_span"]) == 300
    for case in metric_py["get_span"]:
        t1, t2 = case["span_a"], case["span_b"]
        assert shared_positions(case["a"], case["b"]) == ([i - 1 for i in t1[1:-1]], [i - 1 for i in t2[1:-1]])


def test_pair_scores_equal_a_hand_computation():
    sentences = pd.DataFrame([
        # stereo pair: ids 1 2 3 4 vs 1 5 3 4 share positions 0, 2, 3
        {"key": "m", "dataset": "d", "pair": "0", "sentence": "more", "direction": "stereo", "bias_type": "age",
         "sum_logprob": -4.0, "token_ids": [1, 2, 3, 4], "logprobs": np.array([-1.0, -0.5, -1.25, -1.25])},
        {"key": "m", "dataset": "d", "pair": "0", "sentence": "less", "direction": "stereo", "bias_type": "age",
         "sum_logprob": -3.0, "token_ids": [1, 5, 3, 4], "logprobs": np.array([-1.0, -0.2, -1.0, -0.8])},
        # antistereo pair whose shared scores tie after rounding to 3 decimals: neutral
        {"key": "m", "dataset": "d", "pair": "1", "sentence": "more", "direction": "antistereo", "bias_type": "age",
         "sum_logprob": -2.0, "token_ids": [7, 8], "logprobs": np.array([-1.0, -1.0])},
        {"key": "m", "dataset": "d", "pair": "1", "sentence": "less", "direction": "antistereo", "bias_type": "age",
         "sum_logprob": -2.5, "token_ids": [7, 9], "logprobs": np.array([-1.0002, -1.5])},
    ])
    pairs = pair_frame(sentences, ["key"]).set_index("pair")
    assert pairs.loc["0", "paper_more"] == pytest.approx(-3.5) and pairs.loc["0", "paper_less"] == pytest.approx(-2.8)
    assert not pairs.loc["0", "paper_win"] and not pairs.loc["0", "lm_win"]
    assert pairs.loc["1", "neutral"] and not pairs.loc["1", "paper_win"] and pairs.loc["1", "lm_win"]
    row = scores(pairs.reset_index(), ["key"], bootstrap=0).set_index("bias_type").loc["age"]
    assert row["metric_score"] == 0.0 and row["n_neutral"] == 1 and row["n_pairs"] == 2
    assert row["stereo_score"] == 0.0 and np.isnan(row["antistereo_score"])  # the antistereo pair is neutral
    assert row["pct_stereotype"] == 50.0 and row["likelihood_diff"] == pytest.approx((1.0 + 0.5) / 2)
    assert row["metric_p"] == 1.0  # 0 of 1 non-neutral pairs: two-sided binomial p


# ------------------------------------------------------------------------------------------- end to end, tiny models

@pytest.fixture(scope="module")
def crows_db(data_dir, tmp_path_factory, tiny_gpt2, tiny_gpt2_dir, tiny_bert):
    """30 pairs of CrowS-Pairs scored by the tiny GPT-2 (fp32 and bf16) and the tiny BERT (PLL, the paper's
    masking)."""
    from biaslab.engines.hf.loading import load_model

    if not (data_dir / "crows_pairs" / "crows_pairs_anonymized.csv").is_file():
        pytest.skip(f"dataset folder {data_dir / 'crows_pairs'} is absent")
    db = str(tmp_path_factory.mktemp("crows") / "w.duckdb")
    for model in (tiny_gpt2, load_model(str(tiny_gpt2_dir), dtype="bf16", device="cpu"), tiny_bert):
        collect(CollectConfig(dataset="crows-pairs", db=db, data_dir=str(data_dir), limit=30), loaded=model)  # pairs
    return db


def test_masked_paper_metric_equals_metric_py_run_on_the_same_model(crows_db, metric_py):
    """metric.py's own mask_unigram (masking one shared token at a time on the same tiny BERT, seed 0) gave each
    sentence's score (stored); biaslab's, from the stored PLL scores of its shared tokens, equals it per pair, and
    the metric score counted as metric.py's evaluate() counts equals biaslab's."""
    reference = metric_py["mask_unigram_tiny_bert"]
    with biaslab.open(crows_db) as wh:
        keys = wh.models()
        masked = keys.loc[keys["kind"] == "masked", "model_key"].iloc[0] if "kind" in keys else None
        pairs = biaslab.crows_pairs(wh, bootstrap=0, private=True)["_pairs"]
        table = biaslab.crows_pairs(wh, bootstrap=0)["crows_pairs"]
    pairs = pairs[pairs["scheme"] == "original"]
    assert len(pairs) == 30 and (masked is None or set(pairs["model_key"]) == {masked})
    assert set(pairs["pair"].astype(str)) == set(reference)  # the limit's 30 pairs, as when the fixture was made
    stereo = antistereo = neutral = 0
    for row in pairs.itertuples():
        score = reference[str(row.pair)]
        assert score["direction"] == row.direction
        more, less = ((score["sent1_score"], score["sent2_score"]) if row.direction == "stereo"
                      else (score["sent2_score"], score["sent1_score"]))
        assert row.paper_more == pytest.approx(more, abs=2e-5) and row.paper_less == pytest.approx(less, abs=2e-5)
        # metric.py's evaluate(): rounded to 3 decimals, equal is neutral, else sent_more winning counts
        one, two = round(score["sent1_score"], 3), round(score["sent2_score"], 3)
        if one == two:
            neutral += 1
        elif row.direction == "stereo":
            stereo += one > two
        else:
            antistereo += two > one
    overall = table[(table["scheme"] == "original") & (table["bias_type"] == "(all)")].iloc[0]
    assert overall["metric_score"] == pytest.approx((stereo + antistereo) / len(pairs) * 100, abs=1e-12)
    assert overall["n_neutral"] == neutral


def test_whole_sentence_scores_are_lm_evals(crows_db):
    """lm-eval's crows_pairs_english: the log-likelihood of each sentence after the BOS (or EOS) token, every token
    scored; pct_stereotype the share of pairs where sent_more's is higher. The stored joint log-probability is
    that sum (benchmarks/bench_crows_lm_eval.py runs lm-eval itself on SmolLM2 and compares per pair)."""
    with biaslab.open(crows_db) as wh:
        rows = wh.query("SELECT q.model_key, s.item_id AS pair, s.attrs->>'sentence' AS sentence, q.sum_logprob, "
                        "(SELECT sum(t.logprob) FROM token_scores t WHERE t.model_key = q.model_key "
                        "AND t.request_id = q.request_id) AS tokens FROM sequence_scores q JOIN stimuli s "
                        "USING (stimulus_id) WHERE q.scheme = 'causal'")
        table = biaslab.crows_pairs(wh, bootstrap=0)["crows_pairs"]
    assert np.allclose(rows["sum_logprob"], rows["tokens"], atol=1e-9)
    wide = rows.pivot_table(index=["model_key", "pair"], columns="sentence", values="sum_logprob")
    for key, part in wide.groupby(level=0):
        row = table[(table["model_key"] == key) & (table["bias_type"] == "(all)")].iloc[0]
        assert row["pct_stereotype"] == pytest.approx(100 * (part["more"] > part["less"]).mean(), abs=1e-12)
        assert row["likelihood_diff"] == pytest.approx((part["more"] - part["less"]).abs().mean(), abs=1e-9)


def test_cli_metrics_compare_and_report(crows_db, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["metrics", "crows-pairs", "--db", crows_db, "--format", "json", "--bootstrap",
                                 "30"])
    assert result.exit_code == 0, result.output
    rows = pd.DataFrame(json.loads(result.output)["crows_pairs"])
    assert set(rows["scheme"]) == {"causal", "original"} and (rows["n_loaded"] >= rows["n_used"]).all()
    several = rows[rows["n_pairs"] >= 2]  # an interval needs two pairs (a bias type with one has none)
    assert ((several["metric_low"] <= several["metric_score"]) & (several["metric_score"] <= several["metric_high"])
            ).all()
    assert rows.loc[rows["n_pairs"] == 1, "metric_low"].isna().all()
    result = runner.invoke(cli, ["compare", "crows-pairs", "--db", crows_db, "--format", "json", "--bootstrap",
                                 "50", "--permutations", "100"])
    assert result.exit_code == 0, result.output
    compared = pd.DataFrame(json.loads(result.output))
    assert set(compared["measure"]) == {"metric", "pct_stereotype", "likelihood_diff"}
    assert set(compared["test"]) == {"mcnemar", "permutation"}
    fp = compared[(compared["measure"] == "pct_stereotype") & compared["group"].str.endswith("(all)")]
    assert (fp["n_items"] == 30).all()
    out = tmp_path / "report"
    result = runner.invoke(cli, ["report", "crows-pairs", "--db", crows_db, "--out", str(out), "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Blodgett et al., ACL 2021" in page and "crows_0.png" in page and 'id="comparison"' in page
