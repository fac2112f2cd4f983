"""Issue 44, item 2: plural agreement where the spec marks the verb, `{singular|plural}` (e.g. `{was|were}`), in
template texts, primes and the choice prompt. `plural: [they]` made a prime `{pronoun:they} was tired` read "They
was tired", and the choice prompt showed "BLANK was late" beside a They option."""

from __future__ import annotations

import pytest

from biaslab.loaders.errors import DataError
from biaslab.loaders.user.dataset import from_spec

SPEC = """
name: agree
options:
  - {label: she, forms: {nom: she, acc: her, poss_dep: her}}
  - {label: %s, forms: {nom: they, acc: them, poss_dep: their}}
plural: [they]
fillers:
  occupation: [nurse, pilot]
templates:
  - {id: nom, text: "The {occupation} said that {pronoun} {was|were} late.", case: nom}
  - {id: start, text: "{pronoun} {has|have} a plan, said the {occupation}.", case: nom}
  - {id: acc, text: "The {occupation} thanked {pronoun}, who {was|were} early.", case: acc}
  - {id: poss, text: "The {occupation} read {pronoun} notes, which were long.", case: poss_dep}
contexts:
  - {name: none}
  - {name: they_prime, prime: "{pronoun:%s} {was|were} tired. The {occupation} left."}
  - {name: she_prime, prime: "{pronoun:she} {was|were} tired."}
"""


def _stimuli(tmp_path, text: str):
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    return from_spec(spec).stimuli


def test_marks_agree_with_each_option_in_every_case_form_and_prime(tmp_path):
    stimuli = _stimuli(tmp_path, SPEC % ("they", "they"))
    by = {(s.item_id, s.attrs["context"] if "context" in s.attrs else "none"): s for s in stimuli}
    nom = by[("nom.nurse", "none")]
    assert nom.text == "The nurse said that BLANK was/were late."  # what the choice prompt shows: both forms
    assert nom.option_texts == ("The nurse said that she was late.", "The nurse said that they were late.")
    start = by[("start.pilot", "none")]  # the slot starts the sentence: capitalized, the mark still agrees
    assert start.options == ("She", "They")
    assert start.option_texts == ("She has a plan, said the pilot.", "They have a plan, said the pilot.")
    acc = by[("acc.nurse", "none")]
    assert acc.option_texts == ("The nurse thanked her, who was early.", "The nurse thanked them, who were early.")
    poss = by[("poss.nurse", "none")]  # no mark, not nominative: no agreement is made up
    assert poss.option_texts is None and poss.text == "The nurse read BLANK notes, which were long."
    assert by[("nom.nurse", "they_prime")].prime == "They were tired. The nurse left."
    assert by[("nom.pilot", "she_prime")].prime == "She was tired."
    assert len(stimuli) == 4 * 2 * 3


def test_the_choice_prompt_shows_both_forms(tmp_path, tiny_gpt2):
    from biaslab.runners.prompting import PromptSpec
    from biaslab.runners.protocols.choice import choice_requests

    stimuli = [s for s in _stimuli(tmp_path, SPEC % ("they", "they")) if s.item_id == "nom.nurse"]
    [request, *_] = choice_requests(stimuli, tiny_gpt2.tokenizer, PromptSpec.load(), {"mode": "exact"})
    assert "The nurse said that BLANK was/were late." in request.prompt_text
    assert "they" in request.prompt_text.lower()


def test_a_literal_bar_is_text_not_a_mark(tmp_path):
    spec = (SPEC % ("they", "they")).replace("The {occupation} read {pronoun} notes, which were long.",
                                              "The {occupation} | {pronoun} notes | long.")
    poss = [s for s in _stimuli(tmp_path, spec) if s.item_id == "poss.nurse"][0]
    assert poss.text == "The nurse | BLANK notes | long." and poss.option_texts is None


@pytest.mark.parametrize("template, message", [
    ("{was|were} said the {occupation} of {pronoun}.", r"agreement mark \{was\|were\} comes before any \{pronoun\}"),
    ("The {occupation} said {pronoun} {was|were|be} late.", r"agreement mark \{was\|were\|be\} must be "
                                                            r"\{singular\|plural\}"),
    ("The {occupation} said {pronoun} {was|} late.", r"must be \{singular\|plural\}"),
])
def test_a_malformed_or_misplaced_mark_is_refused_in_one_line(tmp_path, template, message):
    spec = SPEC % ("they", "they")
    spec = spec.replace("The {occupation} said that {pronoun} {was|were} late.", template)
    with pytest.raises(DataError, match=message):
        _stimuli(tmp_path, spec)
