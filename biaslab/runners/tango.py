"""TANGO's probability version: one scoring stimulus per stored generation of the SAME model (the meta-evaluation's
conversion; see `biaslab.lexicon.tango_convert` for the exact rule).

For every TANGO prompt and every stored continuation of it (`gen` protocol, context `prompt`), the continuation is
cut before its second pronoun, its first pronoun becomes the slot, and the candidates he / she / they / xe (TANGO's
xe/xir spelling) are realized in that pronoun's case with verb agreement. The gold option is the prompt's declared
family. Continuations without a pronoun give no stimulus (counted), and neither do prompts whose declared family is
not a candidate (ey, fae with `--pronouns all`).

The new stimuli keep the prompt's dataset name ("tango") and identify their source generation in `attrs`
(`template_of`: the prompt's stimulus_id; `generation`: model_key, request_id, sample_index, seed and the sampling
settings), so each model's and each sampling setting's templates are their own, and a second collection finds the
same stimulus ids. Continuations containing the slot marker "BLANK" are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import NoEvidence
from ..schema import Stimulus


SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "max_new_tokens", "min_new_tokens")


@dataclass
class TemplateCounts:
    generations: int = 0
    templates: int = 0
    no_pronoun: int = 0
    not_candidate: int = 0      # prompts whose declared family is not among the candidates
    unconvertible: int = 0      # continuations containing the slot marker "BLANK" itself
    examples: list[str] = field(default_factory=list)


def generations_of(wh, model_key: str, prompt_ids: Sequence[str]) -> list[tuple]:
    """(stimulus_id, prompt_text, request_id, sample_index, seed, text, sampling) of every stored TANGO continuation,
    `sampling` = its settings (temperature, top_k, top_p, max_new_tokens, min_new_tokens)."""
    if not prompt_ids:
        return []
    return wh.rows(
        "SELECT g.stimulus_id, g.prompt_text, g.request_id, s.sample_index, s.seed, s.text, "
        "s.temperature, s.top_k, s.top_p, s.max_new_tokens, g.min_new_tokens "
        "FROM gen_requests g JOIN samples s USING (model_key, request_id) "
        "WHERE g.model_key = ? AND g.context = 'prompt' AND list_contains(?, g.stimulus_id) "
        "ORDER BY g.stimulus_id, s.sample_index, s.seed, s.temperature, s.top_k, s.top_p, s.max_new_tokens",
        [model_key, list(prompt_ids)])


def templates_from_generations(wh, model_key: str, prompts: Sequence[Stimulus],
                               nlp) -> tuple[list[Stimulus], TemplateCounts]:
    """The probability-protocol stimuli built from `model_key`'s stored continuations of `prompts`."""
    from ..lexicon.tango_convert import CANDIDATES, convert

    by_id = {p.stimulus_id: p for p in prompts}
    counts = TemplateCounts()
    out: list[Stimulus] = []
    for sid, prompt_text, rid, index, seed, text, *sampling in generations_of(wh, model_key, list(by_id)):
        counts.generations += 1
        prompt = by_id[sid]
        if prompt.pronoun_set not in CANDIDATES:
            counts.not_candidate += 1
            continue
        if "BLANK" in prompt_text + text:
            counts.unconvertible += 1  # the slot marker itself occurs in the text
            continue
        conversion = convert(prompt_text, text, nlp)
        if conversion is None:
            counts.no_pronoun += 1
            continue
        gold = conversion.options[CANDIDATES.index(prompt.pronoun_set)]
        out.append(Stimulus(
            dataset=prompt.dataset,
            upstream_version=prompt.upstream_version,
            item_id=f"{prompt.item_id}.gen{index}.{rid[:8]}",
            text=conversion.text,
            template=prompt.text,
            slot="BLANK",
            pronoun_set=prompt.pronoun_set,
            grammatical_case=conversion.case,
            options=conversion.options,
            option_labels=CANDIDATES,
            option_texts=conversion.option_texts,
            gold=gold,
            referent_role=prompt.referent_role,
            name=prompt.name,
            attrs={**{k: v for k, v in prompt.attrs.items() if k != "line"}, "template_of": sid,
                   "generation": {"model_key": model_key, "request_id": rid, "sample_index": int(index),
                                  "seed": int(seed), **dict(zip(SAMPLING_FIELDS, sampling))},
                   "found": conversion.found, "found_family": conversion.found_family},
        ))
        counts.templates += 1
    return out, counts


def derived_templates(wh, model_key: str, prompts: list[Stimulus]) -> tuple[list[Stimulus], str]:
    """TANGO `prob`: the templates built from this model's stored generations of `prompts` (stored in `stimuli`
    too), sorted as stimuli are, and a note counting them. A model without stored generations is one clear line."""
    from ..lexicon.tango_convert import load_nlp

    templates, counts = templates_from_generations(wh, model_key, prompts, load_nlp())
    if counts.generations == 0:
        raise NoEvidence(f"tango --protocol prob scores templates built from this model's own generations, and "
                         f"{wh.path} has none for model {model_key}: run `runners collect --dataset tango "
                         f"--protocol gen` with the same model (and --limit) first")
    note = (f"{counts.generations} stored generations -> {counts.templates} templates ({counts.no_pronoun} without "
            f"a pronoun, {counts.not_candidate} of non-candidate families, {counts.unconvertible} containing the "
            f"slot marker)")
    if not templates:
        raise NoEvidence(f"tango: no template to score: {note}")
    wh.append("stimuli", [s.to_row() for s in templates])
    return sorted(templates, key=lambda s: (s.item_id, s.stimulus_id)), note
