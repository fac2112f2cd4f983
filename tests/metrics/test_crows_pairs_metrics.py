"""CrowS-Pairs scores (issue 54, item 2): the paper's metric equal to `reference/metric.py`'s own functions run on a
tiny masked LM (its masking, its span alignment, its counting), hand-computed values, lm-eval's whole-sentence
scores, and the study end to end: metrics, JSON, compare and the report with its reliability caveat."""

from __future__ import annotations

import ast
import difflib
import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.loaders.crows_pairs import PINS
from biaslab.metrics.crows.stats import pair_frame, scores, shared_positions
from biaslab.runners.collect import CollectConfig, collect


def reference_functions(data_dir):
    """`get_span`, `mask_unigram` and `get_log_prob_unigram` of the pinned reference/metric.py (checked by sha256
    first), taken from its syntax tree: the module itself runs argparse and loads hub models on import."""
    path = data_dir / "crows_pairs" / "reference" / "metric.py"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    source = path.read_bytes()
    assert hashlib.sha256(source).hexdigest() == PINS["reference/metric.py"]
    tree = ast.parse(source)
    keep = [node for node in tree.body if isinstance(node, ast.FunctionDef)
            and node.name in ("get_span", "mask_unigram", "get_log_prob_unigram")]
    assert len(keep) == 3
    import torch

    namespace = {"difflib": difflib, "torch": torch}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def test_shared_positions_equal_metric_py_get_span(data_dir):
    import torch

    get_span = reference_functions(data_dir)["get_span"]
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = rng.integers(0, 12, size=rng.integers(1, 15)).tolist()
        b = list(a)
        for _ in range(rng.integers(1, 4)):  # substitutions, insertions, deletions
            op, at = rng.integers(0, 3), int(rng.integers(0, len(b) + 1))
            if op == 0 and at < len(b):
                b[at] = int(rng.integers(0, 12))
            elif op == 1:
                b.insert(at, int(rng.integers(0, 12)))
            elif b and at < len(b):
                del b[at]
        cls, sep = 100, 101  # the encoding's [CLS] and [SEP], which metric.py skips
        t1, t2 = get_span(torch.tensor([cls, *a, sep]), torch.tensor([cls, *b, sep]))
        mine = shared_positions(a, b)
        assert mine == ([i - 1 for i in t1[1:-1]], [i - 1 for i in t2[1:-1]])


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


def test_masked_paper_metric_equals_metric_py_run_on_the_same_model(crows_db, data_dir, tiny_bert, tiny_bert_dir):
    """metric.py's own mask_unigram (masking one shared token at a time on the tiny BERT) gives each sentence's
    score; biaslab's, from the stored PLL scores of its shared tokens, equals it per pair, and the metric score
    counted as metric.py's evaluate() counts equals biaslab's."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    ref = reference_functions(data_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    model = AutoModelForMaskedLM.from_pretrained(str(tiny_bert_dir), dtype=torch.float32).eval()
    lm = {"model": model, "tokenizer": tokenizer, "log_softmax": torch.nn.LogSoftmax(dim=0),
          "mask_token": tokenizer.mask_token, "uncased": False}
    with biaslab.open(crows_db) as wh:
        keys = wh.models()
        masked = keys.loc[keys["kind"] == "masked", "model_key"].iloc[0] if "kind" in keys else None
        pairs = biaslab.crows_pairs(wh, bootstrap=0, private=True)["_pairs"]
        table = biaslab.crows_pairs(wh, bootstrap=0)["crows_pairs"]
    pairs = pairs[pairs["scheme"] == "original"]
    assert len(pairs) == 30 and (masked is None or set(pairs["model_key"]) == {masked})
    texts = pd.read_csv(data_dir / "crows_pairs" / "crows_pairs_anonymized.csv", index_col=0)
    stereo = antistereo = neutral = 0
    with torch.no_grad():
        for row in pairs.itertuples():
            upstream = texts.loc[int(row.pair)]
            first, second = ((upstream.sent_more, upstream.sent_less) if row.direction == "stereo"
                             else (upstream.sent_less, upstream.sent_more))
            score = ref["mask_unigram"]({"sent1": first, "sent2": second}, lm)
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
