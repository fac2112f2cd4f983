"""The errors biaslab raises on purpose, one root and a few kinds (issue "Errors").

Every error biaslab means the user to read derives from `BiaslabError`, and each kind also derives from the builtin
it replaced (``except ValueError`` and ``pytest.raises(ValueError)`` keep catching a `UsageError`). The command
lines (`biaslab`, `runners`) show a `BiaslabError` as one line, ``Error: <first line of the message>``, with exit
status 1 (a `UsageError`: 2); anything else is a bug in biaslab and is shown with its traceback and the line
`bug_report`. ``--debug`` (or ``BIASLAB_DEBUG=1``) shows the traceback of every error.

A module of the package root: it imports nothing from biaslab, and every layer may import it.
"""

from __future__ import annotations

#: where a bug in biaslab is reported (the one place that names it)
ISSUES_URL = "https://github.com/biaslab/biaslab/issues"


def bug_report(version: str) -> str:
    """The line the command lines print after the traceback of an error that is not a `BiaslabError`."""
    return f"This is a bug in biaslab {version}: please report it with the traceback above at {ISSUES_URL}"


class BiaslabError(Exception):
    """The root of the errors biaslab raises on purpose: the message says what is wrong and, where it can, how to
    put it right. The command lines show it as one line (exit status 1); ``--debug`` adds the traceback."""


class UsageError(BiaslabError, ValueError):
    """A bad argument or option: an unknown name, a value out of range or of the wrong form, options that do not
    go together, a path that names nothing. Raised before any work is done where possible. The command lines show
    one line and exit with status 2 (like click's own usage errors)."""


class DataError(BiaslabError, ValueError):
    """Bad or missing input data: a dataset file, a study spec, a prompt file, a model's files, or arrays handed
    to a statistic (empty, NaN, of unequal lengths). The message names the file (and line or field) where it can;
    `biaslab.loaders.errors.DataError` is the loaders' kind that locates it in a file. One line, exit status 1."""


class NoEvidence(BiaslabError, ValueError):
    """The warehouse holds none of the evidence a study or command reads: the message says what is missing and
    the command that collects it. `biaslab metrics` exits 1 with one line; `biaslab report` also writes a page
    that says so."""


class WarehouseError(BiaslabError, RuntimeError):
    """A warehouse cannot be opened, read or written as asked (locked, corrupt, not a warehouse, of a newer
    schema), or a statement of `biaslab sql` is refused or fails. One line, exit status 1."""


class EngineError(BiaslabError, RuntimeError):
    """An engine failed for good while serving requests (a server's error after its retries, an engine that does
    not start, an answer the backend cannot use): one line, exit status 1, and the run is marked failed; nothing
    of the chunk in flight is stored."""


class Unsupported(BiaslabError, ValueError, RuntimeError):
    """A capability, protocol, engine, device or model combination that is not supported (e.g. PLL on vLLM, 4-bit
    quantization without a GPU, a model whose tokenizer has no BOS or EOS token); raised before any work is done
    where possible. One line, exit status 1."""


class MissingPackage(BiaslabError, ImportError):
    """An optional package a feature needs is not installed; the message names what to install. One line, exit
    status 1."""


__all__ = ["ISSUES_URL", "bug_report", "BiaslabError", "UsageError", "DataError", "NoEvidence", "WarehouseError",
           "EngineError", "Unsupported", "MissingPackage"]
