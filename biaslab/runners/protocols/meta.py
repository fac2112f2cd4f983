"""The `meta` protocol: comprehension checks of the WinoPron forced choice (metaprompting, the contextual-invariance
paper's Table 4, Kumar et al.): does the model understand the task it is given?

Each WinoPron stimulus (same passage, same prime, same context) is asked three forced-choice questions, one prompt
per (stimulus, question), with the forced-choice machinery of the `choice` protocol (`protocols.choice`): the same
chat rendering and adaptations, the same answer parser, exact mode (trie of top-K logits; default) or sample mode.
The questions (packaged prompt `metaprompt_v1`; wording decided here, docs/decisions.md "Metaprompting (Table 4)"):

==============  =============================================================  ==========================  ==============
question        text                                                           options (order MF; FM swaps) gold
==============  =============================================================  ==========================  ==============
anaphora        In the passage, who does BLANK refer to?                       occupation, participant     the template's
                                                                                                           antecedent
part_of_speech  What part of speech is the word that should replace BLANK?     pronoun, noun               pronoun
tracking        In the sentence that contains BLANK, who is mentioned first?   occupation, participant     the noun first
                                                                                                           in the template
==============  =============================================================  ==========================  ==============

The options of a question follow the stimulus's option order: order "MF" lists them as above, "FM" reversed, so the
two option orders of a template also balance the position of the gold answer. Gold answers are not stored: they are
derived from stimulus fields (`lexicon.metaprompt.gold_option`), which the metric (`biaslab.metrics.metaprompt`)
reads back.

Evidence goes into the choice tables (`choice_requests` with protocol 'meta', `choice_nodes` / `choice_edges` /
`choice_probs`, or `samples`). A request's `prompt_version` is "{spec version}:{question}" (e.g.
"metaprompt-v1:anaphora"), and its request id hashes the stimulus, the protocol "meta", the rendering parameters with
the question, and that version, so the three questions of a stimulus are three requests and the `choice` protocol's
requests are untouched.
"""  # noqa: E501 - the RST table of the questions above is 122 characters wide; wrapping it would break the table

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pydantic import model_validator

from ...engines.base import SAMPLE, TOP_K
from ...errors import DataError, UsageError
from ...lexicon.metaprompt import QUESTIONS, question_options
from ...schema import Stimulus, request_id
from ..prompting import PromptSpec, _render_user, passage
from .base import Progress, Work
from .choice import Choice, ChoiceRequest, ChoiceSettings

DEFAULT_META_PROMPT = "metaprompt_v1"


@dataclass(frozen=True)
class MetaPromptSpec:
    """A metaprompt file: the fields of a forced-choice prompt (`PromptSpec`) whose `user` text also has a
    {question} placeholder, and `questions`: question name -> question text (one per name of `QUESTIONS`)."""

    version: str
    system: str
    user: str
    prefill: str
    closing: str
    questions: dict[str, str]

    @classmethod
    def load(cls, name_or_path: str = DEFAULT_META_PROMPT) -> MetaPromptSpec:
        """A packaged metaprompt by name, or a JSON file with the same fields.

        The forced-choice fields are checked by `PromptSpec.load` (same one-line errors); then ValueError in one
        line for: a user text without {question}; `questions` missing, not an object, lacking one of `QUESTIONS`
        or naming another, or holding a non-string or a text with braces.
        """
        base = PromptSpec.load(name_or_path)
        path = Path(name_or_path)
        if path.suffix == ".json":
            where, text = str(path), path.read_text(encoding="utf-8")
        else:
            where = f"biaslab/runners/prompts/{name_or_path}.json"
            text = resources.files("biaslab.runners").joinpath(f"prompts/{name_or_path}.json").read_text("utf-8")
        data = json.loads(text)
        if "{question}" not in base.user:
            raise DataError(f"{where}: field 'user' lacks the placeholder {{question}} (a metaprompt file)")
        questions = data.get("questions")
        if not isinstance(questions, dict):
            raise DataError(f"{where}: a metaprompt file needs 'questions', an object of question -> text "
                            f"for {', '.join(QUESTIONS)}")
        if set(questions) != set(QUESTIONS):
            raise DataError(f"{where}: 'questions' must name exactly {', '.join(QUESTIONS)}, got "
                            f"{', '.join(sorted(questions)) or 'none'}")
        for name, value in questions.items():
            if not isinstance(value, str) or not value.strip() or "{" in value or "}" in value:
                raise DataError(f"{where}: question {name!r} must be a non-empty string without braces")
        return cls(base.version, base.system, base.user, base.prefill, base.closing,
                   {q: questions[q] for q in QUESTIONS})

    def question_spec(self, question: str) -> PromptSpec:
        """The forced-choice prompt of one question: version "{version}:{question}", the question text put into
        the user text (its other placeholders stay for `render_question`)."""
        if question not in self.questions:
            raise UsageError(f"unknown question {question!r}; known: {', '.join(QUESTIONS)}")
        return PromptSpec(f"{self.version}:{question}", self.system,
                          self.user.replace("{question}", self.questions[question]), self.prefill, self.closing)


def meta_requests(stimuli: Sequence[Stimulus], tokenizer, spec: MetaPromptSpec,
                  params: dict) -> dict[str, list]:
    """question -> its `ChoiceRequest`s, one per stimulus (protocol "meta"; the request id hashes the stimulus,
    "meta", `params` with the question and the chat adaptation, and the question's prompt version)."""
    out: dict[str, list] = {}
    for question in QUESTIONS:
        qspec = spec.question_spec(question)
        rows = []
        for s in stimuli:
            options = question_options(question, s)
            user = qspec.user.format(passage=passage(s), option_1=options[0], option_2=options[1])
            rendered = _render_user(qspec, tokenizer, user)
            ids = tokenizer(rendered.text, add_special_tokens=False)["input_ids"]
            rid = request_id(s.stimulus_id, "meta",
                             {**params, "question": question, "adaptation": rendered.adaptation}, qspec.version)
            rows.append(ChoiceRequest(rid, s.stimulus_id, "meta", options, rendered.text, list(ids),
                                      rendered.adaptation, rendered.lead, rendered.lead_tokens, rendered.final_marker))
        out[question] = rows
    return out


class MetaSettings(ChoiceSettings):
    """The forced-choice settings with the metaprompt's own defaults (room for multi-token nouns as answers)."""

    DEFAULTS = {**ChoiceSettings.DEFAULTS, "max_new_tokens": 8}

    prompt: str = DEFAULT_META_PROMPT

    @model_validator(mode="after")
    def _modes(self) -> MetaSettings:
        if self.mode == "logprobs":
            raise UsageError("--mode logprobs is for --protocol choice on chat APIs; the comprehension questions "
                             "take --mode exact or sample")
        return self


class Meta(Choice):
    """The meta protocol: `choice` run once per question with that question's prompt; one run covers the three."""

    name = "meta"
    settings_model = MetaSettings

    def needs(self, kind: str) -> frozenset[str]:
        """The in-process engines' capabilities only: the comprehension questions are built with the model's
        tokenizer, so a chat API (no token ids) is refused with its reason before any request."""
        return frozenset({TOP_K if self.settings.mode == "exact" else SAMPLE})

    def check(self) -> None:
        self.meta_spec = MetaPromptSpec.load(self.settings.prompt)
        self.spec = self.meta_spec

    def requests(self, stimuli: Sequence[Stimulus], prepared) -> list[ChoiceRequest]:
        self.engine = prepared.label
        self.by_question = meta_requests(stimuli, prepared.tokenizer, self.meta_spec, self.settings.render_params())
        return [r for q in QUESTIONS for r in self.by_question[q]]

    def pending(self, wh, model_key: str, requests) -> Work:
        per = {q: super(Meta, self).pending(wh, model_key, self.by_question[q]) for q in QUESTIONS}
        return Work(sum(w.count for w in per.values()), per, list(requests))

    def provenance(self) -> tuple[dict, dict | None]:
        extra, generation = super().provenance()
        return extra, {**generation, "questions": list(QUESTIONS)}

    def run(self, wh, backend, work: Work, *, run_id: str, chunk_size: int, on_progress: Progress) -> int:
        return sum(self.run_spec(wh, backend, work.items[q], self.meta_spec.question_spec(q), run_id=run_id,
                                 chunk_size=chunk_size, on_progress=on_progress) for q in QUESTIONS)


PROTOCOL = Meta

__all__ = ["DEFAULT_META_PROMPT", "PROTOCOL", "Meta", "MetaPromptSpec", "MetaSettings", "meta_requests"]
