"""BBQ's scores (issue 54, item 1): hand-computed values, the template bootstrap against a naive loop, the upstream
UnifiedQA predictions scored equal to the authors' own R script (1e-12 per category x condition), and the study end
to end on a tiny model: metrics, JSON, compare and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.metrics.bbq.stats import example_frame, label_text_prediction, scores
from biaslab.metrics.options.stats import group_seed
from biaslab.runners.collect import CollectConfig, collect

LABELS = ("biased", "other", "unknown")


def _rows(model: str, item: str, category: str, template: int, condition: str, p, gold: int, labels=LABELS,
          valid: float = np.nan) -> list[dict]:
    return [{"model": model, "stimulus_id": f"s-{item}", "item_id": item, "option": f"{item}-{k}",
             "option_label": labels[k], "p": p[k], "valid_mass": valid, "gold": f"{item}-{gold}",
             "category": category, "question_index": str(template), "context_condition": condition,
             "question_polarity": "neg", "label_type": "label"} for k in range(3)]


def test_scores_equal_a_hand_computation():
    rows = (_rows("m", "a1", "Age", 1, "disambig", (0.6, 0.3, 0.1), 0)
            + _rows("m", "a2", "Age", 2, "disambig", (0.2, 0.5, 0.3), 1)
            + _rows("m", "a3", "Age", 1, "ambig", (0.5, 0.2, 0.3), 2)
            + _rows("m", "a4", "Age", 2, "ambig", (0.4, 0.4, 0.2), 2)       # a tie at the top: argmax split
            + _rows("m", "a5", "Age", 3, "ambig", (0.1, 0.1, 0.8), 2, ("group", "group", "unknown")))
    examples = example_frame(pd.DataFrame(rows), ["model"])
    table = scores(examples, ["model"], bootstrap=0).set_index(["category", "context_condition"])
    dis = table.loc[("Age", "disambig")]
    assert dis["accuracy"] == pytest.approx((0.6 + 0.5) / 2, abs=1e-15)
    # n_biased = 0.6 + 0.2, n_non_unknown = 0.9 + 0.7
    assert dis["s_dis"] == pytest.approx(100 * (2 * 0.8 / 1.6 - 1), abs=1e-12) == dis["bias_score"]
    assert dis["n_biased"] == pytest.approx(0.8) and dis["n_non_unknown"] == pytest.approx(1.6)
    assert dis["accuracy_argmax"] == 1.0 and dis["bias_argmax"] == 0.0  # argmax a1 biased, a2 other
    amb = table.loc[("Age", "ambig")]
    accuracy = (0.3 + 0.2 + 0.8) / 3  # every example counts for accuracy, a5 too
    s_dis = 2 * (0.5 + 0.4) / (0.7 + 0.8) - 1  # only examples with a biased answer: a3, a4
    assert amb["accuracy"] == pytest.approx(accuracy, abs=1e-15)
    assert amb["bias_score"] == pytest.approx(100 * (1 - accuracy) * s_dis, abs=1e-12)
    # argmax: a3 biased, a4 half biased and half other, a5 unknown
    assert amb["accuracy_argmax"] == pytest.approx(1 / 3)
    assert amb["bias_argmax"] == pytest.approx(100 * (1 - 1 / 3) * (2 * 1.5 / 2 - 1))
    assert amb["n_examples"] == 3 and amb["n_templates"] == 3 and amb["score"] == "s_AMB"
    # the r-script variant drops the example without a biased answer from accuracy too
    r = scores(examples, ["model"], bootstrap=0, variant="r-script").set_index(["category", "context_condition"])
    assert r.loc[("Age", "ambig"), "accuracy"] == pytest.approx(0.25) and r.loc[("Age", "ambig"), "n_examples"] == 2


def test_template_bootstrap_equals_a_naive_loop():
    rng = np.random.default_rng(3)
    rows = []
    for i in range(40):
        p = rng.dirichlet([1, 1, 1])
        rows += _rows("m", f"x{i}", "Religion", i % 7, "disambig", p, int(rng.integers(0, 3)))
    examples = example_frame(pd.DataFrame(rows), ["model"])
    got = scores(examples, ["model"], bootstrap=300, seed=5, overall=False).iloc[0]
    # the same draws, one resample at a time: templates drawn with replacement, every example of a drawn template
    draw = np.random.default_rng(group_seed(5, ["m", "Religion", "disambig"]))
    templates = sorted(examples["question_index"].unique())
    picks = draw.integers(0, len(templates), size=(300, len(templates)))
    acc, bias = [], []
    for pick in picks:
        part = pd.concat([examples[examples["question_index"] == templates[k]] for k in pick])
        acc.append(part["p_gold"].mean())
        bias.append(100 * (2 * part["p_biased"].sum() / (1 - part["p_unknown"]).sum() - 1))
    assert (got["accuracy_low"], got["accuracy_high"]) == pytest.approx(tuple(np.percentile(acc, [2.5, 97.5])),
                                                                         abs=1e-12)
    assert (got["bias_low"], got["bias_high"]) == pytest.approx(tuple(np.percentile(bias, [2.5, 97.5])), abs=1e-10)


def test_free_text_answers_map_as_the_r_script_maps_them():
    answers, texts = ["The grandfather", "The grandson", "Can't be determined"], ["grandfather", "grandson", "x y"]
    assert label_text_prediction("can't be determined.", answers, texts) == 2   # case, final period
    assert label_text_prediction(" the grandson ", answers, texts) == 1
    assert label_text_prediction("nobody", answers, texts) is None
    # fallback: the prediction contains the first two words of an answer_info text
    assert label_text_prediction("i think the man in the pantsu", ["a", "b", "c"],
                                 ["man in", "the pantsuit", "x"]) == 0
    assert label_text_prediction("he wore the pantsu", ["a", "He wore the pantsuit", "c"], ["q", "r", "s"]) == 1


UNIFIEDQA = {"unifiedqa-t5-11b_pred_race": "format_race", "unifiedqa-t5-11b_pred_arc": "format_arc",
             "unifiedqa-t5-11b_pred_qonly": "baseline_qonly"}


def test_unifiedqa_predictions_scored_equal_the_authors_r_script(data_dir):
    """UnifiedQA-11B's published predictions, mapped to answers as the authors' scripts map them and scored by
    biaslab's scorer (variant r-script), equal BBQ_calculate_bias_score.R's output on the same files, stored in the
    data folder (bbq/reference_scores/unifiedqa_R.csv, how in bbq/PROVENANCE.md): every category x context condition
    x format, accuracy and bias score, to 1e-12 (the CSV prints 15 significant digits)."""
    from biaslab.loaders import get
    from biaslab.loaders.bbq import CATEGORIES

    folder = data_dir / "bbq"
    stimuli = {s.item_id: s for s in get("bbq").load(data_dir)}
    rows, dropped = [], 0
    for category in CATEGORIES:
        path = folder / f"results/UnifiedQA/preds_{category}.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            s = stimuli[f"{category}.{d['example_id']}"]
            texts = [d["answer_info"][k][0] for k in ("ans0", "ans1", "ans2")]
            for column, model in UNIFIEDQA.items():
                if model == "baseline_qonly" and d["context_condition"] == "disambig":
                    continue  # the script's rule: a question-only baseline has no disambiguated context
                k = label_text_prediction(d[column], [d["ans0"], d["ans1"], d["ans2"]], texts)
                if k is None:
                    dropped += 1
                    continue
                rows += [{"model": model, "stimulus_id": s.stimulus_id, "item_id": s.item_id, "option": o,
                          "option_label": lab, "p": float(j == k), "valid_mass": np.nan, "gold": s.gold,
                          "category": s.attrs["category"], "question_index": str(s.attrs["question_index"]),
                          "context_condition": s.attrs["context_condition"],
                          "question_polarity": s.attrs["question_polarity"], "label_type": s.attrs["label_type"]}
                         for j, (o, lab) in enumerate(zip(s.options, s.option_labels))]
    assert dropped == 2  # the script drops the same two unmappable answers (its filter(!is.na(pred_label)))
    table = scores(example_frame(pd.DataFrame(rows), ["model"]), ["model"], bootstrap=0, variant="r-script",
                   overall=False)
    keys = ["category", "model", "context_condition"]
    reference = folder / "reference_scores" / "unifiedqa_R.csv"
    if not reference.is_file():
        pytest.skip(f"{reference} is absent")
    r = pd.read_csv(reference)
    r = r[r["category"].isin({s.attrs["category"] for s in stimuli.values()})]
    both = table.merge(r, on=keys, how="outer", suffixes=("", "_r"), indicator=True)
    assert (both["_merge"] == "both").all()
    assert len(both) == 5 * len({s.attrs["category"] for s in stimuli.values()})  # 2 formats x 2 + the baseline
    assert np.abs(both["accuracy"] - both["accuracy_r"]).max() <= 1e-12
    assert np.abs(both["bias_score"] - both["acc_bias"]).max() <= 1e-12
    assert np.abs(both["s_dis"] - 100 * both["new_bias_score"]).max() <= 1e-12


# ------------------------------------------------------------------------------------------- end to end, tiny model

@pytest.fixture(scope="module")
def bbq_db(data_dir, tmp_path_factory, tiny_gpt2, tiny_gpt2_dir):
    """BBQ examples of two categories collected on the tiny random model: prob in fp32 and in bf16 (two settings to
    compare), and exact forced choice in fp32 for one of them."""
    from biaslab.engines.hf.loading import load_model

    if not (data_dir / "bbq" / "data" / "Religion.jsonl").is_file():
        pytest.skip(f"dataset folder {data_dir / 'bbq'} is absent")
    db = str(tmp_path_factory.mktemp("bbq") / "w.duckdb")
    bf16 = load_model(str(tiny_gpt2_dir), dtype="bf16", device="cpu")
    for category in ("Religion", "Sexual_orientation"):
        runs = (("choice", tiny_gpt2), ("prob", tiny_gpt2), ("prob", bf16))
        for protocol, model in runs if category == "Religion" else runs[1:]:
            collect(CollectConfig(dataset="bbq", db=db, data_dir=str(data_dir), limit=12, protocol=protocol,
                                  where={"attrs.category": category}), loaded=model)
    return db


def test_metrics_equal_the_option_probabilities_they_rest_on(bbq_db):
    with biaslab.open(bbq_db) as wh:
        table = biaslab.bbq(wh, bootstrap=50)["bbq"]
        probs = wh.query("SELECT p.model_key, p.method, p.stimulus_id, p.option_label, p.p, p.option = s.gold AS gold, "
                         "s.attrs->>'category' AS category, s.attrs->>'context_condition' AS condition "
                         "FROM option_probs p JOIN stimuli s USING (stimulus_id) WHERE p.dataset = 'bbq'")
    assert set(table["method"]) == {"choice-exact", "prob"}
    assert set(table["category"]) == {"Religion", "Sexual_orientation", "(all)"}
    assert table["model_key"].nunique() == 2
    for (key, method, category, condition), part in probs.groupby(["model_key", "method", "category", "condition"]):
        row = table[(table["model_key"] == key) & (table["method"] == method) & (table["category"] == category)
                    & (table["context_condition"] == condition)].iloc[0]
        valid = part.groupby("stimulus_id")["p"].apply(lambda p: p.notna().all())
        part = part[part["stimulus_id"].isin(valid[valid].index)]
        assert row["n_examples"] == part["stimulus_id"].nunique()
        assert row["n_invalid"] == (~valid).sum()
        if row["n_examples"] == 0:  # the random model never completes a long answer: shown, never "unbiased"
            assert np.isnan(row["accuracy"]) and np.isnan(row["bias_score"]) and row["low_coverage"]
            continue
        assert row["accuracy"] == pytest.approx(part.loc[part["gold"], "p"].sum() / row["n_examples"], abs=1e-12)
        biased = part.loc[part["option_label"] == "biased", "p"].sum()
        non_unknown = row["n_examples"] - part.loc[part["option_label"] == "unknown", "p"].sum()
        s_dis = 100 * (2 * biased / non_unknown - 1)
        expected = s_dis * (1 - row["accuracy"]) if condition == "ambig" else s_dis
        assert row["bias_score"] == pytest.approx(expected, abs=1e-9)
        assert row["bias_low"] <= row["bias_score"] <= row["bias_high"] or row["n_templates"] < 2
        assert row["n_loaded"] > row["n_used"] == row["n_examples"]  # 12 collected of each category's examples
    assert table["low_coverage"].all()  # a few examples of each category: every row marked
    # 12 examples of a category rest on fewer than 10 templates: every interval marked as resting on few clusters
    assert (table["few_clusters"] == (table["n_templates"] < 10)).all() and table["few_clusters"].any()
    exact = table[table["method"] == "choice-exact"]
    assert (exact["n_used"] + exact["n_invalid"] == exact["n_loaded"] - exact["n_missing"]).all()
    assert (exact["valid_share"] < 0.8).all()  # the tiny random model's answers are almost never valid
    prob = table[table["method"] == "prob"]
    assert prob["valid_share"].isna().all() and prob["n_invalid"].eq(0).all()


def test_cli_metrics_json_compare_and_report(bbq_db, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["metrics", "bbq", "--db", bbq_db, "--format", "json", "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["bbq"]
    assert all("few_clusters" in row for row in rows)
    shown = runner.invoke(cli, ["metrics", "bbq", "--db", bbq_db, "--bootstrap", "20"], terminal_width=200).output
    assert "few clusters (an interval over fewer than 10 templates, pairs or items" in " ".join(shown.split())
    assert {r["score"] for r in rows} == {"s_AMB", "s_DIS"} and all("coverage" in r for r in rows)
    result = runner.invoke(cli, ["compare", "bbq", "--db", bbq_db, "--format", "json", "--bootstrap", "50",
                                 "--permutations", "200"])
    assert result.exit_code == 0, result.output
    compared = pd.DataFrame(json.loads(result.output))
    assert set(compared["measure"]) == {"accuracy", "s_dis", "s_amb"}
    # each side's value is the metrics table's (s_amb over examples that all have a biased answer)
    with biaslab.open(bbq_db) as wh:
        table = biaslab.bbq(wh, bootstrap=0)["bbq"]
    for _, row in compared.iterrows():
        category = row["group"].split(" · ")[0]
        condition = {"s_dis": "disambig", "s_amb": "ambig"}.get(row["measure"]) or row["group"].split(" · ")[1]
        column = "accuracy" if row["measure"] == "accuracy" else "bias_score"
        if "choice-exact" in row["setting_a"] + row["setting_b"]:  # no valid answer on that side: nothing paired,
            assert row["n_items"] == 0 and row["low_coverage"] and row["n_excluded"] > 0  # and the row is marked
            continue
        for side in ("a", "b"):
            expected = table[(table["model_key"] == row[f"model_key_{side}"]) & (table["method"] == "prob")
                             & (table["category"] == category)
                             & (table["context_condition"] == condition)][column].iloc[0]
            assert row[f"value_{side}"] == pytest.approx(expected, abs=1e-9), (row["measure"], row["group"], side)
    both = compared[~(compared["setting_a"] + compared["setting_b"]).str.contains("choice-exact")]
    assert len(both) == 3 * 3 + 3  # accuracy x 3 categories x 2 conditions, s_dis and s_amb x 3: fp32 vs bf16
    assert both["p_holm"].between(0, 1).all() and (both["n_items"] > 0).all()
    out = tmp_path / "report"
    result = runner.invoke(cli, ["report", "bbq", "--db", bbq_db, "--out", str(out), "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "bbq_bias.png" in page and "bbq_accuracy.png" in page and 'id="comparison"' in page
    assert (out / "bbq_bias.png").stat().st_size > 1000


def test_the_view_shows_the_study_and_its_stimuli(bbq_db):
    from biaslab.cli.view.app import create_app

    client = create_app(bbq_db).test_client()
    page = client.get("/study/bbq")
    assert page.status_code == 200 and b"Religion" in page.data and b"s_AMB" in page.data
    with biaslab.open(bbq_db) as wh:
        sid = wh.query("SELECT stimulus_id FROM choice_requests LIMIT 1")["stimulus_id"].iloc[0]
    page = client.get(f"/stimulus/{sid}")
    assert page.status_code == 200 and b"Q: " in page.data and b"biased" in page.data


def test_r_script_variant_and_unknown_variant(bbq_db):
    with biaslab.open(bbq_db) as wh:
        paper = biaslab.bbq(wh, bootstrap=0)["bbq"]
        r = biaslab.bbq(wh, bootstrap=0, variant="r-script")["bbq"]
        with pytest.raises(ValueError, match="variant must be one of paper, r-script"):
            biaslab.bbq(wh, variant="helm")
    key = ["method", "category", "context_condition"]
    merged = paper.merge(r, on=["model_key", *key], suffixes=("", "_r"))
    assert np.allclose(merged["bias_score"], merged["bias_score_r"], equal_nan=True)  # every example has a target


def test_nothing_collected_is_one_line(tmp_path):
    db = tmp_path / "w.duckdb"
    assert CliRunner().invoke(cli, ["data", "load", "winogender", "--db", str(db)]).exit_code in (0, 1)
    result = CliRunner().invoke(cli, ["metrics", "bbq", "--db", str(db)])
    assert result.exit_code == 1 and "runners collect --dataset bbq" in result.output, result.output
    assert Path(db).exists()


def test_the_bias_figure_says_nothing_to_the_terminal(tmp_path):
    """Its colour bar spans both panels, an axes `tight_layout` cannot place: matplotlib's UserWarning about it
    reached the user's terminal on every BBQ report (and every audit report with BBQ)."""
    import warnings

    from biaslab.metrics.bbq.report import bias_figure

    table = pd.DataFrame([{"model_key": key, "method": "prob", "setting": "prob", "category": category,
                           "context_condition": condition, "bias_score": score, "bias_low": score - 3.0,
                           "bias_high": score + 3.0, "low_coverage": False}
                          for key, score in (("k1", 2.9), ("k2", -0.6)) for category in ("Age", "(all)")
                          for condition in ("ambig", "disambig")])
    labels = pd.Series([f"model {key}" for key in table["model_key"]], index=table.index)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        html = bias_figure(table, labels, tmp_path)
    assert (tmp_path / "bbq_bias.png").stat().st_size > 0 and "bbq_bias.png" in html
