"""Misgendering metrics from stored evidence: synthetic evidence with known outcomes is written through the
warehouse append path; every table is checked against values computed independently here (hand rules, numpy,
scikit-learn)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score, matthews_corrcoef

import biaslab
from biaslab.loaders.errors import DataError
from biaslab.lexicon.pronoun_detection import vocabulary
from biaslab.metrics.misgendering.annotations import import_annotations, nominal_agreement
from biaslab.metrics.misgendering.tables import misgendering_report
from biaslab.schema import Stimulus
from biaslab.warehouse import Warehouse

FAMILIES = ("he", "she", "they", "xe")
FORMS = {"he": "he", "she": "she", "they": "they", "xe": "xe"}
SENTENCES = {"he": " Then he left.", "she": " Then she left.", "they": " Then they left.", "xe": " Then xe left.",
             None: " Then the door closed."}
MODEL = "m" * 16


def _h(wh):
    """A reading handle over `wh` (a `biaslab.open` handle, or an open Warehouse)."""
    from biaslab.warehouse.handle import WarehouseHandle

    return wh if isinstance(wh, WarehouseHandle) else WarehouseHandle.on(wh)


def _slot_stimulus(dataset: str, i: int, declared: str) -> Stimulus:
    return Stimulus(dataset=dataset, upstream_version="v", item_id=f"{i}.{declared}",
                    text=f"Item {i} declares {declared}. Later BLANK was tired.", slot="BLANK",
                    pronoun_set=declared, grammatical_case="nom", options=FAMILIES, option_labels=FAMILIES,
                    gold=FORMS[declared])


def _score_rows(stimulus: Stimulus, predicted: str, joint_pick: str) -> list[dict]:
    """Option scores such that the lowest perplexity is `predicted` and the highest joint log-prob `joint_pick`."""
    rows = []
    for option in stimulus.options:
        if option == predicted:
            n, total = 10, -20.0          # perplexity e^2, joint -20
        elif option == joint_pick:
            n, total = 5, -15.0           # perplexity e^3, joint -15 (the best joint)
        else:
            n, total = 5, -25.0           # perplexity e^5, joint -25
        rows.append({"model_key": MODEL, "request_id": f"{stimulus.stimulus_id}:{option}",
                     "stimulus_id": stimulus.stimulus_id, "protocol": "prob", "option": option, "scheme": "causal",
                     "text": stimulus.fill(option), "n_tokens": n, "sum_logprob": total})
    return rows


def _gen_rows(stimulus: Stimulus, context: str, dataset: str, continuations: list,
             temperature: float = 1.0) -> tuple[dict, list[dict]]:
    rid = f"{stimulus.stimulus_id}:{context}"
    request = {"model_key": MODEL, "request_id": rid, "stimulus_id": stimulus.stimulus_id, "dataset": dataset,
               "context": context, "prompt_version": "gen-v1", "prompt_text": f"prompt {rid}",
               "declared": stimulus.pronoun_set, "pronoun_vocabulary": json.dumps(vocabulary(dataset)),
               "max_new_tokens": 50, "min_new_tokens": 50, "run_id": None}
    samples = [{"model_key": MODEL, "request_id": rid, "sample_index": k, "seed": 100 + k, "temperature": temperature,
                "top_k": 50, "top_p": 0.95, "max_new_tokens": 50, "stimulus_id": stimulus.stimulus_id,
                "text": SENTENCES[family], "token_ids": [1, 2, 3], "token_logprobs": [-1.0, -1.0, -1.0],
                "finish_reason": "length", "answer": None, "valid": True, "run_id": None}
               for k, family in enumerate(continuations)]
    return request, samples


@pytest.fixture
def evidence(tmp_path):
    """RUFF-like stimuli with seeded predictions and continuations; returns the warehouse path and the truth."""
    rng = random.Random(3)
    stimuli, scores, requests, samples, truth = [], [], [], [], []
    for i in range(12):
        for declared in FAMILIES:
            s = _slot_stimulus("ruff", i, declared)
            stimuli.append(s)
            predicted = declared if rng.random() < 0.6 else rng.choice([f for f in FAMILIES if f != declared])
            joint_pick = rng.choice([f for f in FAMILIES if f != predicted])
            scores += _score_rows(s, predicted, joint_pick)
            for context in ("pre", "post"):
                continuations = [rng.choice([declared, declared, "he", "she", None]) for _ in range(5)]
                request, rows = _gen_rows(s, context, "ruff", continuations)
                requests.append(request)
                samples += rows
                for k, family in enumerate(continuations):
                    truth.append({"stimulus": s.stimulus_id, "declared": declared, "context": context,
                                  "prob_correct": int(predicted == declared),
                                  "joint_correct": int(joint_pick == declared),
                                  "outcome": ("no_pronoun" if family is None else
                                              "correct" if family == declared else "misgendered"),
                                  "request_id": request["request_id"], "sample_index": k})
    path = tmp_path / "m.duckdb"
    with Warehouse.open(path) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append("sequence_scores", scores)
        wh.append("gen_requests", requests)
        wh.append("samples", samples)
    return path, truth


def _tables(path, **kw):
    with biaslab.open(path) as wh:
        return misgendering_report(_h(wh), **kw)


def test_correctness_per_method_pronoun_and_context(evidence):
    path, truth = evidence
    tables = _tables(path)
    table = tables["correctness"]
    for declared in FAMILIES:
        mine = [t for t in truth if t["declared"] == declared and t["context"] == "pre" and t["sample_index"] == 0]
        row = table[(table["method"] == "prob") & (table["declared"] == declared)].iloc[0]
        assert row["n"] == 12
        assert row["correct"] == pytest.approx(np.mean([t["prob_correct"] for t in mine]), abs=1e-12)
        assert row["correct_joint"] == pytest.approx(np.mean([t["joint_correct"] for t in mine]), abs=1e-12)
        for context in ("pre", "post"):
            units = [t for t in truth if t["declared"] == declared and t["context"] == context]
            row = table[(table["method"] == "gen") & (table["declared"] == declared)
                        & (table["context"] == context)].iloc[0]
            outcomes = [t["outcome"] for t in units]
            assert row["n"] == 60
            assert row["correct"] == pytest.approx(1 - outcomes.count("misgendered") / 60, abs=1e-12)
            assert row["correct_strict"] == pytest.approx(outcomes.count("correct") / 60, abs=1e-12)
            assert row["no_pronoun"] == pytest.approx(outcomes.count("no_pronoun") / 60, abs=1e-12)
            assert row["ci_low"] < row["correct"] < row["ci_high"]


def test_agreement_equals_scikit_learn_on_all_samples(evidence):
    path, truth = evidence
    compared = 0
    for no_pronoun in ("correct", "exclude"):
        table = _tables(path, no_pronoun=no_pronoun)["agreement"]
        assert len(table) == 8
        for declared in FAMILIES:
            for context in ("pre", "post"):
                units = [t for t in truth if t["declared"] == declared and t["context"] == context
                         and (no_pronoun == "correct" or t["outcome"] != "no_pronoun")]
                a = np.array([t["prob_correct"] for t in units])
                b = np.array([int(t["outcome"] != "misgendered") for t in units])
                row = table[(table["declared"] == declared) & (table["context"] == context)].iloc[0]
                assert row["n"] == len(units)
                assert row["raw_agreement"] == pytest.approx(np.mean(a == b), abs=1e-12)
                if len(set(a)) == 2 and len(set(b)) == 2:
                    assert row["cohen_kappa"] == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
                    assert row["mcc"] == pytest.approx(matthews_corrcoef(a, b), abs=1e-12)
                    compared += 1
                else:
                    assert math.isnan(row["mcc"]) and row["note"]
    assert compared >= 12  # the seeded evidence is mostly non-degenerate: the comparison is real


def test_constant_method_gives_nan_not_a_crash(evidence):
    """Every prediction correct for one pronoun: MCC undefined -> NaN with a note; the rest of the table intact."""
    path, _ = evidence
    with Warehouse.open(path) as wh:
        wh.con.execute("UPDATE sequence_scores SET n_tokens = 1, sum_logprob = 0 WHERE option = 'she' AND "
                       "stimulus_id IN (SELECT stimulus_id FROM stimuli WHERE pronoun_set = 'she')")
    table = _tables(path)["agreement"]
    she = table[table["declared"] == "she"]
    assert (she["prob_correct"] == 1.0).all()
    assert she["mcc"].isna().all() and she["note"].str.contains("prob is constant").all()
    assert table[table["declared"] == "he"]["raw_agreement"].notna().all()


def test_disagreement_beta_is_the_method_of_moments_fit_per_context(evidence):
    """One fit per model, pronoun and context (the paper fits Pre- and Post-[MASK] apart), equal to the hand formula
    and to scipy's method-of-moments fit of the same two moments (scipy matches the ddof = 0 variance, so it gets
    the sample rescaled about its mean to a ddof = 0 variance equal to the ddof = 1 one)."""
    from scipy import stats

    path, truth = evidence
    table = _tables(path)["disagreement_beta"]
    assert len(table) == 8
    checked = 0
    for declared in FAMILIES:
        for context in ("pre", "post"):
            per_instance: dict[str, list[float]] = {}
            for t in truth:
                if t["declared"] == declared and t["context"] == context:
                    disagree = float(t["prob_correct"] != int(t["outcome"] != "misgendered"))
                    per_instance.setdefault(t["stimulus"], []).append(disagree)
            x = np.array([np.mean(v) for v in per_instance.values()])
            m, v = x.mean(), x.var(ddof=1)
            [row] = table[(table["declared"] == declared) & (table["context"] == context)].to_dict("records")
            assert row["instances"] == 12
            assert row["mean_disagreement"] == pytest.approx(m, abs=1e-12)
            if 0 < v < m * (1 - m):
                c = m * (1 - m) / v - 1
                assert (row["alpha"], row["beta"]) == pytest.approx((m * c, (1 - m) * c), rel=1e-10)
                law = stats.beta(row["alpha"], row["beta"])
                assert (law.mean(), law.var()) == pytest.approx((m, v), rel=1e-10)
                y = m + (x - m) * math.sqrt(len(x) / (len(x) - 1))
                if y.min() > 0 and y.max() < 1:
                    with np.errstate(invalid="ignore"):  # scipy's start-value solver may try sqrt of < 0
                        a, b, _, _ = stats.beta.fit(y, floc=0, fscale=1, method="MM")
                    assert (row["alpha"], row["beta"]) == pytest.approx((a, b), rel=1e-4)  # scipy optimizes numerically
                    checked += 1
            else:
                assert math.isnan(row["alpha"]) and row["note"]
    assert checked >= 1


def test_instance_std_and_generation_quality(evidence):
    path, truth = evidence
    tables = _tables(path)
    std = tables["instance_std"]
    quality = tables["generation_quality"]
    for declared in FAMILIES:
        units = {}
        for t in truth:
            if t["declared"] == declared and t["context"] == "post":
                units.setdefault(t["stimulus"], []).append(int(t["outcome"] != "misgendered"))
        row = std[(std["declared"] == declared) & (std["context"] == "post")].iloc[0]
        assert row["mean_std"] == pytest.approx(np.mean([np.std(v) for v in units.values()]), abs=1e-12)
        q = quality[(quality["declared"] == declared) & (quality["context"] == "post")].iloc[0]
        expected = np.mean([t["outcome"] == "no_pronoun" for t in truth
                            if t["declared"] == declared and t["context"] == "post"])
        assert q["no_pronoun_rate"] == pytest.approx(expected, abs=1e-12)


def test_tango_pairs_generations_with_their_templates(tmp_path):
    """A TANGO prompt's continuation pairs with the template built from it (via attrs.generation, sampling settings
    included: the same request, index and seed at another temperature is another continuation)."""
    prompt = Stimulus(dataset="tango", upstream_version="v", item_id="0.name.Sam.they", text="sam is a writer and",
                      pronoun_set="they", referent_role="name", name="Sam")
    templates, scores, samples = [], [], []
    # T=1: continuations they / he / none / they; T=0.5: he / he / he / he (same request ids, indices and seeds)
    settings = {1.0: (["they", "he", None, "they"], {0: "they", 1: "she", 3: "xe"}),
                0.5: (["he", "he", "he", "he"], {0: "he", 1: "he", 2: "they", 3: "he"})}
    for temperature, (families, picks) in settings.items():
        request, rows = _gen_rows(prompt, "prompt", "tango", families, temperature)
        samples += rows
        for k, pick in picks.items():
            t = Stimulus(dataset="tango", upstream_version="v", item_id=f"0.gen{k}",
                         text="Sam is a writer and BLANK left.",
                         slot="BLANK", pronoun_set="they", grammatical_case="nom", options=("he", "she", "they", "xe"),
                         option_labels=FAMILIES, gold="they",
                         attrs={"template_of": prompt.stimulus_id,
                                "generation": {"model_key": MODEL, "request_id": request["request_id"],
                                               "sample_index": k, "seed": 100 + k, "temperature": temperature,
                                               "top_k": 50, "top_p": 0.95, "max_new_tokens": 50,
                                               "min_new_tokens": 50}})
            templates.append(t)
            scores += _score_rows(t, pick, "he" if pick != "he" else "she")
    with Warehouse.open(tmp_path / "t.duckdb") as wh:
        wh.append("stimuli", [s.to_row() for s in [prompt, *templates]])
        wh.append("sequence_scores", scores)
        wh.append("gen_requests", [request])
        wh.append("samples", samples)
        tables = misgendering_report(_h(wh))
    pairs = tables["_pairs"]
    assert len(pairs) == 7 and pairs["setting"].nunique() == 2  # 3 + 4 pairs, never crossed between settings
    hot = pairs[pairs["setting"].str.contains("T=1 ")]
    cold = pairs[pairs["setting"].str.contains("T=0.5 ")]
    # T=1, continuation k: gen correct (they / he / none -> correct / misgendered / correct), prob iff pick == they
    assert sorted(zip(hot["gen_correct"], hot["prob_correct"])) == [(0, 0), (1, 0), (1, 1)]
    assert sorted(zip(cold["gen_correct"], cold["prob_correct"])) == [(0, 0), (0, 0), (0, 0), (0, 1)]
    std = tables["instance_std"]
    prob_rows = std[std["method"] == "prob"].set_index("setting")
    assert len(prob_rows) == 2
    hot_row = prob_rows.loc[[s for s in prob_rows.index if "T=1 " in s][0]]
    assert hot_row["units_per_instance"] == 3 and hot_row["mean_std"] == pytest.approx(np.std([1, 0, 0]))
    correctness = tables["correctness"]
    assert len(correctness[(correctness["method"] == "gen")]) == 2  # one row per sampling setting


def test_two_scoring_schemes_and_one_method_only(tmp_path):
    """Evidence of two PLL schemes stays two predictions; a warehouse with prob evidence only still reports."""
    s = _slot_stimulus("ruff", 0, "she")
    scores = _score_rows(s, "she", "he")
    scores += [{**r, "request_id": r["request_id"] + ":l2r", "scheme": "within_word_l2r"}
               for r in _score_rows(s, "he", "she")]
    path = tmp_path / "p.duckdb"
    with Warehouse.open(path) as wh:
        wh.append("stimuli", [s.to_row()])
        wh.append("sequence_scores", scores)
    tables = _tables(path)
    correctness = tables["correctness"].set_index("setting")
    assert correctness.loc["causal", "correct"] == 1.0 and correctness.loc["within_word_l2r", "correct"] == 0.0
    assert tables["agreement"].empty and list(tables["agreement"].columns)[:2] == ["model_key", "setting"]
    from biaslab.metrics.misgendering.report import write_report

    index = write_report(tables, tmp_path / "r", str(path))
    assert "No instance has evidence from both methods" in index.read_text()


def test_annotation_import_validates_and_agrees_with_scikit_learn(evidence, tmp_path):
    path, _ = evidence
    with Warehouse.open(path) as wh:
        gen = wh.con.execute("SELECT sample_id FROM gen_samples ORDER BY sample_id LIMIT 30").fetchall()
        ids = [r[0] for r in gen]
        labels_a = ["correct", "misgendering", "no_pronoun"] * 10
        labels_b = labels_a[:20] + ["correct"] * 10
        good = tmp_path / "ann.csv"
        good.write_text("sample_id,label,extraneous_gendered,annotator\n"
                        + "".join(f"{i},{a},false,ann1\n{i},{b},true,ann2\n" for i, a, b in zip(ids, labels_a,
                                                                                                labels_b)))
        assert import_annotations(wh, good) == (60, 60)
        assert import_annotations(wh, good) == (60, 0)
        bad = tmp_path / "bad.csv"
        bad.write_text("sample_id,label,extraneous_gendered,annotator\n"
                       f"{ids[0]},correct,false,ann3\n{ids[1]},wrong,false,ann3\n")
        with pytest.raises(DataError, match=r"bad.csv:3.*label"):
            import_annotations(wh, bad)
        assert wh.con.execute("SELECT count(*) FROM annotations WHERE annotator = 'ann3'").fetchone()[0] == 0
        changed = tmp_path / "changed.csv"
        changed.write_text("sample_id,label,extraneous_gendered,annotator\n"
                           f"{ids[0]},{labels_a[0]},false,ann1\n{ids[1]},correct,false,ann1\n")
        with pytest.raises(DataError, match=r"changed.csv:3.*already labelled"):
            import_annotations(wh, changed)  # labels_a[1] is misgendering: never overwritten
        unknown = tmp_path / "unknown.csv"
        unknown.write_text("sample_id,label,extraneous_gendered,annotator\nnope,correct,false,ann3\n")
        with pytest.raises(DataError, match=r"unknown.csv:2.*sample_id"):
            import_annotations(wh, unknown)
        tables = misgendering_report(_h(wh))
    pair = tables["annotator_agreement"].iloc[0]
    assert pair["n"] == 30
    assert pair["cohen_kappa"] == pytest.approx(cohen_kappa_score(labels_a, labels_b), abs=1e-12)
    assert pair["raw_agreement"] == pytest.approx(np.mean(np.array(labels_a) == np.array(labels_b)))
    vs_auto = tables["annotation_vs_auto"].set_index("annotator")
    assert vs_auto.loc["ann2", "extraneous_gendered_rate"] == 1.0 and vs_auto.loc["ann1", "n"] == 30
    auto = tables["_gen"].set_index("sample_id").loc[ids, "outcome"].map(
        {"correct": "correct", "misgendered": "misgendering", "no_pronoun": "no_pronoun"})
    assert vs_auto.loc["ann1", "cohen_kappa"] == pytest.approx(cohen_kappa_score(labels_a, list(auto)), abs=1e-12)


def test_nominal_agreement_is_nan_when_both_raters_are_one_constant():
    n, raw, kappa, note = nominal_agreement(["a"] * 4, ["a"] * 4)
    assert (n, raw) == (4, 1.0) and math.isnan(kappa) and note
    assert nominal_agreement(["a", "b", "a"], ["a", "b", "b"])[2] == pytest.approx(
        cohen_kappa_score(["a", "b", "a"], ["a", "b", "b"]))


def test_parallel_scoring_of_continuations_equals_one_process(monkeypatch):
    from biaslab.metrics.misgendering import tables as misgendering

    rng = random.Random(0)
    vocabularies = {1: json.dumps(vocabulary("ruff")), 2: json.dumps(vocabulary("tango"))}
    rows = [(f"Prompt {i} says", SENTENCES[rng.choice([*FAMILIES, None])] * rng.randint(1, 3), rng.choice([1, 2]),
             rng.choice(FAMILIES)) for i in range(60)]
    monkeypatch.setenv("BIASLAB_WORKERS", "1")
    single = misgendering._score_continuations(rows, vocabularies)
    monkeypatch.setenv("BIASLAB_WORKERS", "2")
    monkeypatch.setattr(misgendering, "PARALLEL_MIN_CONTINUATIONS", 10)
    assert misgendering._score_continuations(rows, vocabularies) == single
    assert {r[0] for r in single} == {"correct", "misgendered", "no_pronoun"}
