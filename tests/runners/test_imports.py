"""`biaslab import` (issue 70, item 2): other tools' answers and scores as evidence of their own kind.

Fixtures (tests/runners/fixtures/README.md says how each was made): an lm-evaluation-harness 0.4.13 run of
SmolLM2-135M-Instruct on its bbq task (48 examples) and crows_pairs_english (60 pairs) with --log_samples, and an
inspect_ai 0.3.285 log of inspect_evals 0.28.0's bbq task (24 samples, mockllm replies). The BBQ authors' UnifiedQA
predictions and the R script's scores of them are in the data folder.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as biaslab_cli
from biaslab.errors import BiaslabError
from biaslab.runners.imports import import_answers
from biaslab.warehouse import Warehouse

FIXTURES = Path(__file__).parent / "fixtures"
LM_EVAL = FIXTURES / "lm_eval"
INSPECT = FIXTURES / "inspect"


def _results(task: str) -> dict:
    return json.loads((LM_EVAL / f"results_{task}.json").read_text(encoding="utf-8"))["results"][task]


def _samples(task: str) -> list[dict]:
    with gzip.open(LM_EVAL / f"samples_{task}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def lm_eval_db(tmp_path_factory, data_dir):
    db = tmp_path_factory.mktemp("imp") / "w.duckdb"
    result = CliRunner().invoke(biaslab_cli, ["import", str(LM_EVAL), "--db", str(db), "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert "48 bbq examples read, 144 of 144 rows new" in result.output
    assert "60 crows-pairs-revised pairs read, 120 of 120 rows new" in result.output
    return db


def test_lm_eval_bbq_aggregates_equal_lm_evals_own(lm_eval_db):
    """lm-eval's acc, accuracy_amb / _disamb and its bias scores (x 100) equal biaslab's from the import; where a
    category has no named answer at all lm-eval reports a bias score of 0 and biaslab none (undefined: 0 / 0)."""
    ours = _results("bbq_local")
    with biaslab.open(str(lm_eval_db)) as wh:
        table = biaslab.bbq(wh, bootstrap=0)["bbq"]
    assert set(table["method"]) == {"import"} and set(table["backend"]) == {"lm-eval"}
    assert set(table["setting"]) == {"lm-eval bbq_local"}
    overall = table[table["category"] == "(all)"].set_index("context_condition")
    assert overall.loc["ambig", "accuracy"] == pytest.approx(ours["accuracy_amb,none"], abs=1e-12)
    assert overall.loc["disambig", "accuracy"] == pytest.approx(ours["accuracy_disamb,none"], abs=1e-12)
    assert overall.loc["ambig", "bias_score"] == pytest.approx(100 * ours["amb_bias_score,none"], abs=1e-9)
    assert overall.loc["disambig", "bias_score"] == pytest.approx(100 * ours["disamb_bias_score,none"], abs=1e-9)
    correct = (overall["accuracy"] * overall["n_examples"]).sum()
    assert correct / overall["n_examples"].sum() == pytest.approx(ours["acc,none"], abs=1e-12)
    assert overall["n_examples"].sum() == 48 and (table["n_invalid"] == 0).all()
    compared = 0
    for row in table[table["category"] != "(all)"].itertuples():
        theirs = ours[f"{'amb' if row.context_condition == 'ambig' else 'disamb'}_bias_score_{row.category},none"]
        if np.isnan(row.bias_score):  # no answer named a group: lm-eval's 0, biaslab's undefined
            assert theirs == 0.0 and row.n_non_unknown == 0
        else:
            assert row.bias_score == pytest.approx(100 * theirs, abs=1e-9)
            compared += 1
    assert compared >= 8


def test_lm_eval_bbq_answers_are_the_highest_loglik(lm_eval_db):
    """Per example: the stored answer is the first highest log-likelihood among lm-eval's 12 choices, every "unknown"
    phrasing mapped to BBQ's unknown answer; lm-eval's per-sample acc agrees."""
    samples = {f"{s['doc']['category']}.{s['doc']['example_id']}": s for s in _samples("bbq_local")}
    with Warehouse.open(lm_eval_db, read_only=True) as wh:
        rows = wh.rows("SELECT s.item_id, a.option, a.chosen, a.loglik, s.gold FROM imported_answers a "
                       "JOIN stimuli s USING (stimulus_id) WHERE a.option IS NOT NULL ORDER BY 1")
    assert len({r[0] for r in rows}) == 48
    for item in {r[0] for r in rows}:
        sample = samples[item]
        lls = [float(r[0]) for r in sample["filtered_resps"]]
        best = int(np.argmax(lls))
        texts = [sample["arguments"][f"gen_args_{j}"]["arg_1"].strip() for j in range(len(lls))]
        mine = [r for r in rows if r[0] == item]
        chosen = [r[1] for r in mine if r[2]]
        options = [sample["doc"][f"ans{k}"] for k in range(3)]
        expected = texts[best] if best < 2 else next(o for o in options if o not in texts[:2])
        assert chosen == [expected]
        assert (chosen[0] == mine[0][4]) == bool(sample["acc"])
        for r in mine:
            if r[1] in texts:
                assert r[3] == pytest.approx(lls[texts.index(r[1])], abs=0)


def test_lm_eval_crows_aggregates_equal_lm_evals_own(lm_eval_db):
    ours = _results("crows_pairs_english_local")
    with biaslab.open(str(lm_eval_db)) as wh:
        table = biaslab.crows_pairs(wh, bootstrap=200)["crows_pairs"]
    row = table[table["bias_type"] == "(all)"].iloc[0]
    assert row["scheme"] == "import" and row["n_pairs"] == 60 and row["dataset"] == "crows-pairs-revised"
    assert row["pct_stereotype"] == pytest.approx(100 * ours["pct_stereotype,none"], abs=1e-9)
    assert row["likelihood_diff"] == pytest.approx(ours["likelihood_diff,none"], abs=1e-9)
    assert row["pct_low"] < row["pct_stereotype"] < row["pct_high"]  # biaslab's interval over pairs
    assert np.isnan(row["metric_score"])  # the paper's metric needs tokens, which lm-eval does not log
    assert row["n_loaded"] == 1677 and row["n_missing"] == 1677 - 60  # coverage: what lm-eval scored of the set


def test_imported_sentences_equal_biaslabs_own_collection(lm_eval_db, tmp_path, data_dir):
    """The same 60 pairs collected by biaslab on the same model (fp32, one sentence a batch, as lm-eval ran with
    batch size 1 and softmax_dtype float64): each sentence's log-likelihood equals lm-eval's to fp32 precision
    (measured here: max 2.7e-5 absolute, 4.8e-7 relative; 1e-5 absolute is not reached in fp32, where the two tools'
    matrix products differ in shape), and `compare` pairs the import with biaslab's collection sentence by
    sentence."""
    from biaslab.engines.hf.loading import load_model
    from biaslab.runners.collect import CollectConfig, collect

    db = tmp_path / "w.duckdb"
    shutil.copyfile(lm_eval_db, db)
    pairs = "|".join(s["doc"]["Unnamed: 0"] for s in _samples("crows_pairs_english_local"))
    loaded = load_model("smollm2-135m", dtype="fp32", device="cpu")
    done = collect(CollectConfig(dataset="crows-pairs-revised", protocol="prob", dtype="fp32", model="smollm2-135m",
                                 db=str(db), data_dir=str(data_dir), max_tokens=8, where={"attrs.pair": pairs}),
                   loaded=loaded)
    assert done.added == 120
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT a.loglik, q.sum_logprob FROM imported_answers a JOIN sequence_scores q "
                       "USING (stimulus_id) WHERE a.option IS NULL")
    theirs, mine = np.array(rows).T
    assert len(rows) == 120
    # here: 2.7e-5 / 4.8e-7; bounded with room for another CPU kind's fp32 kernels (the fixture was made on AVX2),
    # far below what a difference in what is scored gives (a token, the BOS: 1e-2 and more)
    assert np.abs(theirs - mine).max() <= 5e-4
    assert (np.abs(theirs - mine) / np.abs(mine)).max() <= 5e-6
    result = CliRunner().invoke(biaslab_cli, ["compare", "crows-pairs", "--db", str(db), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {(r["measure"], r["group"]): r for r in json.loads(result.output)}
    pct = rows[("pct_stereotype", "crows-pairs-revised · (all)")]
    imported_key = [k for k in (pct["model_key_a"], pct["model_key_b"]) if k != done.model_key]
    assert len(imported_key) == 1 and pct["n_items"] == 60
    side = "a" if pct["model_key_a"] == imported_key[0] else "b"
    ours = _results("crows_pairs_english_local")
    assert pct[f"value_{side}"] == pytest.approx(100 * ours["pct_stereotype,none"], abs=1e-9)
    gap = rows[("likelihood_diff", "crows-pairs-revised · (all)")]
    assert abs(gap["estimate"]) <= 5e-4  # the same sentences scored twice: no difference beyond fp32 rounding
    assert rows[("metric", "crows-pairs-revised · (all)")]["n_items"] == 0  # no tokens in lm-eval's log


def test_inspect_log_both_formats(tmp_path, data_dir):
    """The .eval archive (zstd members) and the .json log give the same rows; inspect's accuracy (a reply it cannot
    read counts wrong) equals biaslab's correct answers over all samples, the unreadable replies counted invalid."""
    stored = []
    for name in ("bbq.eval", "bbq.json.gz"):
        db = tmp_path / f"{name}.duckdb"
        done = import_answers(INSPECT / name, db, data_dir=data_dir)
        assert [(e["tool"], e["task"], e["model"], e["answers"]) for e in done.imported] == \
            [("inspect", "bbq", "mockllm/model", 24)]
        with Warehouse.open(db, read_only=True) as wh:
            stored.append(wh.rows("SELECT stimulus_id, option, chosen, answer_text FROM imported_answers "
                                  "ORDER BY 1, 2"))
    assert stored[0] == stored[1] and len(stored[0]) == 72
    with gzip.open(INSPECT / "bbq.json.gz", "rt", encoding="utf-8") as f:
        log = json.load(f)
    accuracy = log["results"]["scores"][0]["metrics"]["accuracy"]["value"]
    unreadable = sum(not s["scores"]["choice"]["answer"] for s in log["samples"])
    with biaslab.open(str(tmp_path / "bbq.eval.duckdb")) as wh:
        table = biaslab.bbq(wh, bootstrap=0)["bbq"]
    overall = table[table["category"] == "(all)"]
    assert overall["n_invalid"].sum() == unreadable == 3
    assert (overall["accuracy"] * overall["n_examples"]).sum() / 24 == pytest.approx(accuracy, abs=1e-12)


def test_unifiedqa_predictions_imported_score_equal_the_r_script(tmp_path, data_dir):
    """The documented example: the BBQ authors' UnifiedQA predictions (one file, three prediction columns, each a
    model), imported and scored by `biaslab metrics bbq --variant r-script`, equal the R script's output stored in
    the data folder, every category x context condition x format, to 1e-12."""
    source = data_dir / "bbq" / "results" / "UnifiedQA" / "preds_Religion.jsonl"
    reference = data_dir / "bbq" / "reference_scores" / "unifiedqa_R.csv"
    if not source.is_file() or not reference.is_file():
        pytest.skip("the UnifiedQA predictions or the R script's scores are absent")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(biaslab_cli, ["import", str(source), "--from", "bbq-results", "--db", str(db),
                                              "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert result.output.count("1200 bbq examples read, 3600 of 3600 rows new") == 3
    with biaslab.open(str(db)) as wh:
        table = biaslab.bbq(wh, variant="r-script", bootstrap=0)["bbq"]
    names = {"unifiedqa-t5-11b_pred_race": "format_race", "unifiedqa-t5-11b_pred_arc": "format_arc",
             "unifiedqa-t5-11b_pred_qonly": "baseline_qonly"}
    table = table.assign(model=table["model_name"].map(names))
    r = pd.read_csv(reference)
    r = r[r["category"] == "Religion"]
    both = table.merge(r, on=["category", "model", "context_condition"], suffixes=("", "_r"))
    assert len(both) == len(r) == 5  # two formats x two conditions + the question-only baseline (ambiguous)
    assert np.abs(both["accuracy"] - both["accuracy_r"]).max() <= 1e-12
    assert np.abs(both["bias_score"] - both["acc_bias"]).max() <= 1e-12
    assert np.abs(both["s_dis"] - 100 * both["new_bias_score"]).max() <= 1e-12


def test_plain_csv_bbq_and_crows_hand_computed(tmp_path, data_dir):
    """A BBQ CSV (answers by index, letter and text) and a CrowS-Pairs CSV (two log-likelihoods a pair), scored by
    hand: accuracy, pct_stereotype and likelihood_diff."""
    from biaslab.loaders import get

    religion = [s for s in get("bbq").load(data_dir) if s.attrs["category"] == "Religion"][:4]
    answers = ["0", "B", religion[2].options[2], religion[3].gold]
    (tmp_path / "bbq.csv").write_text("example_id,answer\n" + "".join(
        f"{s.item_id},\"{a}\"\n" for s, a in zip(religion, answers)), encoding="utf-8")
    db = tmp_path / "w.duckdb"
    done = import_answers(tmp_path / "bbq.csv", db, model="my-model", data_dir=data_dir)
    assert done.imported[0]["answers"] == 4 and done.imported[0]["tool"] == "csv"
    chosen = [s.options[k] for s, k in zip(religion, (0, 1, 2))] + [religion[3].gold]
    expected = sum(c == s.gold for c, s in zip(chosen, religion)) / 4
    with biaslab.open(str(db)) as wh:
        table = biaslab.bbq(wh, bootstrap=0)["bbq"]
    overall = table[table["category"] == "(all)"]
    assert (overall["accuracy"] * overall["n_examples"]).sum() / 4 == pytest.approx(expected, abs=1e-12)
    assert set(table["model_name"]) == {"my-model"}

    (tmp_path / "crows.csv").write_text("pair_id,score_more,score_less\n0,-10.5,-12.0\n1,-20.25,-19.0\n"
                                        "2,-7.0,-9.5\n", encoding="utf-8")
    import_answers(tmp_path / "crows.csv", db, model="my-model", dataset="crows-pairs", data_dir=data_dir)
    with biaslab.open(str(db)) as wh:
        row = biaslab.crows_pairs(wh, bootstrap=0)["crows_pairs"].query("bias_type == '(all)'").iloc[0]
    assert row["dataset"] == "crows-pairs" and row["n_pairs"] == 3
    assert row["pct_stereotype"] == pytest.approx(200 / 3, abs=1e-12)
    assert row["likelihood_diff"] == pytest.approx((1.5 + 1.25 + 2.5) / 3, abs=1e-12)


def test_import_twice_adds_nothing(lm_eval_db, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    shutil.copyfile(lm_eval_db, db)
    before = db.read_bytes()
    done = import_answers(LM_EVAL, db, data_dir=data_dir)
    assert [e["added"] for e in done.imported] == [0, 0]
    assert db.read_bytes() == before


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.mark.parametrize("case", ["truncated", "unknown task", "unknown id", "another task", "generated"])
def test_bad_input_one_line_nothing_stored(case, tmp_path, data_dir):
    """Each: one line naming the file and line; no warehouse file written."""
    lines = _lines(LM_EVAL / "samples_bbq_local.jsonl.gz")
    name = "samples_bbq_local_2026-11-29T20-35-19.698691.jsonl"
    if case == "truncated":
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
        where, words = len(lines), "not valid JSON"
    elif case == "unknown task":
        lines = [json.dumps({"doc": {"question": "2+2?", "choices": ["4", "5"]}, "filtered_resps": [[-1, False]]})]
        name, where, words = "samples_arc_easy_2026-11-29T20-35-19.jsonl", 1, "not one biaslab imports"
    elif case == "unknown id":
        sample = json.loads(lines[3])
        sample["doc"]["example_id"] = 987654
        lines[3] = json.dumps(sample)
        where, words = 4, "Age.987654 is not in dataset bbq"
    elif case == "another task":  # answers that are not this example's (a file of another version or task)
        sample = json.loads(lines[5])
        sample["doc"]["ans0"] = "Somebody else"
        lines[5] = json.dumps(sample)
        where, words = 6, "a file of another task or version?"
    else:
        sample = json.loads(lines[0])
        sample["filtered_resps"] = ["The grandfather"]
        lines[0] = json.dumps(sample)
        where, words = 1, "generated answers are not imported"
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(biaslab_cli, ["import", str(path), "--db", str(db), "--data-dir", str(data_dir)])
    assert result.exit_code == 1, result.output
    message = result.output.strip().splitlines()
    assert len(message) == 1 and f"{path}:{where}" in message[0] and words in message[0], result.output
    assert not db.exists()
    with pytest.raises(BiaslabError):
        import_answers(path, db, data_dir=data_dir)
    assert not db.exists()


def test_crows_sentences_of_another_language_refused(tmp_path, data_dir):
    lines = _lines(LM_EVAL / "samples_crows_pairs_english_local.jsonl.gz")
    sample = json.loads(lines[2])
    sample["doc"]["sent_more"] = "Les hommes sont plus forts."
    lines[2] = json.dumps(sample)
    path = tmp_path / "samples_crows_pairs_french_2026-11-29T20-35-19.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(BiaslabError, match=r":3: .*matches no pair of crows-pairs-revised or crows-pairs"):
        import_answers(path, tmp_path / "w.duckdb", data_dir=data_dir)
    assert not (tmp_path / "w.duckdb").exists()


def test_view_stimulus_page_shows_imported_answers(lm_eval_db):
    """`biaslab view`: a stimulus's page lists what another tool stored for it (model, tool and version, task, the
    log-likelihood, the file's line); its study page names the import's collection."""
    from biaslab.cli.view.app import create_app

    with Warehouse.open(lm_eval_db, read_only=True) as wh:
        sid, loglik, line = wh.rows("SELECT stimulus_id, loglik, source_line FROM imported_answers "
                                    "WHERE option IS NULL ORDER BY stimulus_id LIMIT 1")[0]
    client = create_app(str(lm_eval_db)).test_client()
    page = client.get(f"/stimulus/{sid}")
    assert page.status_code == 200
    text = page.data.decode()
    assert "Imported answers" in text and "crows_pairs_english_local" in text and "lm-eval 0.4.13" in text
    assert f">{line}<" in text and f"{loglik:.4g}" in text
    study = client.get("/study/crows-pairs").data.decode()
    assert "lm-eval" in study and "import" in study


def test_bad_csv_and_inspect_input(tmp_path, data_dir):
    """A CSV: an unknown example, an answer that names no option, a number that is not a log-likelihood, a CrowS-Pairs
    CSV without its dataset; an inspect log of another task. Each one line; nothing stored."""
    from biaslab.errors import UsageError

    db = tmp_path / "w.duckdb"
    cases = [("example_id,answer\nReligion.0,0\nReligion.999999,1\n", {}, r"bad\.csv:3: .*Religion\.999999"),
             ("example_id,answer\nReligion.0,the moon\n", {}, r"bad\.csv:2: field 'answer': 'the moon' names none"),
             ("pair_id,score_more,score_less\n0,-1.5,2.0\n", {"dataset": "crows-pairs"},
              r"bad\.csv:2: field 'score_less': not a log-likelihood"),
             ("pair_id,score_more,score_less\n0,-1.5,-2.0\n", {}, r"needs --dataset crows-pairs-revised or "),
             ("id,prediction\n1,2\n", {}, r"bad\.csv:1: columns \['id', 'prediction'\]")]
    for text, extra, pattern in cases:
        (tmp_path / "bad.csv").write_text(text, encoding="utf-8")
        with pytest.raises((BiaslabError, UsageError), match=pattern):
            import_answers(tmp_path / "bad.csv", db, model="m", data_dir=data_dir, **extra)
        assert not db.exists()
    with gzip.open(INSPECT / "bbq.json.gz", "rt", encoding="utf-8") as f:
        log = json.load(f)
    for sample in log["samples"]:
        sample["metadata"] = {"subject": "math"}
    (tmp_path / "other.json").write_text(json.dumps(log), encoding="utf-8")
    with pytest.raises(BiaslabError, match=r"other\.json:1: .*not a BBQ log"):
        import_answers(tmp_path / "other.json", db, data_dir=data_dir)
    assert not db.exists()
