"""Parsers for loader options: they arrive typed from Python and as strings from the command line."""

from __future__ import annotations

import re
from typing import Any

from ..errors import UsageError


def parse_bool(value: Any, option: str) -> bool:
    """A flag given as a bool or as "true"/"1"/"yes" / "false"/"0"/"no" (any case, surrounding spaces ignored)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no"):
        return False
    raise UsageError(f"option {option}: expected true or false, got {value!r}")


def pop_flag(options: dict[str, Any], name: str, flag: bool) -> tuple[bool, dict[str, Any]]:
    """A command-line flag that may also come as a KEY=VALUE option (e.g. `--accept-modified` or
    `-o accept_modified=true`): (flag or the option's value, the options without it)."""
    if name not in options:
        return flag, options
    rest = dict(options)
    return parse_bool(rest.pop(name), name) or flag, rest


def parse_int(value: Any, option: str) -> int:
    """An integer given as an int (not a bool) or as a string of optional sign and digits."""
    if isinstance(value, bool):
        raise UsageError(f"option {option}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise UsageError(f"option {option}: expected an integer, got {value!r}")
