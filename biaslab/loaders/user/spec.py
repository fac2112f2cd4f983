"""Stimuli from a template spec: `biaslab data expand spec.yaml` / `biaslab data load --spec spec.yaml`.

A spec (YAML, or TOML with the same keys) declares templates with named slots, filler lists, the options of one
slot and their labels, contexts (prime sentences) and option orders; it expands to the cross product, as the
upstream scripts that built Winogender and WinoPron did. Validated with pydantic: an unknown key, a template whose
option slot does not appear (or appears twice), a slot with no filler list, an empty filler list, a repeated option
or label, an order that is not a permutation of the labels each end in one line naming the spec and the key.

Keys (docs/your-own-study.md walks through one):

* `name`, `description`; `protocols` (prob, choice, gen; the default first); `prompt` (choice: a prompt JSON file,
  relative to the spec, or the prompt's fields inline; default the built-in forced-choice prompt); `pronouns`
  (gen: family -> case -> forms, the first-pronoun detector's vocabulary);
* `slot` (default `pronoun`): the template slot the options fill; `marker` (default `BLANK`): what stands for it in
  the stored text (the built-in forced-choice prompt names BLANK);
* `options`: each a `label` and either `text` or `forms` (case -> text, for templates that declare a `case`);
  capitalized where the slot starts a sentence (`capitalize`, default true); `plural`: labels whose option takes
  plural agreement: an agreement mark `{singular|plural}` (e.g. `{was|were}`, `{has|have}`, `{is|are}`) in a
  template or a prime takes the plural form after an option of those labels and the singular after any other
  option (the last option slot before the mark decides); a template's stored text shows both ("BLANK was/were
  late") and each option's full text (`option_texts`) its own; without marks, a nominative template gets English
  plural agreement of the word after the slot ("they were");
* `fillers`: slot name -> values, each a string or {value, and attributes}; an attribute named like a stimulus field
  (`stereotype_rating`, `referent_role`, ...) sets that field, any other goes to `attrs` as `<slot>_<attribute>`;
  the value itself is `attrs[<slot>]` and, for the slots `occupation`, `participant` and `name`, that field;
* `templates`: each `text` with `{slot}` placeholders (`{{` and `}}` for literal braces), an `id` (default `t1`,
  `t2`, ...), an optional `case`, `gold` (an option label), `fill` (slot -> a value fixed for this template),
  `fields` (further stimulus fields, e.g. referent_role) and `attrs`, and an optional `item_id` pattern (default
  `{id}.{value}.{value}...` over the slots that vary);
* `contexts`: each a `name` and an optional `prime`, a sentence with the template's slots and `{pronoun:label}` for
  the option of that label; a name that is a built-in context (`unprimed`, `primed_f`, ...) fills the `context`
  field, any other `attrs.context`; default: one context without a prime;
* `orders`: option orders as label lists (default: the options' own order); `[female, male]` / `[male, female]`
  fill `option_order` MF / FM, others `attrs.option_order`;
* `optional`: filler attributes some fillers of a slot may leave out; any other attribute must be on every filler
  of its slot (a misspelled one, `ratign` beside `rating`, is refused);
* `unit`: the study's independent unit for correlations, a filler slot such as `name` when every name is asked in
  several templates (templates x names are not independent observations); `metrics options --spearman` then
  correlates per unit, with a bootstrap interval over units (default: the item).

One stimulus per template x filler combination x context x order. Stimuli of one template and filler combination
share their `item_id` across contexts and orders: the item is the unit of paired contrasts and intervals.
"""

from __future__ import annotations

import string
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ... import errors
from ...schema import CASES, Stimulus
from ...schema.errors import first_error
from ..errors import DataError
from .bounded import MAX_SPEC_BYTES, check_depth, guarded, load_yaml, small_file

NAMED_FIELDS = ("occupation", "participant", "name")
#: stimulus fields a filler attribute or a template's `fields` may set
STIMULUS_FIELDS = set(Stimulus.model_fields) - {"dataset", "upstream_version", "item_id", "text", "attrs"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Option(_Strict):
    label: str = Field(min_length=1)
    text: str | None = None
    forms: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one(self) -> Option:
        if (self.text is None) == (self.forms is None):
            raise errors.DataError(f"option {self.label!r}: give either text or forms (case -> text)")
        unknown = sorted(set(self.forms or {}) - set(CASES))
        if unknown:
            raise errors.DataError(f"option {self.label!r}: unknown case(s) {unknown}; cases: {list(CASES)}")
        return self

    def realized(self, case: str | None, where: str) -> str:
        if self.text is not None:
            return self.text
        if case is None or case not in self.forms:
            raise errors.DataError(f"{where}: option {self.label!r} has no form for case {case!r} (give the template a "
                                   f"case among {sorted(self.forms)})")
        return self.forms[case]


class Filler(_Strict):
    value: str = Field(min_length=1)
    attrs: dict[str, Any] = Field(default_factory=dict)


class Template(_Strict):
    text: str = Field(min_length=1)
    id: str | None = None
    case: str | None = None
    gold: str | None = None
    item_id: str | None = None
    fill: dict[str, str] = Field(default_factory=dict)
    fields: dict[str, Any] = Field(default_factory=dict)
    attrs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("case")
    @classmethod
    def _case(cls, value: str | None) -> str | None:
        if value is not None and value not in CASES:
            raise errors.DataError(f"unknown case {value!r}; cases: {list(CASES)}")
        return value


class Context(_Strict):
    name: str = Field(min_length=1)
    prime: str | None = None


class Spec(_Strict):
    """A template spec (see the module docstring)."""

    name: str | None = None
    description: str = ""
    protocols: tuple[str, ...] = ("prob",)
    prompt: str | dict[str, Any] | None = None
    pronouns: dict[str, dict[str, list[str] | str]] | None = None
    slot: str = "pronoun"
    marker: str = "BLANK"
    capitalize: bool = True
    options: list[Option] = Field(min_length=2)
    plural: list[str] = Field(default_factory=list)
    fillers: dict[str, list[Filler]] = Field(default_factory=dict)
    templates: list[Template] = Field(min_length=1)
    contexts: list[Context] = Field(default_factory=lambda: [Context(name="none")])
    orders: list[list[str]] | None = None
    #: filler attributes some fillers of a slot may leave out (any other attribute must be on every filler)
    optional: list[str] = Field(default_factory=list)
    #: the study's unit for correlations: a filler slot (e.g. name) or an attrs key (`metrics options --unit`)
    unit: str | None = None

    @field_validator("fillers", mode="before")
    @classmethod
    def _filler_forms(cls, value: Any) -> Any:
        """A filler is a bare value or a mapping of `value` and its attributes."""
        def one(item: Any) -> Any:
            if isinstance(item, (str, int, float)) and not isinstance(item, bool):
                return {"value": str(item)}
            if isinstance(item, dict) and "value" in item:
                return {"value": str(item["value"]), "attrs": {k: v for k, v in item.items() if k != "value"}}
            return item
        if isinstance(value, dict):
            return {k: [one(v) for v in vs] if isinstance(vs, list) else vs for k, vs in value.items()}
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        labels = [o.label for o in self.options]
        if len(set(labels)) != len(labels):
            raise errors.DataError(f"options: label repeated in {labels}")
        for key, values in self.fillers.items():
            if not values:
                raise errors.DataError(f"fillers.{key}: empty list")
            _same_attributes(key, values, set(self.optional))
        for order in self.orders or []:
            if sorted(order) != sorted(labels):
                raise errors.DataError(f"orders: {order} is not an order of the labels {labels}")
        for label in self.plural:
            if label not in labels:
                raise errors.DataError(f"plural: {label!r} is not an option label ({labels})")
        names = [c.name for c in self.contexts]
        if len(set(names)) != len(names):
            raise errors.DataError(f"contexts: name repeated in {names}")
        attributes = {f"{slot}_{a}" for slot, values in self.fillers.items() for f in values for a in f.attrs}
        if self.unit is not None and self.unit not in {*self.fillers, *attributes, "template_id", "item_id"}:
            raise errors.DataError(f"unit: {self.unit!r} is not a filler slot ({', '.join(self.fillers) or 'none'}), "
                                   f"a filler attribute, template_id or item_id")
        return self


def _same_attributes(slot: str, fillers: list[Filler], optional: set[str]) -> None:
    """Every filler of a slot has the same attributes, but for the declared optional ones: an attribute some
    fillers have and another lacks is a typo (`ratign`) until declared in `optional:`."""
    seen: dict[str, int] = {}
    for index, filler in enumerate(fillers):
        for name in filler.attrs:
            seen.setdefault(name, index)
    for index, filler in enumerate(fillers):
        missing = sorted(set(seen) - set(filler.attrs) - optional)
        if missing:
            first = missing[0]
            others = sorted(set(filler.attrs) - {a for a in seen if seen[a] != index} - optional)
            hint = f"; it has {others[0]!r} instead (a typo?)" if others else ""
            raise errors.DataError(f"fillers.{slot}[{index}] ({filler.value!r}): no attribute {first!r}, which "
                                   f"fillers.{slot}[{seen[first]}] has{hint}; give every {slot} filler the same "
                                   f"attributes, or list {first!r} under optional:")


#: what a file given as --spec holds when its name says it is a table of stimuli (`biaslab data load --file`)
TABLE_SUFFIXES = {".csv": "CSV", ".tsv": "TSV", ".jsonl": "JSON lines", ".ndjson": "JSON lines",
                  ".parquet": "Parquet"}


def read_spec(path: Path) -> tuple[Spec, bytes]:
    """The validated spec of a YAML or TOML file and its bytes; DataError naming the file and key otherwise (a
    table of stimuli given as a spec is named as such)."""
    path = Path(path)
    kind = TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is not None and path.is_file():
        raise DataError(path, f"a table of stimuli ({kind}), not a template spec (YAML or TOML): load it with "
                              f"`biaslab data load --file {path} --name NAME`")
    raw = small_file(path, MAX_SPEC_BYTES, "a spec")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                        line=raw[: exc.start].count(b"\n") + 1) from None
    data = _parse(path, text)
    try:
        return Spec.model_validate(data), raw
    except ValidationError as exc:
        error = first_error(exc)
        field = error.field or None
        if error.kind == "extra_forbidden":
            raise DataError(path, f"unknown key {field.rsplit('.', 1)[-1]!r}", field=field) from None
        raise DataError(path, error.message, field=field) from None


def _parse(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".toml":
        try:
            with guarded(path):
                return check_depth(tomllib.loads(text), path)
        except tomllib.TOMLDecodeError as exc:
            raise DataError(path, f"invalid TOML: {exc}") from None
    import yaml

    try:
        data = load_yaml(text, path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(path, f"invalid YAML: {getattr(exc, 'problem', None) or exc}",
                        line=mark.line + 1 if mark is not None else None) from None
    if not isinstance(data, dict):
        raise DataError(path, f"a spec is one mapping of keys (name, options, templates, ...), got "
                        f"{type(data).__name__}")
    return data


def placeholders(text: str, where: str) -> list[tuple[str, str]]:
    """(slot name, label after ':') of every `{...}` placeholder of `text`, in order."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise errors.DataError(f"{where}: {exc} (write {{{{ and }}}} for literal braces)") from None
    return [(name, spec or "") for _, name, spec, _ in parsed if name is not None]


#: what marks a placeholder as an agreement mark `{singular|plural}` rather than a slot
AGREE = "|"


def agreement_mark(name: str, where: str) -> tuple[str, str] | None:
    """(singular, plural) of an agreement mark `{singular|plural}`; None for a slot's name; DataError for a mark
    with another number of forms."""
    if AGREE not in name:
        return None
    forms = name.split(AGREE)
    if len(forms) != 2 or not all(f.strip() for f in forms):
        raise errors.DataError(f"{where}: agreement mark {{{name}}} must be {{singular|plural}}, e.g. {{was|were}}")
    return forms[0], forms[1]


def check_marks(text: str, slot: str, where: str) -> None:
    """Every agreement mark of `text` well formed and after an option slot (it agrees with the last one before it)."""
    seen_slot = False
    for name, _ in placeholders(text, where):
        if name == slot:
            seen_slot = True
        elif agreement_mark(name, where) is not None and not seen_slot:
            raise errors.DataError(f"{where}: agreement mark {{{name}}} comes before any {{{slot}}}: it agrees with "
                                   f"the option slot before it")


def render(text: str, values: dict[str, str], slot: str, slot_text, agree=None) -> str:
    """`text` with every filler placeholder replaced by its value, `{slot}` / `{slot:label}` by
    `slot_text(label, text_before)` (label "" for the plain slot; `text_before` the rendered text so far), and
    every agreement mark `{singular|plural}` by `agree(singular, plural, label)`, `label` that of the last option
    slot before it (see `check_marks`)."""
    out: list[str] = []
    last = ""
    for literal, name, label, _ in string.Formatter().parse(text):
        out.append(literal)
        if name is None:
            continue
        mark = agreement_mark(name, "text")
        if mark is not None:
            out.append(agree(*mark, last) if agree is not None else f"{mark[0]}/{mark[1]}")
        elif name == slot:
            last = label or ""
            out.append(slot_text(last, "".join(out)))
        else:
            out.append(values[name])
    return "".join(out)
