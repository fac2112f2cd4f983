"""Identity hashes pinned to literal values (docs/design.md section 3).

Stored evidence is found again only through `stimulus_id`, `request_id` and `model_key`. A change to how any of
them is serialized (a new Stimulus field, a renamed parameter, another JSON layout, a new protocol version string)
would orphan every stored result silently. These literals make such a change fail here first; changing one needs a
migration of stored keys and a release note.
"""

from __future__ import annotations

import pytest

from biaslab import loaders
from biaslab.schema import SeenStimulus, Stimulus, request_id
from biaslab.schema.records import ModelSpec


def _slot_stimulus() -> Stimulus:
    return Stimulus(dataset="winogender", upstream_version="v1", item_id="t1",
                    text="The nurse said that BLANK was tired.", slot="BLANK", options=("he", "she", "they"),
                    option_labels=("male", "female", "neutral"), gold="she", pronoun_set="she",
                    grammatical_case="nom", attrs={"k": 1})


def test_stimulus_ids():
    assert _slot_stimulus().stimulus_id == "57b62915f934ea23"
    sentence = Stimulus(dataset="negation-examples", upstream_version="v1", item_id="n1",
                        text="The junkie is not sneaky.")
    assert sentence.stimulus_id == "aab0aacd5791fdb6"


def test_user_stimulus_ids_leave_out_the_attributes():
    """A user stimulus (`SeenStimulus`, issue 44) hashes its attributes as absent: the id of the same fields without
    them, pinned; with no attributes it is the `Stimulus` id, so every stored user stimulus without attributes and
    every built-in id keep theirs."""
    fields = _slot_stimulus().model_dump(exclude={"attrs"})
    assert SeenStimulus(**fields, attrs={"k": 1, "rating": 0.3}).stimulus_id == "d17c9f210b1b2079"
    assert SeenStimulus(**{**fields, "stereotype_rating": 4.5}).stimulus_id == "d17c9f210b1b2079"
    assert Stimulus(**fields).stimulus_id == "d17c9f210b1b2079"
    assert SeenStimulus(**fields, attrs={"k": 1}).content_id == _slot_stimulus().stimulus_id == "57b62915f934ea23"


def test_model_keys():
    spec = dict(name="x", source="/models/x", revision="abc", kind="causal", quant="none",
                tokenizer="/models/x#0123456789abcdef", bos_policy="prepend")
    assert ModelSpec(**spec, dtype="fp32").model_key == "2507a7b8de83924e"
    assert ModelSpec(**spec, dtype="bf16").model_key == "71968be6d549bbca"
    # name not keyed
    assert ModelSpec(**{**spec, "name": "another alias"}, dtype="fp32").model_key == "2507a7b8de83924e"


def test_request_ids_of_every_protocol():
    from biaslab.runners.protocols.gen import GEN_VERSION
    from biaslab.runners.protocols.prob import SCORING_VERSION, score_requests

    assert (SCORING_VERSION, GEN_VERSION) == ("score-v1", "gen-v1")
    s = _slot_stimulus()
    assert [r.request_id for r in score_requests([s], "prob", "causal")] == [
        "7de83cddf7189a5b", "8169460888c67437", "a6b4600666549941"]
    choice = {"mode": "exact", "max_new_tokens": 6, "k_store": 64, "temperature": 0.5, "top_k": 40,
              "adaptation": "none"}
    assert request_id(s.stimulus_id, "choice", choice, "forced_choice_v1") == "f8c6c69d18c8d7f1"
    gen = {"context": "pre", "max_new_tokens": 50, "min_new_tokens": 50}
    assert request_id(s.stimulus_id, "gen", gen, GEN_VERSION) == "3fb7d6019a30eadd"


@pytest.mark.parametrize("dataset, count, first_two", [
    ("winogender", 240, [("accountant.someone.0", "d4360769313cee05"), ("accountant.someone.1", "c6f5bb44dc43dc71")]),
    ("winopron", 3600, [("accountant.taxpayer.0.acc", "1d3ef87a4da232cd"),
                        ("accountant.taxpayer.0.acc", "261fa493910f7803")]),
    ("ruff", 7200, [("accountant.taxpayer.acc.eo0.he", "4469e20c5516ba47"),
                    ("accountant.taxpayer.acc.eo0.she", "e25fc53326b42084")]),
])
def test_stimulus_ids_of_the_pinned_upstream_files(dataset, count, first_two, data_dir, dataset_folder):
    info = loaders.get(dataset)
    if not info.path(data_dir).is_dir():
        pytest.skip(f"dataset folder {info.path(data_dir)} is absent")
    stimuli = sorted(info.load(data_dir), key=lambda s: (s.item_id, s.stimulus_id))
    assert len(stimuli) == count
    assert [(s.item_id, s.stimulus_id) for s in stimuli[:2]] == first_two
