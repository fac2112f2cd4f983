"""Pydantic validation errors as one line a person reads: the first error's field, a plain message ("must be at
least 1" rather than pydantic's "Input should be greater than or equal to 1") and the value given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

_BOUNDS = {"greater_than": "must be > {gt}", "greater_than_equal": "must be at least {ge}",
           "less_than": "must be < {lt}", "less_than_equal": "must be at most {le}"}


@dataclass(frozen=True)
class FieldError:
    """The first error of a validation: `field` (dotted path, "" for the whole object), `kind` (pydantic's error
    type, e.g. "extra_forbidden"), `message` (plain words, no field name) and `given` (the input, when one)."""

    field: str
    kind: str
    message: str
    given: Any = None
    has_input: bool = False


def first_error(exc: ValidationError) -> FieldError:
    """The first error of `exc`, phrased plainly (see the module docstring)."""
    error = exc.errors()[0]
    field = ".".join(str(p) for p in error.get("loc", ()))
    kind = error.get("type", "")
    if kind in _BOUNDS:
        bound = {k: (int(v) if isinstance(v, float) and v.is_integer() else v)
                 for k, v in (error.get("ctx") or {}).items()}
        message = _BOUNDS[kind].format(**bound)
    else:
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return FieldError(field, kind, message, error.get("input"), "input" in error)
