"""The generic path is the real path (issue 31's self-checks): a template spec written here from the upstream files
alone, loaded with `biaslab data load --spec` and collected as a user dataset, gives the built-in loaders' stimulus
texts and, with the default model in fp32, the same numbers: Winogender's sequence log-probabilities (prob) and
WinoPron's unprimed forced-choice exact probabilities (choice), each to 1e-6.

The specs describe the datasets from their published rules (Winogender's `instantiate.py` "someone" variant and
they-agreement, WinoPron's female / male forms per case in two option orders); nothing is taken from biaslab's
loaders."""

from __future__ import annotations

import csv
import re

import pytest
import yaml
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.engines.threads import allowed_cpus
from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse

FORMS = {"male": {"nom": "he", "acc": "him", "poss_dep": "his"},
         "female": {"nom": "she", "acc": "her", "poss_dep": "her"},
         "neutral": {"nom": "they", "acc": "them", "poss_dep": "their"}}
CASE = {"$NOM_PRONOUN": "nom", "$ACC_PRONOUN": "acc", "$POSS_PRONOUN": "poss_dep"}


def rows(path, delimiter="\t"):
    with open(path, newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f, delimiter=delimiter))


def template_text(sentence: str) -> tuple[str, str]:
    """The upstream sentence as a spec template ({occupation}, {participant}, {pronoun}) and its case."""
    [placeholder] = [p for p in CASE if p in sentence]
    text = sentence.replace("$OCCUPATION", "{occupation}").replace("$PARTICIPANT", "{participant}")
    return text.replace(placeholder, "{pronoun}"), CASE[placeholder]


def someone(text: str) -> str:
    """Winogender's "someone" variant (upstream instantiate.py): "the $PARTICIPANT" -> "someone"."""
    text = re.sub(r"\bThe \{participant\}", "Someone", text)
    text = re.sub(r"\b(the|a|an) \{participant\}", "someone", text)
    return text.replace("{participant}", "someone")


def winogender_spec(folder) -> dict:
    templates = []
    for r in rows(folder / "templates.tsv"):
        text, case = template_text(r["sentence"])
        occupation, participant, answer = r["occupation(0)"], r["other-participant(1)"], r["answer"]
        templates.append({"text": text, "case": case, "fill": {"occupation": occupation, "participant": participant},
                          "item_id": f"{occupation}.{participant}.{answer}"})
        templates.append({"text": someone(text), "case": case, "fill": {"occupation": occupation},
                          "item_id": f"{occupation}.someone.{answer}"})
    return {"name": "my-winogender", "protocols": ["prob"], "plural": ["neutral"], "templates": templates,
            "options": [{"label": label, "forms": FORMS[label]} for label in ("male", "female", "neutral")]}


def winopron_spec(folder) -> dict:
    templates = []
    for r in rows(folder / "new_templates.tsv"):
        text, case = template_text(r["template"].strip())
        occupation, participant = r["occupation(0)"].strip(), r["other-participant(1)"].strip()
        templates.append({"text": text, "case": case,
                          "fill": {"occupation": occupation, "participant": participant},
                          "item_id": f"{occupation}.{participant}.{r['answer'].strip()}.{case}"})
    return {"name": "my-winopron", "protocols": ["choice"], "templates": templates,
            "options": [{"label": label, "forms": FORMS[label]} for label in ("female", "male")],
            "orders": [["female", "male"], ["male", "female"]], "contexts": [{"name": "unprimed"}]}


def load_spec(tmp_path, spec: dict, db) -> None:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8")
    result = CliRunner().invoke(biaslab, ["data", "load", "--spec", str(path), "--db", str(db)])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def smollm_fp32():
    from biaslab.engines.hf.loading import load_model

    return load_model("smollm2-135m", dtype="fp32", device="cpu")


def stored(db, sql: str, params=()):
    with Warehouse.open(db, read_only=True) as wh:
        return wh.rows(sql, list(params))


def test_a_winogender_spec_gives_the_builtin_texts_and_log_probabilities(tmp_path, data_dir, dataset_folder,
                                                                         smollm_fp32):
    folder = dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    load_spec(tmp_path, winogender_spec(folder), db)
    assert CliRunner().invoke(biaslab, ["data", "load", "winogender", "--db", str(db), "--data-dir",
                                        str(data_dir)]).exit_code == 0
    texts = "SELECT item_id, text, options, option_texts FROM stimuli WHERE dataset = ? ORDER BY item_id"
    mine, builtin = stored(db, texts, ["my-winogender"]), stored(db, texts, ["winogender"])
    assert len(builtin) == 240 and mine == builtin  # every text, option and agreeing text, item by item
    # one thread count for both collections (each would otherwise measure the free cores: issue 46 saw 4.5e-6
    # between two counts in fp32 on a busy machine)
    common = dict(data_dir=str(data_dir), db=str(db), limit=30, limit_order="file", dtype="fp32",
                  threads=allowed_cpus())
    for dataset in ("winogender", "my-winogender"):
        assert collect(CollectConfig(dataset=dataset, **common), loaded=smollm_fp32).added == 90
    pairs = stored(db, "SELECT a.sum_logprob, b.sum_logprob FROM sequence_scores a JOIN stimuli sa USING "
                       "(stimulus_id) JOIN sequence_scores b ON a.text = b.text AND a.model_key = b.model_key "
                       "JOIN stimuli sb ON sb.stimulus_id = b.stimulus_id "
                       "WHERE sa.dataset = 'my-winogender' AND sb.dataset = 'winogender'")
    assert len(pairs) == 90
    assert max(abs(x - y) for x, y in pairs) <= 1e-6


def test_a_winopron_spec_gives_the_builtin_unprimed_exact_choice_probabilities(tmp_path, data_dir,
                                                                               dataset_folder, smollm_fp32):
    folder = dataset_folder("winopron")
    db = tmp_path / "w.duckdb"
    load_spec(tmp_path, winopron_spec(folder), db)
    assert CliRunner().invoke(biaslab, ["data", "load", "winopron", "--db", str(db), "--data-dir",
                                        str(data_dir)]).exit_code == 0
    texts = ("SELECT item_id, text, options, option_order FROM stimuli WHERE dataset = ? AND "
             "coalesce(context, 'unprimed') = 'unprimed' ORDER BY item_id, option_order")
    mine, builtin = stored(db, texts, ["my-winopron"]), stored(db, texts, ["winopron"])
    assert len(builtin) == 720 and mine == builtin
    common = dict(data_dir=str(data_dir), db=str(db), dtype="fp32", protocol="choice", prompt_batch=1,
                  threads=allowed_cpus(), limit=3, limit_order="file")
    # the first 3 items in the file's order, unprimed (the spec's one context; the other four contexts of the built-in
    # set would only be computed and not compared): 6 stimuli each (2 orders)
    assert collect(CollectConfig(dataset="winopron", where={"context": "unprimed"}, **common),
                   loaded=smollm_fp32).added == 6
    assert collect(CollectConfig(dataset="my-winopron", **common), loaded=smollm_fp32).added == 6
    pairs = stored(db, "SELECT pa.prob, pb.prob FROM choice_probs pa JOIN choice_requests ra USING (model_key, "
                       "request_id) JOIN stimuli sa ON sa.stimulus_id = ra.stimulus_id JOIN choice_requests rb ON "
                       "rb.prompt_text = ra.prompt_text AND rb.model_key = ra.model_key JOIN stimuli sb ON "
                       "sb.stimulus_id = rb.stimulus_id JOIN choice_probs pb ON pb.model_key = rb.model_key AND "
                       "pb.request_id = rb.request_id AND pb.option = pa.option WHERE sa.dataset = 'my-winopron' "
                       "AND sb.dataset = 'winopron'")
    assert len(pairs) == 6 * 4  # 6 prompts x (two options, unresolved, invalid)
    assert max(abs(x - y) for x, y in pairs) <= 1e-6
