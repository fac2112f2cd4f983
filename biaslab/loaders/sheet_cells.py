"""Spreadsheet-safe cells for the CSV sheets biaslab writes for people to fill in (the annotation sheet).

A cell whose text starts with `=`, `+`, `-`, `@`, a tab or a carriage return is read as a formula by spreadsheet
programs (CSV / formula injection; OWASP "CSV Injection"): a generated continuation such as `=HYPERLINK(...)` would
run when the sheet is opened. OWASP's rule, made reversible:

* `neutralize(text)`: a text that starts with any number of `'` followed by one of those characters gets one more
  `'` in front (`=1+1` -> `'=1+1`, `'=1` -> `''=1`); every other text is unchanged.
* `restore(text)`: the inverse, one leading `'` removed from a text of that shape (`'=1+1` -> `=1+1`).

So `restore(neutralize(t)) == t` for every text `t`, and a cell a person typed (not starting with `'` before a
trigger character) is read as typed.
"""

from __future__ import annotations

import re

#: characters that make a spreadsheet cell a formula when they come first (OWASP)
TRIGGERS = "=+-@\t\r"
_NEUTRALIZED = re.compile(r"'+[=+\-@\t\r]")
_DANGEROUS = re.compile(r"'*[=+\-@\t\r]")


def neutralize(text: str) -> str:
    """`text` with one `'` in front when it starts with `'`* then a character of `TRIGGERS`; else `text`."""
    return "'" + text if isinstance(text, str) and _DANGEROUS.match(text) else text


def restore(text: str) -> str:
    """The inverse of `neutralize`: one leading `'` removed when `text` starts with `'`+ then a trigger."""
    return text[1:] if isinstance(text, str) and _NEUTRALIZED.match(text) else text
