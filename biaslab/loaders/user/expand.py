"""The expansion of a template spec (`spec.Spec`) into stimuli: template x filler combination x context x order
(see `biaslab.loaders.user.spec` for the keys and rules)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ... import errors
from ...lexicon.pronouns import agreement_texts, capitalize, sentence_case, starts_sentence
from ...schema import CONTEXTS, SeenStimulus, Stimulus
from ...schema.errors import first_error
from ..errors import DataError
from .files import UPSTREAM_VERSION
from .spec import AGREE, NAMED_FIELDS, STIMULUS_FIELDS, Spec, Template, check_marks, placeholders, render

#: option orders that fill the `option_order` field
ORDER_CODES = {("female", "male"): "MF", ("male", "female"): "FM"}


#: the most stimuli a spec may expand to unless the user raises it (`--max-stimuli`)
MAX_STIMULI = 1_000_000


def expansion_size(spec: Spec) -> int:
    """How many stimuli the spec expands to: sum over templates of the product of its varying filler lists' lengths,
    times the contexts, times the option orders (exact integers, nothing expanded)."""
    orders = len(spec.orders) if spec.orders else 1
    total = 0
    for index, template in enumerate(spec.templates):
        slots = [n for n, _ in placeholders(template.text, f"templates[{index}]")
                 if n != spec.slot and AGREE not in n]
        combos = 1
        for slot in dict.fromkeys(slots):
            if slot not in template.fill:
                combos *= len(spec.fillers.get(slot, ())) or 1
        total += combos * len(spec.contexts) * orders
    return total


def expand(spec: Spec, name: str, path: Path, max_stimuli: int = MAX_STIMULI,
           kind: type[Stimulus] = SeenStimulus) -> list[Stimulus]:
    """Every stimulus of the spec (of class `kind`: `SeenStimulus` keys what the model sees), in template, filler,
    context and order order; DataError naming the spec and the template (or context) for a problem, for two
    stimuli with one id, and, before anything is expanded, for a spec that comes to more than `max_stimuli`
    stimuli (`expansion_size`)."""
    size = expansion_size(spec)
    if size > max_stimuli:
        raise DataError(path, f"expands to {size:,} stimuli (templates x fillers x contexts x orders), above the bound "
                              f"of {max_stimuli:,}; raise it with --max-stimuli if you mean it")
    out: list[Stimulus] = []
    for index, template in enumerate(spec.templates):
        where = f"templates[{index}]"
        try:
            out.extend(_template_stimuli(spec, template, template.id or f"t{index + 1}", name, where, kind))
        except ValueError as exc:
            raise DataError(path, str(exc).removeprefix(f"{where}: "), field=where) from None
    first: dict[str, Stimulus] = {}
    for s in out:
        other = first.setdefault(s.stimulus_id, s)
        if other is not s:
            what = "differ only in attributes (which are not part of a stimulus's identity)" \
                if other.content_id != s.content_id else "are the same stimulus"
            raise DataError(path, f"two stimuli of item {s.item_id!r} show the model the same text, prime and options "
                                  f"and {what}; give them different item ids or texts", field="templates")
    return out


def _slots(spec: Spec, template: Template, where: str) -> list[str]:
    """The filler slots of a template (without the option slot), checked: the option slot once, every other slot
    with a filler list or a fixed value."""
    check_marks(template.text, spec.slot, where)
    found = [(n, label) for n, label in placeholders(template.text, where) if AGREE not in n]
    names = [n for n, _ in found]
    if names.count(spec.slot) != 1:
        raise errors.DataError(f"{where}: the option slot {{{spec.slot}}} appears {names.count(spec.slot)} times in "
                               f"{template.text!r} (exactly once needed)")
    if any(label for _, label in found):
        raise errors.DataError(f"{where}: {{slot:label}} belongs in a context's prime, not in a template")
    others = list(dict.fromkeys(n for n in names if n != spec.slot))
    for n in others:
        if n not in template.fill and n not in spec.fillers:
            raise errors.DataError(f"{where}: slot {{{n}}} has no filler list (fillers: "
                                   f"{', '.join(spec.fillers) or 'none'}) and no fill value")
    labels = [o.label for o in spec.options]
    if template.gold is not None and template.gold not in labels:
        raise errors.DataError(f"{where}: gold {template.gold!r} is not an option label ({labels})")
    for c in spec.contexts:
        check_marks(c.prime or "", spec.slot, f"context {c.name!r}")
        for n, label in placeholders(c.prime or "", f"contexts.{c.name}"):
            if AGREE in n:
                continue
            if n == spec.slot and label not in labels:
                raise errors.DataError(f"context {c.name!r}: the prime's {{{n}:{label}}} names no option label "
                                       f"({labels})")
            if n != spec.slot and n not in others:
                raise errors.DataError(f"context {c.name!r}: the prime's slot {{{n}}} is not a slot of "
                                       f"{template.text!r}")
    return others


def _filler_fields(spec: Spec, template: Template, slots: list[str], combo) -> tuple[dict, dict, dict]:
    """(slot values, stimulus fields, attrs) of one filler combination."""
    values, fields, attrs = dict(template.fill), dict(template.fields), {**template.attrs}
    varying = [n for n in slots if n not in template.fill]
    for slot, filler in zip(varying, combo):
        values[slot] = filler.value
        for key, value in filler.attrs.items():
            if key in STIMULUS_FIELDS:
                fields[key] = value
            else:
                attrs[f"{slot}_{key}"] = value
    for slot in slots:
        attrs[slot] = values[slot]
        if slot in NAMED_FIELDS:
            fields[slot] = values[slot]
    return values, fields, attrs


def _template_stimuli(spec: Spec, template: Template, tid: str, name: str, where: str,
                      kind: type[Stimulus]) -> list[Stimulus]:
    slots = _slots(spec, template, where)
    varying = [n for n in slots if n not in template.fill]
    marks = any(AGREE in n for n, _ in placeholders(template.text, where))  # a literal "|" is no mark
    forms = {o.label: o.realized(template.case, where) for o in spec.options}
    out = []
    for combo in itertools.product(*[spec.fillers[n] for n in varying]):
        values, fields, attrs = _filler_fields(spec, template, slots, combo)
        item = (template.item_id.format(id=tid, **values) if template.item_id
                else ".".join([tid, *(values[n] for n in varying)]))
        text = render(template.text, values, spec.slot, lambda label, before: spec.marker)  # marks: "was/were"
        marked = _marked_texts(spec, template.text, values, forms) if marks else None
        for context in spec.contexts:
            prime = _prime(spec, context.prime, values, forms) if context.prime else None
            for order in spec.orders or [[o.label for o in spec.options]]:
                out.append(_stimulus(spec, template, name, item, text, prime, context.name, order, forms,
                                     fields, {**attrs, "template_id": tid}, where, marked, kind))
    return out


def _option_text(spec: Spec, forms: dict[str, str]):
    """The slot text of option `label` (capitalized where it starts a sentence), for `render`."""
    def option(label: str, before: str) -> str:
        return capitalize(forms[label]) if spec.capitalize and starts_sentence(before, after_closer=True) \
            else forms[label]
    return option


def _agree(spec: Spec, label: str | None = None):
    """An agreement mark's form (`render`'s `agree`): plural after an option whose label is in `spec.plural` (the
    option `label` when given: a template's own option; else the prime's last option slot)."""
    return lambda singular, plural, last: plural if (label if label is not None else last) in spec.plural \
        else singular


def _prime(spec: Spec, prime: str, values: dict[str, str], forms: dict[str, str]) -> str:
    return render(prime, values, spec.slot, _option_text(spec, forms), _agree(spec))


def _marked_texts(spec: Spec, template: str, values: dict[str, str], forms: dict[str, str]) -> dict[str, str]:
    """Per option label, the template's full text with that option in the slot and every agreement mark agreeing
    with it."""
    option = _option_text(spec, forms)
    return {label: render(template, values, spec.slot, lambda _, before, lb=label: option(lb, before),
                          _agree(spec, label)) for label in forms}


def _stimulus(spec: Spec, template: Template, name: str, item: str, text: str, prime: str | None, context: str,
              order: list[str], forms: dict[str, str], fields: dict[str, Any], attrs: dict[str, Any],
              where: str, marked: dict[str, str] | None = None, kind: type[Stimulus] = Stimulus) -> Stimulus:
    labels = tuple(order)
    options = tuple(forms[label] for label in labels)
    if spec.capitalize:
        options = sentence_case(options, text, spec.marker, after_closer=True)
    row: dict[str, Any] = {**fields, "dataset": name, "upstream_version": UPSTREAM_VERSION, "item_id": item,
                           "text": text, "template": template.text, "slot": spec.marker, "prime": prime,
                           "grammatical_case": template.case, "options": options, "option_labels": labels}
    if marked is not None:  # the template's agreement marks, per option
        row["option_texts"] = tuple(marked[label] for label in labels)
    elif spec.plural and template.case:
        row["option_texts"] = agreement_texts(text, options, labels, template.case,
                                              plural_labels=tuple(spec.plural), slot=spec.marker)
    if template.gold is not None:
        row["gold"] = options[labels.index(template.gold)]
        if spec.pronouns and template.gold in spec.pronouns:
            row["pronoun_set"] = template.gold
    if context in CONTEXTS:
        row["context"] = context
    elif context != "none" or len(spec.contexts) > 1 or prime is not None:
        attrs["context"] = context
    code = ORDER_CODES.get(labels)
    if code is not None:
        row["option_order"] = code
    elif spec.orders and len(spec.orders) > 1:
        attrs["option_order"] = ",".join(labels)
    row["attrs"] = attrs
    try:
        return kind(**row)
    except ValidationError as exc:
        error = first_error(exc)
        raise errors.DataError(f"{where}: {error.field or 'stimulus'}: {error.message}") from None


def spec_pronouns(spec: Spec) -> dict[str, dict[str, tuple[str, ...]]] | None:
    """The gen protocol's families of the spec (each case's forms as a tuple; a single string is one form)."""
    if spec.pronouns is None:
        return None
    return {family: {case: (forms,) if isinstance(forms, str) else tuple(forms) for case, forms in cases.items()}
            for family, cases in spec.pronouns.items()}
