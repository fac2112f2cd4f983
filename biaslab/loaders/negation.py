"""Negation-bias stimuli (Wang, Sommerauer and Bloem, "The Negation Bias in Large Language Models"; items after
Beukeboom et al. 2020): a root item describes a social group in a stereotype-consistent ("stereo") or inconsistent
("nonstereo") context sentence, followed by an affirmative ("aff") or negated ("neg") description:
SA = stereo + aff, SN = stereo + neg, NA = nonstereo + aff, NN = nonstereo + neg.

Two datasets share one loader and one column format (`item_id, condition, context, form, group, context_sentence,
description, sentence`, one row per sentence):
* `negation-examples`: folder `negation_bias_examples/`, `negation_bias_examples.csv`, the 24 sentences (6 root
  items x 4 conditions) of the paper's Table 2, typed in; pinned.
* `negation`: folder `negation/`, `negation_bias.csv`, the full dataset (300 root items, 1,200 sentences upstream,
  repository yishani/negationbias) that a user supplies in the same format; unpinned (no copy was available here).

Mapping: each row is one stimulus scored as a whole sentence (no slot, no options): `text` = `sentence`;
`context` and `form` from their columns; `item_id` = "<item_id>.<condition>" (e.g. "3.NA"); attrs `item` (the root
item id), `condition`, `group`, `context_sentence`, `description`, `line`.

Validation (each a `DataError` naming file, line and field): condition is one of SA/SN/NA/NN and agrees with
context + form; context and form are in their vocabularies; `sentence` equals `context_sentence + " " +
description` (the documented construction); an (item, condition) pair occurs once. Items need not have all four
conditions (the mixed model tolerates unbalanced items).
"""

from __future__ import annotations

from pathlib import Path

from ..schema import Stimulus
from .readers import Record, files_digest, read_table
from .dataset import DatasetInfo, file_loader

COLUMNS = ("item_id", "condition", "context", "form", "group", "context_sentence", "description", "sentence")
CONTEXT_CODE = {"stereo": "S", "nonstereo": "N"}
FORM_CODE = {"aff": "A", "neg": "N"}
CONDITIONS = {c + f: (context, form) for context, c in CONTEXT_CODE.items() for form, f in FORM_CODE.items()}


def check_condition(rec: Record) -> tuple[str, str, str]:
    """(condition, context, form) of a row, validated against each other."""
    condition, context, form = rec.get("condition").strip(), rec.get("context").strip(), rec.get("form").strip()
    if condition not in CONDITIONS:
        raise rec.error(f"condition must be one of {sorted(CONDITIONS)}, got {condition!r}", "condition")
    if context not in CONTEXT_CODE:
        raise rec.error(f"context must be one of {sorted(CONTEXT_CODE)}, got {context!r}", "context")
    if form not in FORM_CODE:
        raise rec.error(f"form must be one of {sorted(FORM_CODE)}, got {form!r}", "form")
    if CONDITIONS[condition] != (context, form):
        raise rec.error(f"condition {condition} means context={CONDITIONS[condition][0]}, "
                        f"form={CONDITIONS[condition][1]}, but the row has {context}/{form}", "condition")
    return condition, context, form


def check_sentence(rec: Record) -> str:
    sentence = rec.get("sentence")
    expected = rec.get("context_sentence") + " " + rec.get("description")
    if sentence != expected:
        raise rec.error(f"sentence is not context_sentence + ' ' + description ({expected!r})", "sentence")
    return sentence


def load_negation(folder: Path, *, dataset: str, file: str) -> list[Stimulus]:
    path = folder / file
    records = read_table(path, COLUMNS, multiline=False)
    version = files_digest([path])
    seen: dict[str, int] = {}
    stimuli = []
    for rec in records:
        item = rec.get("item_id").strip()
        condition, context, form = check_condition(rec)
        item_id = f"{item}.{condition}"
        if item_id in seen:
            raise rec.error(f"item {item} has condition {condition} twice (first on line {seen[item_id]})",
                            "condition")
        seen[item_id] = rec.line
        stimuli.append(Stimulus(
            dataset=dataset,
            upstream_version=version,
            item_id=item_id,
            text=check_sentence(rec),
            context=context,
            form=form,
            attrs={"item": item, "condition": condition, "group": rec.get("group"),
                   "context_sentence": rec.get("context_sentence"), "description": rec.get("description"),
                   "line": rec.line},
        ))
    return stimuli


DATASETS = (
    DatasetInfo(
        name="negation-examples",
        studies=("negation",),
        sample_item="attrs.item",
        folder="negation_bias_examples",
        loader=file_loader(load_negation, "negation-examples", "negation_bias_examples.csv"),
        licence="none stated (24 example sentences typed in from Table 2 of Wang, Sommerauer and Bloem, after "
                "Beukeboom et al. 2020; local research use)",
        description="Negation-bias examples: 6 root items x SA/SN/NA/NN = 24 sentences, scored as whole sentences",
        files={"negation_bias_examples.csv": "8a4ec668a3f2d06a1c53715a9f5aeeb29c92f3d65a6ad3a390dd6420271ad4a5"},
        no_source="typed in from Table 2 of the paper; there is no upstream file to download",
    ),
    DatasetInfo(
        name="negation",
        studies=("negation",),
        sample_item="attrs.item",
        loader=file_loader(load_negation, "negation", "negation_bias.csv"),
        licence="unknown (user-supplied copy of yishani/negationbias; check the upstream terms)",
        description="Negation-bias dataset supplied by the user (300 root items x SA/SN/NA/NN upstream), same columns "
                    "as negation-examples",
        files={"negation_bias.csv": None},
        url="https://github.com/yishani/negationbias",
        no_source="no public copy with a pinned commit and checksum is known; put the upstream CSV in the same column "
                  "format at <data-dir>/negation/negation_bias.csv yourself",
    ),
)
