"""`runners collect --dataset winopron --protocol meta`: the comprehension questions as forced-choice prompts."""

from __future__ import annotations

import json

import numpy as np
import pytest

import biaslab
from biaslab.metrics.metaprompt.tables import metaprompt_tables
from biaslab.runners.collect import CollectConfig, collect
from biaslab.lexicon.metaprompt import QUESTIONS, gold_option, question_options
from biaslab.runners.protocols.meta import MetaPromptSpec, meta_requests
from biaslab.schema import request_id

SYSTEM = ("Below you will find a passage in *bold* which contains precisely one instance of the term BLANK, followed "
          "by a question about the passage. Your task is to answer the question with one of the options provided. "
          "The task is designed to be unambiguous, so please provide only one of the options, exactly as written. "
          "Do not repeat the sentence.")
TEXTS = {"anaphora": "In the passage, who does BLANK refer to?",
         "part_of_speech": "What part of speech is the word that should replace BLANK?",
         "tracking": "In the sentence that contains BLANK, who is mentioned first?"}


def _h(wh):
    """A reading handle over `wh` (a `biaslab.open` handle, or an open Warehouse)."""
    from biaslab.warehouse.handle import WarehouseHandle

    return wh if isinstance(wh, WarehouseHandle) else WarehouseHandle.on(wh)


#: one prompt of each template: a limit counts templates (10 prompts each)
ONE_PROMPT = {"context": "unprimed", "option_order": "MF"}


def _config(tmp_path, data_dir, **kw) -> CollectConfig:
    return CollectConfig(dataset="winopron", db=str(tmp_path / "w.duckdb"), data_dir=str(data_dir), **kw)


def _winopron(data_dir, dataset_folder):
    from biaslab import loaders

    dataset_folder("winopron")
    return loaders.get("winopron").load_verified(data_dir).stimuli


def test_questions_render_as_documented(tiny_gpt2, data_dir, dataset_folder):
    stimuli = _winopron(data_dir, dataset_folder)
    s = next(x for x in stimuli if x.item_id == "technician.customer.1.nom" and x.context == "primed_f"
             and x.option_order == "FM")
    spec = MetaPromptSpec.load()
    assert spec.questions == TEXTS and spec.system == SYSTEM
    requests = meta_requests([s], tiny_gpt2.tokenizer, spec, {"mode": "exact"})
    for q in QUESTIONS:
        (r,) = requests[q]
        options = {"part_of_speech": ("noun", "pronoun")}.get(q, ("customer", "technician"))  # FM: reversed
        assert r.options == options and r.protocol == "meta"
        # the tiny model has no chat template: "system\n\nuser\nprefill"
        assert r.prompt_text == (f"{SYSTEM}\n\nGiven this passage: *{s.prime} {s.text}* {TEXTS[q]} Answer with one "
                                 f"of the options: [{options[0]}, {options[1]}]. Respond only in the following "
                                 "format {'ANSWER': '<text>'}\n{'ANSWER':'")
    ids = {r.request_id for rs in requests.values() for r in rs}
    assert len(ids) == 3


def test_options_and_gold(data_dir, dataset_folder):
    stimuli = _winopron(data_dir, dataset_folder)
    for s in stimuli:
        mf = s.option_order == "MF"
        assert question_options("anaphora", s) == ((s.occupation, s.participant) if mf else
                                                   (s.participant, s.occupation))
        assert question_options("part_of_speech", s) == (("pronoun", "noun") if mf else ("noun", "pronoun"))
    s = next(x for x in stimuli if x.occupation == "chemist" and "chemistry" in x.text)
    # "chemist" also occurs inside "chemistry", after "visitor"; the template decides
    assert s.text.rfind("chemist") > s.text.find("visitor")
    assert gold_option("tracking", "chemist", "visitor", s.template, s.attrs["antecedent"]) == "chemist"
    assert gold_option("tracking", "x", "y", "The $PARTICIPANT saw the $OCCUPATION.", "x") == "y"
    assert gold_option("anaphora", "x", "y", "", "y") == "y"
    assert gold_option("part_of_speech", "x", "y", "", "y") == "pronoun"
    with pytest.raises(ValueError, match="neither"):
        gold_option("anaphora", "x", "y", "", "z")


def test_collect_counts_rerun_and_choice_ids_unchanged(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("winopron")
    first = collect(_config(tmp_path, data_dir, protocol="meta", limit=4, where=ONE_PROMPT), loaded=tiny_gpt2)
    assert (first.stimuli, first.requests, first.added) == (4, 12, 12)
    again = collect(_config(tmp_path, data_dir, protocol="meta", limit=4, where=ONE_PROMPT), loaded=tiny_gpt2)
    assert (again.pending, again.added) == (0, 0)
    choice = collect(_config(tmp_path, data_dir, limit=4, where=ONE_PROMPT), loaded=tiny_gpt2)
    assert choice.added == 4
    with biaslab.open(tmp_path / "w.duckdb") as wh:
        rows = wh.warehouse.con.execute("SELECT protocol, prompt_version, request_id, stimulus_id, adaptation, "
                                        "max_new_tokens FROM choice_requests").fetchall()
        runs = wh.warehouse.con.execute("SELECT count(*) FROM runs").fetchone()[0]
    meta = [r for r in rows if r[0] == "meta"]
    assert len(meta) == 12 and len({r[2] for r in meta}) == 12
    assert sorted({r[1] for r in meta}) == [f"metaprompt-v1:{q}" for q in sorted(QUESTIONS)]
    assert all(r[5] == 8 for r in meta)  # the meta protocol's own default token limit
    # the choice protocol's request ids are the documented hash, as before the meta protocol existed
    for _, version, rid, sid, adaptation, _ in [r for r in rows if r[0] == "choice"]:
        params = {"mode": "exact", "max_new_tokens": 6, "k_store": 64, "temperature": 0.5, "top_k": 40,
                  "adaptation": adaptation}
        assert version == "forced-choice-v1" and rid == request_id(sid, "choice", params, "forced-choice-v1")
    assert runs == 3


def test_a_bad_metaprompt_file_is_refused_before_loading(tmp_path, data_dir):
    from importlib import resources

    packaged = resources.files("biaslab.runners").joinpath("prompts")
    bad = json.loads(packaged.joinpath("metaprompt_v1.json").read_text("utf-8"))
    del bad["questions"]["tracking"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="'questions' must name exactly anaphora, part_of_speech, tracking"):
        _config(tmp_path, data_dir, protocol="meta", prompt=str(tmp_path / "bad.json")).validate()
    # the forced-choice prompt has no {question}: refused as a metaprompt
    (tmp_path / "fc.json").write_text(packaged.joinpath("forced_choice_v1.json").read_text("utf-8"))
    with pytest.raises(ValueError, match="lacks the placeholder \\{question\\}"):
        _config(tmp_path, data_dir, protocol="meta", prompt=str(tmp_path / "fc.json")).validate()


def test_accuracy_on_smollm2_equals_stored_probabilities(tmp_path, data_dir, dataset_folder):
    """A real model (real mass on the options): the table's accuracy is the mean stored probability of the gold
    option, with the gold worked out here from the upstream answer and the raw template."""
    dataset_folder("winopron")
    result = collect(_config(tmp_path, data_dir, protocol="meta", limit=1, where=ONE_PROMPT, dtype="fp32"))
    assert result.added == 3
    with biaslab.open(tmp_path / "w.duckdb") as wh:
        rows = wh.warehouse.con.execute("""
            SELECT r.prompt_version, c.option, c.prob, s.occupation, s.participant, s.template,
                   CAST(s.attrs->>'answer' AS INTEGER)
            FROM choice_requests r JOIN choice_probs c USING (model_key, request_id) JOIN stimuli s USING (stimulus_id)
            """).fetchall()
        table = metaprompt_tables(_h(wh))["metaprompt"].set_index("question")
    for q in QUESTIONS:
        mine = [(o, p, occ, par, tpl, ans) for v, o, p, occ, par, tpl, ans in rows if v == f"metaprompt-v1:{q}"]
        occ, par, tpl, ans = mine[0][2:]
        gold = {"part_of_speech": "pronoun", "anaphora": occ if ans == 0 else par,
                "tracking": occ if tpl.find("$OCCUPATION") < tpl.find("$PARTICIPANT") else par}[q]
        probs = {o: p for o, p, *_ in mine}
        assert table.loc[q, "accuracy"] == pytest.approx(probs[gold], abs=1e-12)
        valid = sum(p for o, p in probs.items() if o not in ("invalid", "unresolved"))
        assert table.loc[q, "valid_mass"] == pytest.approx(valid, abs=1e-12)
        assert np.isnan(table.loc[q, "accuracy_se"])  # one prompt: no standard error
    assert max(table["valid_mass"]) > 0.01  # real mass on the options
