"""The error types of `biaslab.errors` and how the command lines show them (issue "Errors", item 1).

Every exception class biaslab defines derives from `BiaslabError`; biaslab raises no builtin exception on purpose
except the internal assertions listed in `INTERNAL`; a `BiaslabError` reads as one line (exit 1, a `UsageError` 2),
anything else as a bug: its traceback and the line `bug_report`, exit 1; --debug and BIASLAB_DEBUG=1 show the
traceback of every error.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import biaslab
from biaslab import errors, loaders
from biaslab.cli.main import biaslab as biaslab_cli
from biaslab.cli.runners_cli import runners
from biaslab.errors import BiaslabError, bug_report
from biaslab.warehouse import Warehouse

PACKAGE = Path(biaslab.__file__).resolve().parent

#: raises of builtin exceptions that stay builtins: internal assertions, a bug in biaslab if ever raised (shown with
#: a traceback), as (file, exception) -> how many
INTERNAL = Counter({
    ("biaslab/__init__.py", "AttributeError"): 1,          # module __getattr__: Python's own protocol
    ("biaslab/loaders/__init__.py", "AttributeError"): 1,  # module __getattr__ (names imported on first use)
    ("biaslab/cli/runners_cli.py", "AttributeError"): 1,  # module __getattr__ (the commands imported when used)
    ("biaslab/warehouse/__init__.py", "AttributeError"): 1,  # module __getattr__ (TABLE_KEYS read on first use)
    ("biaslab/warehouse/store.py", "AttributeError"): 1,   # module __getattr__ (TABLE_KEYS read on first use)
    ("biaslab/engines/chat.py", "NotImplementedError"): 1,  # ChatBackend.calls: each chat engine's own
    ("biaslab/cli/__init__.py", "KeyboardInterrupt"): 1,    # the SIGINT handler: Python's own Ctrl-C, noted first
    ("biaslab/engines/hf/backend.py", "ValueError"): 1,    # batch sizes that do not partition the prompts
    ("biaslab/engines/hf/kvcache.py", "ValueError"): 2,    # prompts of several groups in one batch
    ("biaslab/engines/hf/kvcache.py", "NotImplementedError"): 1,  # a cache operation slot layers never get
    ("biaslab/engines/openai_http.py", "AssertionError"): 1,  # unreachable
    ("biaslab/lexicon/tango_convert.py", "RuntimeError"): 1,  # "internal error: parse offsets ..."
    ("biaslab/metrics/misgendering/stats.py", "TypeError"): 1,  # a str where a token sequence belongs (Python API)
    ("biaslab/runners/prompting.py", "ValueError"): 1,     # caught on the spot (a chat template drops the system text)
    ("biaslab/runners/protocols/prob.py", "ValueError"): 1,  # a chunk mixing PLL schemes
    ("biaslab/schema/evidence.py", "ValueError"): 2,       # evidence rows built with unknown or ragged columns
    ("biaslab/views/macros.py", "RuntimeError"): 2,        # packaged SQL files that require each other wrongly
    ("biaslab/warehouse/migrations.py", "RuntimeError"): 1,  # packaged migrations not numbered 001..N
})


def _exception_classes() -> list[type]:
    """Every exception class defined in a module of biaslab (each module imported)."""
    found = set()
    for info in pkgutil.walk_packages(biaslab.__path__, "biaslab."):
        module = importlib.import_module(info.name)
        found |= {obj for obj in vars(module).values()
                  if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__}
    return sorted(found, key=lambda c: (c.__module__, c.__name__))


def test_every_exception_class_derives_from_biaslab_error():
    classes = _exception_classes()
    names = {f"{c.__module__}.{c.__name__}" for c in classes}
    assert {"biaslab.sql.quoting.QuotingError", "biaslab.loaders.fetch.FetchError", "biaslab.warehouse.guard.Stopped",
            "biaslab.engines.openai_http.ServerError", "biaslab.metrics.studies.PairError"} <= names
    # exempt: warning categories (passed to warnings.warn, never raised) and signals that are not errors
    # (RunInterrupted is a KeyboardInterrupt, so that no `except Exception` swallows a SIGTERM)
    outside = [f"{c.__module__}.{c.__name__}" for c in classes
               if not issubclass(c, BiaslabError) and not issubclass(c, Warning) and issubclass(c, Exception)]
    assert outside == []
    signals = [c.__name__ for c in classes if not issubclass(c, Exception)]
    assert signals == ["RunInterrupted"]


def test_each_kind_is_also_the_builtin_it_replaces_and_the_old_paths_still_work():
    from biaslab.engines.base import EngineError, Unsupported
    from biaslab.loaders.errors import DataError
    from biaslab.metrics.missing import NoEvidence
    from biaslab.metrics.studies import PairError
    from biaslab.sql.quoting import QuotingError
    from biaslab.warehouse import WarehouseError

    assert issubclass(errors.UsageError, ValueError) and issubclass(errors.DataError, ValueError)
    assert issubclass(errors.NoEvidence, ValueError) and issubclass(errors.Unsupported, (ValueError, RuntimeError))
    assert issubclass(errors.Unsupported, RuntimeError) and issubclass(errors.MissingPackage, ImportError)
    assert issubclass(errors.WarehouseError, RuntimeError) and issubclass(errors.EngineError, RuntimeError)
    assert (EngineError, Unsupported, NoEvidence, WarehouseError) == (
        errors.EngineError, errors.Unsupported, errors.NoEvidence, errors.WarehouseError)
    assert issubclass(DataError, errors.DataError) and issubclass(PairError, errors.UsageError)
    assert issubclass(QuotingError, errors.UsageError)
    located = DataError("x.csv", "bad value", line=3, field="gold")
    assert str(located) == "x.csv:3: field 'gold': bad value" and isinstance(located, BiaslabError)
    with pytest.raises(ValueError, match="unknown dataset"):  # what `except ValueError` callers relied on
        loaders.get("no-such-dataset")


def _builtin_raises() -> Counter:
    """(file, builtin exception) -> how many `raise` statements of biaslab raise it."""
    found = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            kind = getattr(builtins, target.id, None) if isinstance(target, ast.Name) else None
            if isinstance(kind, type) and issubclass(kind, BaseException) and kind is not SystemExit:
                found[(path.relative_to(PACKAGE.parent).as_posix(), target.id)] += 1
    return found


def test_biaslab_raises_builtins_only_as_internal_assertions():
    """A new deliberate error must be one of `biaslab.errors` (an internal assertion: add it to INTERNAL)."""
    assert _builtin_raises() == INTERNAL


# -------------------------------------------------------------------------------------------------- the CLI
def _run(group, *args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(group, list(args), env={"BIASLAB_DEBUG": "", **(env or {})})


def _lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


def _boom(*args, **kwargs):
    raise ZeroDivisionError("boom inside a library")


@pytest.mark.parametrize("debug", [[], ["--debug"]])
def test_an_error_that_is_not_biaslabs_shows_its_traceback_and_the_bug_line(tmp_path, monkeypatch, debug):
    monkeypatch.setattr("biaslab.loaders.registry.default_data_dir", _boom)
    result = _run(biaslab_cli, *debug, "data", "list", "--no-count", "--db", str(tmp_path / "w.duckdb"))
    assert result.exit_code == 1, result.output
    lines = _lines(result)
    assert lines[0] == "Traceback (most recent call last):", result.output
    assert lines[-2] == "ZeroDivisionError: boom inside a library", result.output
    assert lines[-1] == bug_report(biaslab.__version__) == (
        f"This is a bug in biaslab {biaslab.__version__}: please report it with the traceback above at "
        "https://github.com/biaslab/biaslab/issues")
    assert 'data_cmd.py", line' in result.output  # the traceback reaches the command's own frame
    assert not any(line.startswith("Error: ") for line in lines)


def test_a_bug_in_a_runners_command_shows_the_traceback_too(monkeypatch):
    monkeypatch.setattr("biaslab.engines.names", _boom)
    result = _run(runners, "backends")
    assert result.exit_code == 1, result.output
    assert "Traceback (most recent call last):" in result.output
    assert _lines(result)[-2:] == ["ZeroDivisionError: boom inside a library", bug_report(biaslab.__version__)]


@pytest.fixture
def db(tmp_path) -> str:
    Warehouse.open(tmp_path / "w.duckdb").close()
    return str(tmp_path / "w.duckdb")


def _biaslab_errors(tmp_path, db):
    """(group, args, exit status, the one line) of real biaslab errors: a WarehouseError, a UsageError, DuckDB's
    error for the user's own SQL (a QueryError), and a UsageError of `runners`."""
    not_a_warehouse = tmp_path / "notes.duckdb"
    not_a_warehouse.write_text("hello\n")
    return [
        (biaslab_cli, ["info", "--db", str(not_a_warehouse)], 1,
         f"Error: {not_a_warehouse}: not a biaslab warehouse (not a DuckDB file); nothing was changed"),
        (biaslab_cli, ["data", "load", "no-such-dataset", "--db", db], 2, "Error: unknown dataset 'no-such-dataset'; "
         "known: " + ", ".join(sorted(loaders.MODULES))),
        (biaslab_cli, ["sql", "select * from no_such_table", "--db", db], 1,
         "Error: Catalog Error: Table with name no_such_table does not exist!"),
        (runners, ["collect", "--dataset", "winopron", "--out-shard", str(tmp_path / "shards"), "--db", db], 2,
         "Error: --out-shard DIR needs --shard i/n (the shard this job writes into its own file)"),
    ]


def test_a_biaslab_error_is_one_line_without_a_traceback(tmp_path, db):
    for group, args, status, line in _biaslab_errors(tmp_path, db):
        result = _run(group, *args)
        assert (result.exit_code, _lines(result)) == (status, [line]), result.output


@pytest.mark.parametrize("how", ["--debug", "BIASLAB_DEBUG=1"])
def test_debug_shows_the_traceback_of_a_biaslab_error(tmp_path, db, how):
    for group, args, status, line in _biaslab_errors(tmp_path, db):
        if how == "--debug":
            result = _run(group, "--debug", *args)
        else:
            result = _run(group, *args, env={"BIASLAB_DEBUG": "1"})
        lines = _lines(result)
        assert result.exit_code == status, result.output
        assert lines[0] == "Traceback (most recent call last):" and lines[-1] == line, result.output
        assert any(text.startswith(("biaslab.errors.", "biaslab.warehouse.readonly.QueryError: ")) for text in lines)
        assert bug_report(biaslab.__version__) not in result.output


def test_debug_zero_is_off(tmp_path, db):
    result = _run(biaslab_cli, "data", "load", "no-such-dataset", "--db", db, env={"BIASLAB_DEBUG": "0"})
    assert result.exit_code == 2 and "Traceback" not in result.output
