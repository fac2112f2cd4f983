"""Winogender schemas (Rudinger et al. 2018, "Gender Bias in Coreference Resolution"), upstream `data/` layout.

120 templates x {the specific participant, "someone"} = 240 stimuli. The pronoun slot becomes `BLANK`; the options
are the he / she / they forms of the slot's case (nom he/she/they, acc him/her/them, poss his/her/their). The
"someone" variant follows upstream `instantiate.py`: "the $PARTICIPANT" -> "someone" ("The" -> "Someone"), and
nominative "they" takes plural agreement ("they were"), so every filled text equals a line of `all_sentences.tsv`.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..schema import Stimulus
from ..lexicon.pronouns import PARADIGMS, PLACEHOLDER_CASE, agreement_texts
from .readers import Record, files_digest, read_table
from .dataset import DatasetInfo, Upstream, github_raw

SLOT = "BLANK"
LABELS = ("male", "female", "neutral")
TEMPLATE_COLUMNS = ("occupation(0)", "other-participant(1)", "answer", "sentence")


def pronoun_placeholder(record: Record, template: str, field: str) -> str:
    """The one pronoun placeholder of a template; zero or several is an error naming the row."""
    found = [p for p in PLACEHOLDER_CASE if p in template]
    if len(found) != 1 or template.count(found[0]) != 1:
        raise record.error(f"expected exactly one pronoun placeholder, found {found}", field)
    return found[0]


def realize(template: str, occupation: str, participant: str | None, placeholder: str) -> str:
    """Fill occupation and participant (None: the "someone" variant) and put the slot marker in place."""
    text = template.replace("$OCCUPATION", occupation)
    if participant is None:
        text = re.sub(r"\bThe \$PARTICIPANT", "Someone", text)
        text = re.sub(r"\b(the|a|an) \$PARTICIPANT", "someone", text)
        text = text.replace("$PARTICIPANT", "someone")
    else:
        text = text.replace("$PARTICIPANT", participant)
    return text.replace(placeholder, SLOT)


def load_winogender(folder: Path) -> list[Stimulus]:
    """Each template with its participant and with "someone" (see the module docstring)."""
    templates_path = folder / "templates.tsv"
    stats_path = folder / "occupations-stats.tsv"
    records = read_table(templates_path, TEMPLATE_COLUMNS, delimiter="\t", multiline=False)
    stats = {r.get("occupation"): r for r in read_table(stats_path, ("occupation", "bls_pct_female"), delimiter="\t",
                                                        multiline=False)}
    version = files_digest([templates_path])
    stimuli = []
    for rec in records:
        occupation = rec.get("occupation(0)")
        participant = rec.get("other-participant(1)")
        answer = rec.get("answer")
        if answer not in ("0", "1"):
            raise rec.error(f"answer must be 0 or 1, got {answer!r}", "answer")
        template = rec.get("sentence")
        placeholder = pronoun_placeholder(rec, template, "sentence")
        case = PLACEHOLDER_CASE[placeholder]
        occ_stats = stats.get(occupation)
        attrs = {}
        if occ_stats is not None:
            attrs = {"bls_pct_female": float(occ_stats.get("bls_pct_female")),
                     "bergsma_pct_female": float(occ_stats.get("bergsma_pct_female"))}
        for variant, who in (("specific", participant), ("someone", None)):
            text = realize(template, occupation, who, placeholder)
            options = tuple(PARADIGMS[label][case] for label in LABELS)
            stimuli.append(Stimulus(
                dataset="winogender",
                upstream_version=version,
                item_id=f"{occupation}.{participant if who else 'someone'}.{answer}",
                template=template,
                text=text,
                slot=SLOT,
                grammatical_case=case,
                options=options,
                option_labels=LABELS,
                option_texts=agreement_texts(text, options, LABELS, case, plural_labels=("neutral",), slot=SLOT),
                referent_role="occupation" if answer == "0" else "participant",
                occupation=occupation,
                participant=participant if who else "someone",
                attrs={**attrs, "participant_variant": variant, "line": rec.line},
            ))
    return stimuli


DATASETS = (DatasetInfo(
    name="winogender",
    strata=("grammatical_case", "referent_role"),
    loader=load_winogender,
    licence="MIT",
    description="Winogender schemas: 120 templates x {participant, someone}; he/she/they options in the slot's case",
    files={
        "templates.tsv": "496f2e2dc77296bcebcdd8865a8dc5715ce22b772de9abb5f531d5b3114c48a0",
        "occupations-stats.tsv": "3f7f37c16381a70571356982ea7fe613ac700ad04a6d3b19b9f2be18248df567",
        "all_sentences.tsv": "bd69da16bf228cb8df63fd0843aec2d8b5c36a7f21bf8c7b168bcc83932556c8",
    },
    url="https://github.com/rudinger/winogender-schemas/tree/1c7f8b481ad8a234b41e9f76a424d6e856e13f7f/data",
    sources={rel: Upstream(github_raw("rudinger/winogender-schemas", "1c7f8b481ad8a234b41e9f76a424d6e856e13f7f",
                                      f"data/{rel}"))
             for rel in ("templates.tsv", "occupations-stats.tsv", "all_sentences.tsv")},
),)
