"""The one way biaslab puts a name or a path into SQL text (docs/design.md section 2; issue "SQL run from files").

Values go into SQL as bound parameters (``con.execute(sql, [value])``) wherever DuckDB accepts one. Where it does
not (identifiers, and the file names of ``ATTACH``, ``COPY ... TO`` and table functions inside a view definition),
the text goes through `identifier` or `literal` here, which quote exactly as DuckDB's parser reads: an identifier
in double quotes with inner double quotes doubled, a string in single quotes with inner single quotes doubled.
A NUL character is refused (DuckDB would end the text there).
"""

from __future__ import annotations

from ..errors import UsageError


class QuotingError(UsageError):
    """A name or path that cannot go into SQL text (not text, or with a NUL character)."""


def _check(text: str, what: str) -> str:
    if not isinstance(text, str):
        raise QuotingError(f"{what} must be text, got {type(text).__name__}")
    if "\0" in text:
        raise QuotingError(f"{what} {text!r} contains a NUL character")
    return text


def identifier(name: str) -> str:
    """`name` as a quoted SQL identifier: ``"name"``, inner ``"`` doubled."""
    return '"' + _check(name, "identifier").replace('"', '""') + '"'


def literal(text: str) -> str:
    """`text` as a quoted SQL string literal: ``'text'``, inner ``'`` doubled."""
    return "'" + _check(text, "string").replace("'", "''") + "'"


def identifiers(names) -> str:
    """Comma-separated quoted identifiers."""
    return ", ".join(identifier(n) for n in names)
