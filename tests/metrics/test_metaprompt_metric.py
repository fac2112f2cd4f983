"""`biaslab metrics metaprompt`: accuracy per question from stored meta evidence, against a hand computation.

The evidence is written directly (known probabilities and samples) for real WinoPron stimuli; the gold answers are
worked out here from the raw template and the upstream answer, not with `gold_option`.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from biaslab.cli.main import biaslab as cli
from biaslab.metrics.metaprompt.tables import metaprompt_tables
from biaslab.lexicon.metaprompt import QUESTIONS, question_options
from biaslab.warehouse import Warehouse


def _h(wh):
    """A reading handle over `wh` (a `biaslab.open` handle, or an open Warehouse)."""
    from biaslab.warehouse.handle import WarehouseHandle

    return wh if isinstance(wh, WarehouseHandle) else WarehouseHandle.on(wh)


def _stimuli(data_dir, dataset_folder):
    from biaslab import loaders

    dataset_folder("winopron")
    stimuli = loaders.get("winopron").load_verified(data_dir).stimuli
    # chemist/visitor: "chemist" occurs inside "chemistry" too; plus two templates with either answer and order
    chosen = [s for s in stimuli if s.occupation == "chemist" and s.context in ("unprimed", "primed_f")]
    chosen += [s for s in stimuli if s.item_id.startswith("technician.customer.") and s.context == "null_1"]
    assert len(chosen) >= 8
    return chosen


def _gold_by_hand(question, s):
    if question == "part_of_speech":
        return "pronoun"
    if question == "anaphora":
        return s.occupation if s.attrs["answer"] == 0 else s.participant
    first_occupation = s.template.find("$OCCUPATION") < s.template.find("$PARTICIPANT")
    return s.occupation if first_occupation else s.participant


def _write(wh, stimuli, rng, mode):
    """Meta requests for every (stimulus, question) with random probabilities (exact) or answers (sample); returns
    question -> list of (p_gold, p_valid) per request, computed here."""
    wh.append("stimuli", [s.to_row() for s in stimuli])
    expected = {q: [] for q in QUESTIONS}
    for i, s in enumerate(stimuli):
        for q in QUESTIONS:
            rid = f"{mode}-{i}-{q}"
            options = list(question_options(q, s))
            request = {"model_key": "m", "request_id": rid, "stimulus_id": s.stimulus_id, "protocol": "meta",
                       "mode": mode, "prompt_version": f"metaprompt-v1:{q}", "adaptation": "none",
                       "prompt_text": "p", "options": options, "max_new_tokens": 8,
                       "k_store": 64 if mode == "exact" else None}
            gold = _gold_by_hand(q, s)
            if mode == "exact":
                p = rng.dirichlet([1.0, 1.0, 1.0, 0.3])  # option 1, option 2, invalid, unresolved
                probs = dict(zip([*options, "invalid", "unresolved"], p))
                wh.append_with_children("choice_requests", [request], {"choice_probs": [
                    {"model_key": "m", "request_id": rid, "option": o, "temperature": 0.5, "top_k": 40, "top_p": 1.0,
                     "prob": float(v)} for o, v in probs.items()]})
                expected[q].append((probs[gold], probs[options[0]] + probs[options[1]]))
            else:
                answers = rng.choice([*options, "nonsense"], size=7, p=[0.5, 0.3, 0.2])
                wh.append("choice_requests", [request])
                wh.append("samples", [{
                    "model_key": "m", "request_id": rid, "sample_index": j, "seed": j, "temperature": 1.0, "top_k": 50,
                    "top_p": 1.0, "max_new_tokens": 8, "stimulus_id": s.stimulus_id, "text": str(a), "token_ids": [],
                    "token_logprobs": [], "finish_reason": "stop", "answer": str(a), "valid": a != "nonsense"}
                    for j, a in enumerate(answers)])
                expected[q].append((np.mean(answers == gold), np.mean(answers != "nonsense")))
    return expected


@pytest.mark.parametrize("mode", ["exact", "sample"])
def test_accuracy_equals_a_hand_computation(tmp_path, data_dir, dataset_folder, mode):
    stimuli = _stimuli(data_dir, dataset_folder)
    rng = np.random.default_rng(3)
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        expected = _write(wh, stimuli, rng, mode)
        table = metaprompt_tables(_h(wh))["metaprompt"]
    assert list(table["question"]) == list(QUESTIONS) and set(table["mode"]) == {mode}
    for q in QUESTIONS:
        row = table[table["question"] == q].iloc[0]
        gold = np.array([g for g, _ in expected[q]])
        valid = np.array([v for _, v in expected[q]])
        assert row["prompts"] == len(stimuli)
        assert row["accuracy"] == pytest.approx(gold.mean(), abs=1e-12)
        assert row["accuracy_se"] == pytest.approx(stats.sem(gold), abs=1e-12)
        assert row["valid_mass"] == pytest.approx(valid.mean(), abs=1e-12)
        assert row["accuracy_if_valid"] == pytest.approx(gold.sum() / valid.sum(), abs=1e-12)
        if mode == "sample":
            assert row["samples"] == 7 * len(stimuli)
    # the tracking gold of chemist/visitor templates is not misled by "chemistry"
    chem = [s for s in stimuli if s.occupation == "chemist"]
    assert {_gold_by_hand("tracking", s) for s in chem} <= {"chemist", "visitor"}


def test_by_context_and_the_command(tmp_path, data_dir, dataset_folder):
    stimuli = _stimuli(data_dir, dataset_folder)
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        expected = _write(wh, stimuli, np.random.default_rng(5), "exact")
        by_context = metaprompt_tables(_h(wh))["metaprompt_by_context"]
    contexts = [s.context for s in stimuli]
    for q in QUESTIONS:
        for context in set(contexts):
            got = by_context[(by_context["question"] == q) & (by_context["context"] == context)].iloc[0]
            want = [g for (g, _), c in zip(expected[q], contexts) if c == context]
            assert got["prompts"] == len(want) and got["accuracy"] == pytest.approx(np.mean(want), abs=1e-12)
    result = CliRunner().invoke(cli, ["metrics", "metaprompt", "--db", str(tmp_path / "w.duckdb"),
                                          "--format", "csv", "--no-by-context"])
    assert result.exit_code == 0, result.output
    assert "# metaprompt\n" in result.output and "metaprompt_by_context" not in result.output
    assert "model_name" in result.output.splitlines()[1]


def test_command_without_evidence_says_so(tmp_path):
    with Warehouse.open(tmp_path / "empty.duckdb"):
        pass
    result = CliRunner().invoke(cli, ["metrics", "metaprompt", "--db", str(tmp_path / "empty.duckdb")])
    assert result.exit_code != 0 and "no metaprompt evidence" in result.output


def test_coverage_of_the_accuracies(tmp_path, data_dir, dataset_folder):
    """Issue 43, item 2: each accuracy says how many loaded prompts it rests on; the valid mass marks it."""
    import biaslab

    stimuli = _stimuli(data_dir, dataset_folder)
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        expected = _write(wh, stimuli, np.random.default_rng(3), "exact")
        loaded = wh.rows("SELECT count(*) FROM stimuli WHERE dataset = 'winopron'")[0][0]
    with biaslab.open(tmp_path / "w.duckdb") as handle:
        table = biaslab.metaprompt(handle, min_coverage=0.5)["metaprompt"]
    for q in QUESTIONS:
        row = table[table["question"] == q].iloc[0]
        valid = np.array([v for _, v in expected[q]])
        assert (row["n_loaded"], row["n_used"]) == (loaded, len(stimuli))
        assert row["coverage"] == pytest.approx(len(stimuli) / loaded)
        assert row["valid_share"] == pytest.approx(valid.mean())
        assert bool(row["low_coverage"]) == (len(stimuli) / loaded < 0.5 or valid.mean() < 0.5)
