"""Forced choice among more than two options (issue 44, item 1), collected end to end as a user would: a spec of
she / he / they, loaded with `biaslab data load --spec` and collected in exact mode with the default model in fp32.

- The prompt lists the three options in the stimulus's order ("[she, he, they]"), through the built-in prompt's
  numbered list; a stimulus with two options renders as before (`tests/runners/test_prompt_options.py`).
- Every prompt's outcomes (each option, unresolved, invalid) sum to 1 to 1e-12.
- The stored exact probabilities equal a brute-force enumeration with Hugging Face's own warpers, one full forward
  per token path (`hf_explore.brute_force`: no cache, no trie, no pruning), to 1e-5 (fp32 rounding of the cached
  walk against full forwards over 30 layers: measured 3.3e-7 at these settings, 1.5e-6 at top_k 40).
- Seeded samples (`runners collect --mode sample`, the same settings) fall inside the 99% binomial interval of the
  exact probability for every outcome on at least 95% of the prompts.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import yaml
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.engines.models import stop_token_ids
from biaslab.engines.threads import allowed_cpus
from biaslab.runners.answers import AnswerParser
from biaslab.runners.collect import CollectConfig, collect
from biaslab.runners.trie import INVALID, UNRESOLVED
from biaslab.warehouse import Warehouse
from hf_explore import brute_force, prompts_inside_99_percent

OCCUPATIONS = ["nurse", "secretary", "teacher", "baker", "writer", "doctor", "chef", "pilot", "engineer", "plumber"]
SPEC = {
    "name": "three",
    "protocols": ["choice"],
    "options": [{"label": "female", "forms": {"nom": "she"}}, {"label": "male", "forms": {"nom": "he"}},
                {"label": "neutral", "forms": {"nom": "they"}}],
    "plural": ["neutral"],
    "orders": [["female", "male", "neutral"], ["neutral", "female", "male"]],
    "fillers": {"occupation": OCCUPATIONS},
    "templates": [{"id": "late", "text": "The {occupation} called to say that {pronoun} {was|were} late.",
                   "case": "nom", "gold": "neutral"}],  # a gold option, so calibration is computed over three
}
#: the paper's temperature and token limit; top_k 10 rather than 40 keeps the brute force to ~8 full forwards a
#: prompt (~2 s in fp32 on 2 cores; 138 forwards, 39 s, at top_k 40)
SETTINGS = dict(temperature=0.5, top_k=10, max_new_tokens=6)
SAMPLES = 200


@pytest.fixture(scope="module")
def smollm_fp32():
    from biaslab.engines.hf.loading import load_model

    return load_model("smollm2-135m", dtype="fp32", device="cpu")


@pytest.fixture(scope="module")
def collected(tmp_path_factory, smollm_fp32):
    folder = tmp_path_factory.mktemp("three")
    spec, db = folder / "three.yaml", folder / "w.duckdb"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False), encoding="utf-8")
    result = CliRunner().invoke(biaslab, ["data", "load", "--spec", str(spec), "--db", str(db)])
    assert result.exit_code == 0, result.output
    common = dict(dataset="three", db=str(db), dtype="fp32", protocol="choice", threads=allowed_cpus(), **SETTINGS)
    assert collect(CollectConfig(**common), loaded=smollm_fp32).added == 20
    assert collect(CollectConfig(mode="sample", samples=SAMPLES, seed=0, **common),
                   loaded=smollm_fp32).added == 20 * SAMPLES
    with Warehouse.open(db, read_only=True) as wh:
        requests = wh.rows("SELECT r.request_id, r.prompt_text, s.options FROM choice_requests r JOIN stimuli s "
                           "USING (stimulus_id) WHERE r.mode = 'exact' ORDER BY r.prompt_text")
        probs = wh.rows("SELECT request_id, option, prob FROM choice_probs")
        samples = wh.rows("SELECT s.stimulus_id, s.answer, s.valid FROM samples s")
        exact_stimulus = dict(wh.rows("SELECT request_id, stimulus_id FROM choice_requests WHERE mode = 'exact'"))
    exact: dict[str, dict[str, float]] = {}
    for rid, option, p in probs:
        exact.setdefault(rid, {})[option] = p
    drawn: dict[str, Counter] = {}
    for stimulus_id, answer, valid in samples:
        drawn.setdefault(stimulus_id, Counter())[answer if valid else INVALID] += 1
    return requests, exact, {rid: drawn[sid] for rid, sid in exact_stimulus.items()}, db


def test_the_prompt_lists_the_three_options_in_the_stimulus_order(collected):
    requests, _, _, _ = collected
    assert len(requests) == 20
    for _, prompt_text, options in requests:
        assert f"Replace BLANK with one of the options: [{', '.join(options)}]." in prompt_text
    assert {tuple(o) for _, _, o in requests} == {("she", "he", "they"), ("they", "she", "he")}
    assert any("BLANK was/were late" in text for _, text, _ in requests)


def test_the_outcomes_of_every_prompt_sum_to_one(collected):
    requests, exact, _, _ = collected
    for rid, _, options in requests:
        outcomes = exact[rid]
        assert set(outcomes) == {*options, UNRESOLVED, INVALID}
        assert all(0.0 <= p <= 1.0 for p in outcomes.values())
        assert abs(math.fsum(outcomes.values()) - 1.0) <= 1e-12
        assert math.fsum(outcomes[o] for o in options) + outcomes[UNRESOLVED] <= 1.0 + 1e-12
    valid = [math.fsum(exact[rid][o] for o in options) for rid, _, options in requests]
    assert min(valid) > 0.01  # the options carry real mass: the checks below are not about an all-invalid model
    assert sum(exact[rid]["they"] > 0.01 for rid, _, _ in requests) >= 10  # the third option is chosen


def test_exact_probabilities_equal_brute_force_enumeration(collected, smollm_fp32):
    requests, exact, _, _ = collected
    model, tok = smollm_fp32.model, smollm_fp32.tokenizer
    stops = stop_token_ids(getattr(model, "generation_config", None), tok)
    for rid, prompt_text, options in requests[:4]:
        prompt = tok(prompt_text, add_special_tokens=False)["input_ids"]
        reference = brute_force(model, tok, prompt, AnswerParser(tuple(options)), SETTINGS["temperature"],
                                SETTINGS["top_k"], SETTINGS["max_new_tokens"], stops)
        for outcome, value in reference.items():  # fp32: cached walk vs full forwards
            assert exact[rid][outcome] == pytest.approx(value, abs=1e-5), (prompt_text, outcome)
        assert exact[rid][UNRESOLVED] <= 1e-6


def test_seeded_samples_fall_inside_the_exact_probabilities_99_percent_interval(collected):
    requests, exact, drawn, _ = collected
    agree = prompts_inside_99_percent(requests, exact, drawn, SAMPLES)
    assert agree >= math.ceil(0.95 * len(requests))


def _hand(db):
    """Per exact request: the stimulus's item, its options' labels and p renormalized over the three options, from
    the base tables (`choice_probs`, `choice_requests`, `stimuli`), not from the `option_probs` view."""
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT s.item_id, s.options, s.option_labels, p.option, p.prob FROM choice_probs p JOIN "
                       "choice_requests r USING (model_key, request_id) JOIN stimuli s USING (stimulus_id) "
                       "WHERE r.mode = 'exact' ORDER BY ALL")
    per: dict[tuple, dict[str, float]] = {}
    for item, options, labels, option, prob in rows:
        if option in options:
            per.setdefault((item, tuple(options)), {})[labels[list(options).index(option)]] = prob
    out = []
    for (item, _), probs in per.items():
        total = math.fsum(probs.values())
        out.append((item, {label: p / total for label, p in probs.items()}))
    return out


def test_metrics_report_and_compare_handle_three_options(collected, tmp_path):
    import numpy as np

    _, _, _, db = collected
    result = CliRunner().invoke(biaslab, ["metrics", "options", "--dataset", "three", "--db", str(db), "--format",
                                          "json", "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    tables = yaml.safe_load(result.output)
    hand = _hand(db)
    exact = [r for r in tables["means"] if r["method"] == "choice-exact"]
    assert sorted(r["option_label"] for r in exact) == ["female", "male", "neutral"]
    for row in exact:
        per_item: dict[str, list[float]] = {}
        for item, probs in hand:
            per_item.setdefault(item, []).append(probs[row["option_label"]])
        assert row["items"] == len(per_item) == 10
        assert row["mean_p"] == pytest.approx(np.mean([np.mean(v) for v in per_item.values()]), abs=1e-12)
    assert math.fsum(r["mean_p"] for r in exact) == pytest.approx(1.0, abs=1e-12)
    [calibration] = [r for r in tables["calibration"] if r["method"] == "choice-exact"]
    brier = [math.fsum((p - (label == "neutral")) ** 2 for label, p in probs.items()) for _, probs in hand]
    accuracy = [max(probs, key=probs.get) == "neutral" for _, probs in hand]
    assert calibration["brier"] == pytest.approx(np.mean(brier), abs=1e-12)
    assert calibration["accuracy"] == pytest.approx(np.mean(accuracy), abs=1e-12)
    report = CliRunner().invoke(biaslab, ["report", "options", "--dataset", "three", "--db", str(db), "--out",
                                          str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert all(label in page for label in ("female", "male", "neutral"))
    compare = CliRunner().invoke(biaslab, ["compare", "options", "--dataset", "three", "--db", str(db), "--format",
                                           "json"])
    assert compare.exit_code == 0, compare.output
    groups = {r["group"] for r in yaml.safe_load(compare.output) if r["measure"] == "p"}
    assert groups == {"all · female", "all · male", "all · neutral"}
