"""The `meta` protocol: comprehension checks of the WinoPron forced choice (metaprompting, the contextual-invariance
paper's Table 4, Kumar et al.): does the model understand the task it is given?

Each WinoPron stimulus (same passage, same prime, same context) is asked three forced-choice questions, one prompt
per (stimulus, question), with the forced-choice machinery of the `choice` protocol (`choice_collect`): the same
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
derived from stimulus fields (`gold_option`), which the metric (`biaslab.metrics.metaprompt`) reads back.

Evidence goes into the choice tables (`choice_requests` with protocol 'meta', `choice_nodes` / `choice_edges` /
`choice_probs`, or `samples`). A request's `prompt_version` is "{spec version}:{question}" (e.g.
"metaprompt-v1:anaphora"), and its request id hashes the stimulus, the protocol "meta", the rendering parameters with
the question, and that version, so the three questions of a stimulus are three requests and the `choice` protocol's
requests are untouched.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..lexicon.metaprompt import QUESTIONS, gold_option, question_of, question_options, stimulus_gold
from ..schema import Stimulus, request_id
from .prompting import PromptSpec, _render_user, passage

PROTOCOL = "meta"
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
    def load(cls, name_or_path: str = DEFAULT_META_PROMPT) -> "MetaPromptSpec":
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
            raise ValueError(f"{where}: field 'user' lacks the placeholder {{question}} (a metaprompt file)")
        questions = data.get("questions")
        if not isinstance(questions, dict):
            raise ValueError(f"{where}: a metaprompt file needs 'questions', an object of question -> text "
                             f"for {', '.join(QUESTIONS)}")
        if set(questions) != set(QUESTIONS):
            raise ValueError(f"{where}: 'questions' must name exactly {', '.join(QUESTIONS)}, got "
                             f"{', '.join(sorted(questions)) or 'none'}")
        for name, value in questions.items():
            if not isinstance(value, str) or not value.strip() or "{" in value or "}" in value:
                raise ValueError(f"{where}: question {name!r} must be a non-empty string without braces")
        return cls(base.version, base.system, base.user, base.prefill, base.closing,
                   {q: questions[q] for q in QUESTIONS})

    def question_spec(self, question: str) -> PromptSpec:
        """The forced-choice prompt of one question: version "{version}:{question}", the question text put into
        the user text (its other placeholders stay for `render_question`)."""
        if question not in self.questions:
            raise ValueError(f"unknown question {question!r}; known: {', '.join(QUESTIONS)}")
        return PromptSpec(f"{self.version}:{question}", self.system,
                          self.user.replace("{question}", self.questions[question]), self.prefill, self.closing)


def meta_requests(stimuli: Sequence[Stimulus], tokenizer, spec: MetaPromptSpec,
                  params: dict) -> dict[str, list]:
    """question -> its `ChoiceRequest`s, one per stimulus (protocol "meta"; the request id hashes the stimulus,
    "meta", `params` with the question and the chat adaptation, and the question's prompt version)."""
    from .choice_collect import ChoiceRequest

    out: dict[str, list] = {}
    for question in QUESTIONS:
        qspec = spec.question_spec(question)
        rows = []
        for s in stimuli:
            options = question_options(question, s)
            user = qspec.user.format(passage=passage(s), option_1=options[0], option_2=options[1])
            rendered = _render_user(qspec, tokenizer, user)
            ids = tokenizer(rendered.text, add_special_tokens=False)["input_ids"]
            rid = request_id(s.stimulus_id, PROTOCOL,
                             {**params, "question": question, "adaptation": rendered.adaptation}, qspec.version)
            rows.append(ChoiceRequest(rid, s.stimulus_id, PROTOCOL, options, rendered.text, list(ids),
                                      rendered.adaptation, rendered.lead, rendered.lead_tokens, rendered.final_marker))
        out[question] = rows
    return out


def collect_meta(wh, config, stimuli: list[Stimulus], prepared, progress):
    """`runners collect --protocol meta`: the `choice` protocol's collection (`collect._collect_choice`) run once per
    question with that question's prompt spec; one run row covers the three questions."""
    from .choice_collect import ENGINE, collect_exact, collect_samples, pending_choice, pending_samples
    from .collect import (CollectResult, _finishing, _load_if_pending, _start_run, choice_render_params,
                          register_model)

    spec = MetaPromptSpec.load(config.prompt)
    params = config.sampling_params()
    render_params = choice_render_params(config, params)
    by_question = meta_requests(stimuli, prepared.tokenizer, spec, render_params)
    register_model(wh, prepared.spec)
    total = sum(len(v) for v in by_question.values())
    todo: dict[str, list] = {}
    pending: dict[str, list] = {}
    seeds: dict = {}
    if config.mode == "exact":
        for q, requests in by_question.items():
            todo[q] = pending_choice(wh, prepared.model_key, requests)
    else:
        from ..engines.hf.sampling import sample_seed

        for q, requests in by_question.items():
            seeds.update({(r.request_id, i): sample_seed(config.seed, r.request_id, i)
                          for r in requests for i in range(config.samples)})
            pending[q] = pending_samples(wh, prepared.model_key, requests, config.samples, seeds, params)
            todo[q] = [r for r, _ in pending[q]]
    n_todo = sum(len(v) for v in todo.values())
    generation = {"do_sample": True, "temperature": params.temperature, "top_k": params.top_k,
                  "top_p": params.top_p, "max_new_tokens": params.max_new_tokens, "repetition_penalty": 1.0,
                  "mode": config.mode, "prompt_version": spec.version, "questions": list(QUESTIONS)}
    version = f"{spec.version}:{json.dumps(render_params, sort_keys=True)}"
    if config.mode == "sample":
        version += f":seed={config.seed}:T={params.temperature}:k={params.top_k}:p={params.top_p}"
    run_id = _start_run(wh, config, prepared, {"protocol_version": version, "engine": ENGINE},
                        generation_config=generation)
    with _finishing(wh, run_id, "choice_requests" if config.mode == "exact" else "samples") as stats:
        backend = _load_if_pending(wh, prepared, n_todo)
        advance = progress(total, total - n_todo) if progress else None
        for q in QUESTIONS:
            qspec = spec.question_spec(q)
            if config.mode == "exact":
                stats["added"] += collect_exact(wh, backend, todo[q], qspec, params=params, k_store=config.k_store,
                                                chunk_size=max(1, min(config.chunk_size, 32)), run_id=run_id,
                                                prompt_batch=config.prompt_batch, on_progress=advance)
            else:
                stats["added"] += collect_samples(wh, backend, pending[q], seeds, qspec, params=params,
                                                  rows_per_batch=256, run_id=run_id, on_progress=advance)
    return CollectResult(run_id, prepared.model_key, len(stimuli), total, n_todo, stats["added"])


__all__ = ["DEFAULT_META_PROMPT", "PROTOCOL", "QUESTIONS", "MetaPromptSpec", "collect_meta", "gold_option",
           "meta_requests", "question_of", "question_options", "stimulus_gold"]
