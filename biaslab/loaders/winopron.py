"""WinoPron (Gautam et al. 2024, "Revisiting English Winogender Schemas for Consistency, Coverage, and Grammatical
Case"), upstream `new_templates.tsv` (extracted from the repository's password zip; see PROVENANCE.md), used as a
forced pronoun choice under priming (contextual invariance study, docs/design.md sections 1 and 7).

Upstream: 360 template rows = 60 occupation-participant pairs x 2 answers x 3 grammatical cases. Columns
`occupation(0)`, `other-participant(1)`, `answer` (0: the pronoun refers to the occupation, 1: to the participant),
`pronoun_type` (`$NOM_PRONOUN` / `$ACC_PRONOUN` / `$POSS_PRONOUN`), `template`, `single_version`, and two trailing
unnamed columns (a contamination canary on the first row only) that are ignored. CRLF line endings.

Mapping: each template row gives 5 context settings x 2 option orders = 10 stimuli, 3,600 in all.

* `text`: the template with `$OCCUPATION` / `$PARTICIPANT` filled and the pronoun placeholder replaced by the slot
  marker `BLANK`; `template` is the raw template; `grammatical_case` follows the placeholder (nom, acc, poss_dep).
* `options`: the female and male forms of the slot's case (she/he, her/him, her/his). Option order "MF" lists
  (female, male) with labels ("female", "male"); "FM" lists (male, female) with labels ("male", "female").
  No `gold`: the task asks which pronoun the model prefers, both are grammatical.
* `context` / `prime`: "unprimed" (no prime); "primed_f" / "primed_m": the prime is the partner template (by
  default the template of the same occupation-participant pair and the same case with the other answer; option
  `pairing`) fully realized with its pronoun filled feminine / masculine (a sentence-initial pronoun capitalized);
  "null_1" / "null_2": two fixed sentences with no pronoun and no relation to any target (option `null_primes`, a
  "|"-separated pair; default `NULL_PRIMES`). The loader checks that every (pair, case) has exactly one template for
  each answer (the 180 template pairs of the contextuality analysis) and raises `DataError` naming the row if not.
* `referent_role`: answer 0 -> "occupation", 1 -> "participant"; `stereotype_rating`: the English Misersky et al.
  (2014) femininity rating of the antecedent (occupation for answer 0, participant for answer 1) when the noun
  matches a norm entry (see `biaslab.loaders.misersky`), else None. Option `norms` is the norms CSV (relative to
  the dataset folder or absolute); an empty string leaves every rating None.
* `item_id` = "{occupation}.{participant}.{answer}.{case}" names the template; `attrs` carries `pair_id`
  ("{occupation}|{participant}|{case}"), `answer`, the partner's `prime_item_id` and `prime_label`, the antecedent's
  norm key, and the upstream `line`, so metrics can rebuild the 180 pairs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..schema import Stimulus
from .misersky import (NORMS_FILE, NORMS_FOLDER, NORMS_SHA256, NORMS_SOURCE, NormMatch, load_norms, match_noun,
                       match_nouns, norms_path)
from ..lexicon.pronouns import PARADIGMS, PLACEHOLDER_CASE, capitalize, slot_starts_sentence, starts_sentence
from .readers import Record, files_digest, read_table
from .dataset import DatasetInfo, Upstream, github_raw

DATASET = "winopron"
SLOT = "BLANK"
TEMPLATES_FILE = "new_templates.tsv"
TEMPLATE_COLUMNS = ("occupation(0)", "other-participant(1)", "answer", "pronoun_type", "template")
DEFAULT_NORMS = f"../{NORMS_FOLDER}/{NORMS_FILE}"

#: Null primes c_0,1 and c_0,2 (docs/design.md section 7): no pronoun, no person, no relation to any template.
NULL_PRIME_1 = "The weather stayed mild and dry for most of the afternoon."
NULL_PRIME_2 = "The old library building on the corner has a red wooden door."
NULL_PRIMES = f"{NULL_PRIME_1}|{NULL_PRIME_2}"

CONTEXTS = ("unprimed", "primed_f", "primed_m", "null_1", "null_2")
ORDERS: dict[str, tuple[str, str]] = {"MF": ("female", "male"), "FM": ("male", "female")}
PRIME_LABEL = {"primed_f": "female", "primed_m": "male"}

_PRONOUN_WORD = re.compile(r"\b(he|she|him|her|his|hers|they|them|their|theirs|xe|xem|xyr|ey|em|eir)\b",
                           re.IGNORECASE)


@dataclass(frozen=True)
class Template:
    """One upstream row, validated."""

    record: Record
    occupation: str
    participant: str
    answer: int
    placeholder: str
    template: str

    @property
    def case(self) -> str:
        return PLACEHOLDER_CASE[self.placeholder]

    @property
    def item_id(self) -> str:
        return f"{self.occupation}.{self.participant}.{self.answer}.{self.case}"

    @property
    def pair_id(self) -> str:
        return f"{self.occupation}|{self.participant}|{self.case}"

    @property
    def antecedent(self) -> str:
        return self.occupation if self.answer == 0 else self.participant


def parse_template(rec: Record) -> Template:
    occupation = rec.get("occupation(0)").strip()
    participant = rec.get("other-participant(1)").strip()
    answer = rec.get("answer").strip()
    if answer not in ("0", "1"):
        raise rec.error(f"answer must be 0 or 1, got {answer!r}", "answer")
    pronoun_type = rec.get("pronoun_type").strip()
    if pronoun_type not in PLACEHOLDER_CASE:
        raise rec.error(f"unknown pronoun type {pronoun_type!r} (expected one of {sorted(PLACEHOLDER_CASE)})",
                        "pronoun_type")
    template = rec.get("template").strip()
    found = [p for p in PLACEHOLDER_CASE if p in template]
    if found != [pronoun_type] or template.count(pronoun_type) != 1:
        raise rec.error(f"expected exactly one {pronoun_type} placeholder, found {found}", "template")
    for role in ("$OCCUPATION", "$PARTICIPANT"):
        if template.count(role) != 1:
            raise rec.error(f"expected {role} exactly once, found {template.count(role)}", "template")
    return Template(rec, occupation, participant, int(answer), pronoun_type, template)


def read_templates(folder: Path) -> list[Template]:
    """All template rows of `new_templates.tsv` (the two unnamed trailing columns are ignored, but every row must
    have as many cells as the header: a header with a column missing is an error, not a silent shift)."""
    records = read_table(Path(folder) / TEMPLATES_FILE, TEMPLATE_COLUMNS, delimiter="\t", multiline=False)
    return [parse_template(rec) for rec in records]


def check_pairs(templates: Sequence[Template]) -> dict[tuple[str, int], Template]:
    """(pair_id, answer) -> template; every (pair, case) must have exactly one template for each answer."""
    by_key: dict[tuple[str, int], Template] = {}
    for t in templates:
        first = by_key.get((t.pair_id, t.answer))
        if first is not None:
            raise t.record.error(f"second template for pair {t.pair_id!r} with answer {t.answer} "
                                 f"(first on line {first.record.line}); each pair and case needs one per answer",
                                 "answer")
        by_key[(t.pair_id, t.answer)] = t
    for t in templates:
        if (t.pair_id, 1 - t.answer) not in by_key:
            raise t.record.error(f"template has no partner: pair {t.pair_id!r} has no template with answer "
                                 f"{1 - t.answer}", "answer")
    return by_key


def _other_answer(t: Template, by_key: dict[tuple[str, int], Template]) -> Template:
    return by_key[(t.pair_id, 1 - t.answer)]


def _same_template(t: Template, by_key: dict[tuple[str, int], Template]) -> Template:
    return t


#: Pairing rules: which template primes which (option `pairing`). docs/design.md section 7 fixes "other_answer".
PAIRINGS: dict[str, Callable[[Template, dict[tuple[str, int], Template]], Template]] = {
    "other_answer": _other_answer,
    "same_template": _same_template,
}


def fill(t: Template, pronoun: str) -> str:
    """The template with occupation and participant filled and `pronoun` in the pronoun slot (capitalized when it
    starts a sentence). With `pronoun` = SLOT this is the stimulus text."""
    text = t.template.replace("$OCCUPATION", t.occupation).replace("$PARTICIPANT", t.participant)
    before, after = text.split(t.placeholder, 1)
    if pronoun != SLOT and starts_sentence(before, after_closer=True):
        pronoun = capitalize(pronoun)
    return before + pronoun + after


def parse_null_primes(value: str | Sequence[str]) -> tuple[str, str]:
    """Two non-empty sentences without any pronoun, from "first|second" or a two-element sequence."""
    parts = value.split("|") if isinstance(value, str) else list(value)
    parts = [p.strip() for p in parts]
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"null_primes: expected two non-empty sentences separated by '|', got {value!r}")
    for p in parts:
        if _PRONOUN_WORD.search(p):
            raise UsageError(f"null_primes: a null prime must contain no pronoun: {p!r}")
    return parts[0], parts[1]


def resolve_norms(folder: Path, norms: str) -> Path | None:
    if not norms:
        return None
    path = Path(norms).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(folder / path))  # errors name a clean path


def template_stimuli(t: Template, partner: Template, nulls: tuple[str, str], match: NormMatch | None,
                     version: str, pairing: str) -> list[Stimulus]:
    """The 5 contexts x 2 option orders of one template."""
    text = fill(t, SLOT)
    forms = {label: PARADIGMS[label][t.case] for label in ("female", "male")}
    if slot_starts_sentence(text, SLOT, after_closer=True):
        forms = {label: capitalize(f) for label, f in forms.items()}
    primes: dict[str, str | None] = {
        "unprimed": None,
        "primed_f": fill(partner, PARADIGMS["female"][partner.case]),
        "primed_m": fill(partner, PARADIGMS["male"][partner.case]),
        "null_1": nulls[0],
        "null_2": nulls[1],
    }
    base_attrs = {
        "pair_id": t.pair_id,
        "answer": t.answer,
        "line": t.record.line,
        "pairing": pairing,
        "antecedent": t.antecedent,
        "norm_key": match.key if match else None,
        "norm_rule": match.rule if match else None,
    }
    out = []
    for context in CONTEXTS:
        primed = context in PRIME_LABEL
        attrs = {**base_attrs,
                 "prime_item_id": partner.item_id if primed else None,
                 "prime_label": PRIME_LABEL.get(context)}
        for order, labels in ORDERS.items():
            out.append(Stimulus(
                dataset=DATASET,
                upstream_version=version,
                item_id=t.item_id,
                text=text,
                template=t.template,
                slot=SLOT,
                prime=primes[context],
                context=context,
                stereotype_rating=match.rating if match else None,
                grammatical_case=t.case,
                options=tuple(forms[label] for label in labels),
                option_labels=labels,
                option_order=order,
                referent_role="occupation" if t.answer == 0 else "participant",
                occupation=t.occupation,
                participant=t.participant,
                attrs=attrs,
            ))
    return out


def load_winopron(folder: Path, null_primes: str | Sequence[str] = NULL_PRIMES, pairing: str = "other_answer",
                  norms: str = DEFAULT_NORMS) -> list[Stimulus]:
    folder = Path(folder)
    if pairing not in PAIRINGS:
        raise UsageError(f"pairing: unknown rule {pairing!r}; accepted: {sorted(PAIRINGS)}")
    nulls = parse_null_primes(null_primes)
    templates = read_templates(folder)
    by_key = check_pairs(templates)
    norms_file = resolve_norms(folder, norms)
    table = load_norms(norms_file) if norms_file is not None else {}
    files = [folder / TEMPLATES_FILE] + ([norms_file] if norms_file is not None else [])
    version = files_digest(files)
    stimuli: list[Stimulus] = []
    for t in templates:
        partner = PAIRINGS[pairing](t, by_key)
        match = match_noun(t.antecedent, table) if table else None
        stimuli.extend(template_stimuli(t, partner, nulls, match, version, pairing))
    return stimuli


def misersky_matches(data_dir: Path, rule: str = "biaslab") -> tuple[dict[str, NormMatch], list[str]]:
    """Match every WinoPron occupation and participant to the English norms (for reports and tests)."""
    templates = read_templates(Path(data_dir) / "winopron")
    nouns = {t.occupation for t in templates} | {t.participant for t in templates}
    return match_nouns(nouns, load_norms(norms_path(data_dir)), rule=rule)


def rated_templates(data_dir: Path, rule: str = "biaslab") -> tuple[int, int]:
    """(templates whose antecedent has a rating, all templates) of WinoPron under a matching rule: (234, 360) with
    "biaslab", (279, 360) with "paper" on the pinned files."""
    templates = read_templates(Path(data_dir) / "winopron")
    matched, _ = misersky_matches(data_dir, rule)
    return sum(t.antecedent in matched for t in templates), len(templates)


DATASETS = (DatasetInfo(
    name=DATASET,
    strata=("grammatical_case", "referent_role"),
    studies=("contextuality", "metaprompt"),
    loader=load_winopron,
    licence="AGPL-3.0",
    description="WinoPron: 360 templates x 5 priming contexts x 2 option orders; female/male forms of the slot's "
                "case; Misersky femininity rating of the antecedent",
    files={
        TEMPLATES_FILE: "ca592bb220e2d0a54bc4391222da1d6e6ef327814f105e71171824dcdbdc5352",
        DEFAULT_NORMS: NORMS_SHA256,
    },
    options={"null_primes": NULL_PRIMES, "pairing": "other_answer", "norms": DEFAULT_NORMS},
    url="https://github.com/uds-lsv/winopron/tree/ed71655b445a0bb71dc1d36e41eb3156b68303af",
    sources={
        # the password is published in the upstream README (the zip only keeps the data out of training crawls)
        TEMPLATES_FILE: Upstream(github_raw("uds-lsv/winopron", "ed71655b445a0bb71dc1d36e41eb3156b68303af", "data.zip"),
                                 member=TEMPLATES_FILE, password="vogelbeobachtung131719",
                                 archive_sha256="d1acbf1f411dc9ec5f149c95c751667cf1c8338562a323b839d7113f2ca8b673"),
        DEFAULT_NORMS: NORMS_SOURCE,
    },
    protocols=("choice", "meta"),
),)
