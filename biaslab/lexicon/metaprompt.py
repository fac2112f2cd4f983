"""The comprehension questions of metaprompting (the contextual-invariance paper's Table 4, Kumar et al.) about a
WinoPron stimulus: which questions, their options and their gold answers. Knowledge that the `meta` protocol (which
asks them) and its metric (which scores them) share; no model and no I/O.

==============  ==========================  ===================================================================
question        options (order MF; FM swaps) gold
==============  ==========================  ===================================================================
anaphora        occupation, participant     the template's antecedent
part_of_speech  pronoun, noun               pronoun
tracking        occupation, participant     whichever of $OCCUPATION / $PARTICIPANT comes first in the template
==============  ==========================  ===================================================================
"""

from __future__ import annotations

from ..errors import DataError, UsageError
from ..schema import Stimulus

#: the questions, in the order they are asked and reported
QUESTIONS = ("anaphora", "part_of_speech", "tracking")
#: part-of-speech options (order "MF"); the gold answer is the first
POS_OPTIONS = ("pronoun", "noun")


def question_of(prompt_version: str) -> tuple[str, str]:
    """(spec version, question) of a stored meta request's prompt_version "{version}:{question}"."""
    version, sep, question = prompt_version.rpartition(":")
    if not sep or question not in QUESTIONS:
        raise DataError(f"not a metaprompt version: {prompt_version!r}")
    return version, question


def _check(stimulus: Stimulus) -> None:
    if stimulus.occupation is None or stimulus.participant is None or stimulus.template is None:
        raise DataError(f"stimulus {stimulus.item_id}: the meta protocol needs occupation, participant and template "
                        f"(WinoPron stimuli)")


def question_options(question: str, stimulus: Stimulus) -> tuple[str, str]:
    """The two options of `question` for `stimulus`: (occupation, participant) for anaphora and tracking,
    (pronoun, noun) for part_of_speech; reversed when the stimulus's option order is "FM"."""
    if question == "part_of_speech":
        pair = POS_OPTIONS
    elif question in ("anaphora", "tracking"):
        _check(stimulus)
        pair = (stimulus.occupation, stimulus.participant)
    else:
        raise UsageError(f"unknown question {question!r}; known: {', '.join(QUESTIONS)}")
    return (pair[1], pair[0]) if stimulus.option_order == "FM" else (pair[0], pair[1])


def gold_option(question: str, occupation: str, participant: str, template: str, antecedent: str | None) -> str:
    """The correct answer of `question` from a WinoPron stimulus's fields.

    anaphora: the antecedent (the occupation when the upstream answer is 0, the participant when 1);
    part_of_speech: "pronoun"; tracking: whichever of $OCCUPATION / $PARTICIPANT comes first in the raw template (the
    raw template, not the filled text, so a noun inside another word, "chemist" in "chemistry", cannot mislead).
    """
    if question == "part_of_speech":
        return POS_OPTIONS[0]
    if question == "anaphora":
        if antecedent not in (occupation, participant):
            raise DataError(f"antecedent {antecedent!r} is neither {occupation!r} nor {participant!r}")
        return antecedent
    if question == "tracking":
        return occupation if template.index("$OCCUPATION") < template.index("$PARTICIPANT") else participant
    raise UsageError(f"unknown question {question!r}; known: {', '.join(QUESTIONS)}")


def stimulus_gold(question: str, stimulus: Stimulus) -> str:
    """`gold_option` of a `Stimulus`."""
    _check(stimulus)
    return gold_option(question, stimulus.occupation, stimulus.participant, stimulus.template,
                       stimulus.attrs.get("antecedent"))
