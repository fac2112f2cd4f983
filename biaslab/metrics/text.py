"""Text as a table shows it, without pandas (the command line's start-up path imports it)."""

from __future__ import annotations

import unicodedata


def printable(text: str) -> str:
    """Control characters other than newline and tab shown escaped (a terminal would interpret ESC)."""
    if text.isprintable():
        return text
    return "".join(c if c in "\n\t" or unicodedata.category(c) != "Cc" else f"\\x{ord(c):02x}" for c in text)
