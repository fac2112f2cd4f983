"""The one normalized stimulus row that every dataset loader emits (docs/design.md sections 2-3).

A stimulus is everything that determines the text a model sees, and nothing that depends on the model or on
how it is asked. Runners turn stimuli into requests; metrics join results back to stimuli by `stimulus_id`.

Conventions
-----------
* `text` is the realized text. When the stimulus has `options`, `text` contains the literal `slot` marker
  exactly once; a scoring runner fills each option into the slot, a choice runner shows `text` as is.
* `options` are surface strings exactly as they are filled in or shown ("she", "He", "xem");
  `option_labels` name them in a dataset-independent way ("female", "male", "they", "xe", ...).
* `option_texts`, when set, is the full realized text for each option, for datasets whose sentence changes
  beyond the slot (verb agreement: "they were" vs "she was"). Each starts with the text before the slot followed
  by the option, so the option's character span is the same as with plain filling.
* `gold`, when set, is one of `options`.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import DataError
from .identity import content_hash

#: WinoPron context settings, negation-bias stereotype contexts, misgendering generation cut points.
Context = Literal[
    "unprimed", "primed_f", "primed_m", "null_1", "null_2",  # contextual invariance (WinoPron)
    "stereo", "nonstereo",                                    # negation bias
    "pre", "post",                                            # misgendering generation: before / after the slot
]
#: Affirmative or negated description (negation bias).
Form = Literal["aff", "neg"]
#: Grammatical case of the pronoun slot: nominative, accusative, dependent possessive (her/his book),
#: independent possessive (hers/his), reflexive.
Case = Literal["nom", "acc", "poss_dep", "poss_indep", "refl"]
#: Stereotype condition of an item (WinoBias pro/anti-stereotypical).
Stereotype = Literal["pro", "anti"]
#: Order in which a two-option forced choice lists its options.
OptionOrder = Literal["MF", "FM"]
#: Which role the pronoun refers to.
ReferentRole = Literal["occupation", "participant", "name", "other"]

CONTEXTS: tuple[str, ...] = Context.__args__  # type: ignore[attr-defined]
FORMS: tuple[str, ...] = Form.__args__  # type: ignore[attr-defined]
CASES: tuple[str, ...] = Case.__args__  # type: ignore[attr-defined]

#: the fewest and the most options the forced-choice protocol shows (2 to 8: studies of they, xe or ze need 3 to 5)
CHOICE_OPTIONS = (2, 8)
#: a stimulus's attributes: data about it that no protocol shows the model (a file's extra columns and a spec's
#: filler attributes in `attrs`, a rating). A user stimulus's id leaves them out (`SeenStimulus`, issue 44).
ATTRIBUTES = ("attrs", "stereotype_rating")


class Stimulus(BaseModel):
    """One stimulus of one dataset: the unit every runner turns into model requests."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)

    dataset: str = Field(min_length=1, description="biaslab dataset name, e.g. 'winopron'")
    upstream_version: str = Field(min_length=1, description="upstream commit or sha256 of the source files")
    item_id: str = Field(min_length=1, description="identifier of the item inside the dataset")
    text: str = Field(min_length=1, description="realized text (with the slot marker when there are options)")
    template: str | None = Field(None, description="upstream template the text was built from")
    slot: str | None = Field(None, description="literal marker in `text` replaced by an option")
    prime: str | None = Field(None, description="sentence shown before the text (WinoPron priming)")
    context: Context | None = None
    form: Form | None = None
    stereotype: Stereotype | None = None
    stereotype_rating: float | None = Field(None, description="e.g. Misersky femininity rating of the antecedent")
    pronoun_set: str | None = Field(None, description="pronoun family of the item: he, she, they, xe, ...")
    grammatical_case: Case | None = None
    options: tuple[str, ...] | None = None
    option_labels: tuple[str, ...] | None = None
    option_texts: tuple[str, ...] | None = None
    option_order: OptionOrder | None = None
    gold: str | None = None
    referent_role: ReferentRole | None = None
    occupation: str | None = None
    participant: str | None = None
    name: str | None = None
    attrs: dict[str, Any] = Field(default_factory=dict, description="dataset-specific extras (JSON)")

    @model_validator(mode="after")
    def _check_consistency(self) -> Stimulus:
        if self.options is not None:
            if len(self.options) < 2:
                raise DataError("options: a choice needs at least two options")
            if len(set(self.options)) != len(self.options):
                raise DataError(f"options: repeated option in {list(self.options)}")
            if any(not o for o in self.options):
                raise DataError("options: empty option string")
            if not self.slot:
                raise DataError("slot: stimuli with options need a slot marker")
            n = self.text.count(self.slot)
            if n != 1:
                raise DataError(f"text: slot marker {self.slot!r} occurs {n} times, expected exactly once")
            if self.option_labels is not None and len(self.option_labels) != len(self.options):
                raise DataError("option_labels: must have one label per option")
            if self.option_texts is not None:
                if len(self.option_texts) != len(self.options):
                    raise DataError("option_texts: must have one text per option")
                prefix = self.text[: self.text.index(self.slot)]
                for option, full in zip(self.options, self.option_texts):
                    if not full.startswith(prefix + option):
                        raise DataError(f"option_texts: {full!r} does not start with the text up to the slot "
                                        f"followed by {option!r}")
        elif self.option_labels is not None or self.option_order is not None or self.option_texts is not None:
            raise DataError("options: option_labels / option_texts / option_order given without options")
        if self.gold is not None and self.options is not None and self.gold not in self.options:
            raise DataError(f"gold: {self.gold!r} is not among options {list(self.options)}")
        return self

    #: whether the id hashes the attributes too (`ATTRIBUTES`): every built-in stimulus, and a user dataset's first
    #: loaded before issue 44 (its declaration's `identity` "all"); `SeenStimulus` says False
    keys_attributes: ClassVar[bool] = True

    @property
    def content_id(self) -> str:
        """Content hash of every field, attributes included (the id of a stimulus that `keys_attributes`)."""
        return content_hash(self.model_dump(mode="json"))

    @property
    def stimulus_id(self) -> str:
        """Content hash of every field (docs/design.md section 3): same content, same id, across runs and machines.
        Where the class does not key its attributes (`SeenStimulus`), they hash as absent (`attrs` {}, no rating),
        so a stimulus without attributes has the same id either way."""
        return self._id_of(self.model_dump(mode="json"))

    def _id_of(self, dump: dict[str, Any]) -> str:
        """`stimulus_id` from this stimulus's `model_dump(mode="json")` (`to_row` hashes the dump it makes anyway)."""
        return content_hash(dump if self.keys_attributes else {**dump, "attrs": {}, "stereotype_rating": None})

    def fill(self, option: str) -> str:
        """The realized text with `option` in the slot (with its agreement, when `option_texts` is set)."""
        if self.slot is None or self.options is None:
            raise DataError("this stimulus has no slot")
        if self.option_texts is not None:
            return self.option_texts[self.options.index(option)]
        return self.text.replace(self.slot, option, 1)

    def option_span(self, option: str) -> tuple[int, int]:
        """Character span [start, end) of `option` in `fill(option)`."""
        start = self.text.index(self.slot)
        return start, start + len(option)

    def to_row(self) -> dict[str, Any]:
        """Flat row for the `stimuli` table (attrs as JSON text), its `stimulus_id` hashed from the same dump."""
        row = self.model_dump(mode="json")
        sid = self._id_of(row)
        row["options"] = list(self.options) if self.options is not None else None
        row["option_labels"] = list(self.option_labels) if self.option_labels is not None else None
        row["option_texts"] = list(self.option_texts) if self.option_texts is not None else None
        row["attrs"] = json.dumps(self.attrs, sort_keys=True, ensure_ascii=False)
        row["stimulus_id"] = sid
        return row


class SeenStimulus(Stimulus):
    """A user's stimulus, keyed by what the model sees and what the stimulus tests, not by its attributes
    (`ATTRIBUTES`: `attrs` and `stereotype_rating`, issue 44): editing a rating keeps the stimulus, its id and its
    evidence (`biaslab data load` updates its row and records the edit, `attribute_edits`); editing its text, prime,
    options, labels, gold, condition or pronoun family makes a new stimulus. Every field is still stored."""

    keys_attributes: ClassVar[bool] = False


def stimulus_type(identity: str) -> type[Stimulus]:
    """The stimulus class of a user dataset's identity scheme (`DatasetDeclaration.identity`): "seen" keys what the
    model sees (`SeenStimulus`), "all" every field (`Stimulus`)."""
    if identity not in ("all", "seen"):
        raise DataError(f"identity {identity!r}: use 'all' or 'seen'")
    return SeenStimulus if identity == "seen" else Stimulus


STIMULUS_COLUMNS: tuple[str, ...] = ("stimulus_id", *Stimulus.model_fields.keys())
