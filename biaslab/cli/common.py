"""Shared CLI pieces: the --db / --data-dir / --debug options, one-line errors, and table / csv / json output."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import json
import math
import os
import sys
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

import click
import duckdb

from ..errors import BiaslabError, UsageError, bug_report
from ..metrics.text import printable
from ..warehouse import DEFAULT_DB
from ..warehouse.errors import is_interrupt

#: Exceptions that are the user's input or machine, not a bug: shown as one line, exit status 1 (a `UsageError`: 2).
#: BiaslabError: every error biaslab raises on purpose (`biaslab.errors`); OSError: a path the system refuses (name
#: too long, not a folder, no space left, permission, ...); duckdb.IOException: DuckDB's OSError, met by whichever
#: query first reads a corrupt or unreadable warehouse file. Anything else is a bug: traceback, then `bug_report`.
EXPECTED_ERRORS = (BiaslabError, OSError, duckdb.IOException)
#: the environment variable that turns on --debug (any value but empty, 0, false, no, off)
DEBUG_ENV = "BIASLAB_DEBUG"
_DEBUG_KEY = "biaslab.debug"


def _short_path(path: str, limit: int = 100) -> str:
    return path if len(path) <= limit else f"{path[:limit // 2 - 2]}...{path[-(limit // 2 - 1):]}"


def one_line(exc: BaseException) -> str:
    """The first line of an error's message; an OSError as "PATH: reason" (a long path shortened)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{_short_path(str(exc.filename))}: " if exc.filename is not None else ""
        return f"{where}{exc.strerror}"
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def debugging(ctx: click.Context | None) -> bool:
    """Whether tracebacks are shown for every error: --debug on the command line, or BIASLAB_DEBUG set."""
    if ctx is not None and ctx.meta.get(_DEBUG_KEY):
        return True
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_DEBUG_KEY] = True  # meta is shared by every context of the invocation


debug_option = click.option(
    "--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
    help=f"Show the full traceback of every error, also of the one-line ones (or set {DEBUG_ENV}=1).",
)


#: the line a command stopped by Ctrl-C ends with (exit status 130), unless it says more itself (collect: what the
#: run kept and how to resume; sql: that nothing was written)
INTERRUPTED = "interrupted (Ctrl-C)"


def interrupted(message: str = INTERRUPTED) -> None:
    """End the command after Ctrl-C: `message` as one line on stderr, exit status 130."""
    sys.stdout.flush()
    click.echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(130) from None


def short_line(text: str, width: int) -> str:
    """A command's line in a command list: its help's first sentence without citations in parentheses ("(Parrish et
    al. 2022)"), cut at a word within `width` and never inside a parenthesis ("..." where cut).

    Parameters
    ----------
    text : the command's help.
    width : the most characters the line may take.

    Returns
    -------
    The line.
    """
    import re

    text = " ".join(re.sub(r"\s*\([^()]*et al\.[^()]*\)", "", text.split("\n\n")[0]).split())
    first = re.split(r"(?<=[a-z0-9)])\.\s", text, maxsplit=1)[0].rstrip(".")
    if len(first) <= width:
        return first
    cut = first[:width - 3].rsplit(" ", 1)[0]
    while cut.count("(") > cut.count(")"):  # an open parenthesis: cut before it
        cut = cut[:cut.rindex("(")].rstrip()
    return cut.rstrip(",;:") + "..."


def write_commands(formatter: click.HelpFormatter, rows: list[tuple[str, str]]) -> None:
    """The "Commands" section of a help page: each (name, help) as one line (`short_line`) within the page's width
    (click's own list puts the text after the widest name, up to 30 characters, and 2 spaces)."""
    if not rows:
        return
    with formatter.section("Commands"):
        room = max(20, formatter.width - formatter.current_indent - min(max(len(n) for n, _ in rows), 30) - 4)
        formatter.write_dl([(name, short_line(text, room)) for name, text in rows])


class Group(click.Group):
    """A click group that shows an error biaslab raises on purpose (`BiaslabError`) or a path or file the system
    refuses (`EXPECTED_ERRORS`) as one line, exit status 1 (`UsageError`: 2), and anything else, a bug, with its
    traceback and the line `bug_report`, exit status 1. With --debug (or BIASLAB_DEBUG=1) every error shows its
    traceback. Click's own exceptions (usage errors, exits, aborts) and SystemExit pass through unchanged. Ctrl-C
    (KeyboardInterrupt, or DuckDB's interrupt of a query it was running when the signal came) that no command
    handled itself ends with `INTERRUPTED`, exit status 130, instead of click's "Aborted!" (exit 1)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, each line from `short_line` (click's own cuts "BBQ (Parrish et al. 2022): ..." at
        "al." and other lines inside a parenthesis)."""
        commands = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        write_commands(formatter, [(name, cmd.short_help or cmd.help or "") for name, cmd in commands
                                   if cmd is not None and not cmd.hidden])

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            interrupted()
        except EXPECTED_ERRORS as exc:
            if debugging(ctx):
                traceback.print_exc(file=sys.stderr)
            error = click.ClickException(one_line(exc))
            error.exit_code = 2 if isinstance(exc, UsageError) else 1
            raise error from None
        except Exception as exc:
            from . import SIGINT_SEEN

            if is_interrupt(exc) or SIGINT_SEEN:  # Ctrl-C, also where it cut an import short (ImportError)
                interrupted()
            sys.stdout.flush()
            traceback.print_exc(file=sys.stderr)
            from .. import __version__

            click.echo(bug_report(__version__), err=True)
            raise click.exceptions.Exit(1) from None


def version_option(prog_name: str):
    """--version of a console script: the installed version (`biaslab.__version__`), read only when asked, so that
    start-up does not read the package metadata."""
    def show(ctx: click.Context, param, value: bool) -> None:
        if not value or ctx.resilient_parsing:
            return
        from .. import __version__

        click.echo(f"{prog_name}, version {__version__}")
        ctx.exit()

    return click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=show,
                        help="Show the version and exit.")


class LazyGroup(Group):
    """A `Group` whose subcommands are imported when they are used (`lazy`: command name -> "module:attribute" of
    `biaslab.cli`), so that `biaslab sql` imports the SQL command and not the metrics, data or view commands. Listing
    them (`--help`) imports them all, for their help."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, short_help: dict[str, str] | None = None,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy, self.short_help = dict(lazy or {}), dict(short_help or {})

    def format_commands(self, ctx: click.Context, formatter) -> None:
        """The command list of --help: a command not imported yet is listed with its `short_help` when one is
        given (nothing is imported then), else imported for its own; each line from `short_line`."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.short_help and name not in self.commands:
                rows.append((name, self.short_help[name]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.short_help or command.help or ""))
        write_commands(formatter, rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, name: str):
        if name in self.lazy and name not in self.commands:
            import importlib

            module, attribute = self.lazy[name].split(":")
            self.add_command(getattr(importlib.import_module(module, __package__), attribute), name)
        return super().get_command(ctx, name)


#: where `biaslab view` answers by default; the reports and the audit leaderboard link its pages at VIEW_URL (here,
#: not in `view_cmd`, so that the commands that link the view do not import it)
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765
VIEW_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"

db_option = click.option(
    "--db", "db", type=click.Path(dir_okay=False), default=str(DEFAULT_DB), show_default=True,
    help="DuckDB warehouse file.",
)
data_dir_option = click.option(
    "--data-dir", "data_dir", type=click.Path(file_okay=False), default=None,
    help="Folder holding the upstream datasets (default: $BIASLAB_DATA, else a per-user cache folder).",
)
format_option = click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
    help="Output format.",
)

Row = Sequence[Any]
Batches = Iterable[Sequence[Row]]


# ---------------------------------------------------------------------------------------------------- values
def table_text(value: Any) -> str:
    """How a value reads in a table cell: NULL as empty, floats with 6 significant digits, everything else its str.

    Control characters other than newline and tab (e.g. ESC, which a terminal would interpret) are shown escaped
    (``\\x1b``); everything else is shown literally (the caller renders it without markup or emoji codes).
    """
    if value is None:
        return ""
    return printable(f"{value:.6g}" if isinstance(value, float) else str(value))


def _parse_constant(name: str) -> None:  # NaN / Infinity inside a stored JSON value -> null
    return None


def json_value(value: Any) -> Any:
    """A Python value from DuckDB as a strict-JSON value (no NaN / Infinity).

    NaN and +-Infinity become null, blobs base64 strings, dates / times / timestamps ISO 8601 strings, decimals
    numbers (int when integral), UUIDs and intervals strings, lists / tuples / structs / maps recursively.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {_json_key(json_value(k)): json_value(v) for k, v in value.items()}
    if isinstance(value, (dt.timedelta, uuid.UUID)):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return json_value(value.item())
    if hasattr(value, "tolist"):  # numpy arrays
        return json_value(value.tolist())
    return str(value)


def _json_key(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(key, allow_nan=False)


def _parse_json(value: Any) -> Any:
    """A value of a DuckDB JSON column, emitted as the JSON value it holds (text that does not parse stays text)."""
    if not isinstance(value, str):
        return json_value(value)
    try:
        return json_value(json.loads(value, parse_constant=_parse_constant))
    except ValueError:
        return value


def _map_items(value: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(value, dict) and set(value) == {"key", "value"} and isinstance(value["key"], list):
        return zip(value["key"], value["value"])  # duckdb < 1.2 returns a MAP as {'key': [...], 'value': [...]}
    return value.items()


def json_converter(dtype: Any) -> Callable[[Any], Any]:
    """A function turning a value of DuckDB type `dtype` (a DuckDBPyType, or None) into a strict-JSON value.

    Like `json_value`, and JSON-typed values (also inside lists, structs and maps) become the JSON they hold.
    """
    if dtype is None or not hasattr(dtype, "id"):
        return json_value
    if str(dtype) == "JSON":
        return _parse_json
    try:
        kind, children = dtype.id, list(dtype.children)
    except Exception:  # a type without children
        return json_value
    if "JSON" not in str(dtype) or not children:
        return json_value
    if kind in ("list", "array"):
        child = json_converter(dict(children)["child"])
        return lambda v: None if v is None else [child(x) for x in v]
    if kind == "struct":
        fields = {name: json_converter(t) for name, t in children}
        return lambda v: None if v is None else {str(k): fields.get(k, json_value)(x) for k, x in v.items()}
    if kind == "map":
        types = dict(children)
        key, val = json_converter(types["key"]), json_converter(types["value"])
        return lambda v: None if v is None else {_json_key(key(k)): val(x) for k, x in _map_items(v)}
    return json_value


def unique_names(columns: Sequence[str]) -> list[str]:
    """Column names made unique for JSON objects: a repeated name gets _1, _2, ... (no value is dropped)."""
    seen: set[str] = set()
    out = []
    for name in map(str, columns):
        candidate, n = name, 0
        while candidate in seen:
            n += 1
            candidate = f"{name}_{n}"
        seen.add(candidate)
        out.append(candidate)
    return out


# ---------------------------------------------------------------------------------------------------- output
class ResultPrinter:
    """Print one or more query results to stdout as tables, CSV or JSON, streaming the rows.

    table: one table per result, each capped at `max_rows` rows (None or 0: no cap) and then one line saying that
        more rows were not shown (the rows after the cap are not read, so they are not counted). Text is shown
        literally: no rich markup, emoji codes or highlighting.
    csv: header and rows per result, a blank line between results. Never capped.
    json: a list of objects per result; with `multiple=True` a list of those lists. Strict JSON (see
        `json_value`). Never capped.
    """

    def __init__(self, fmt: str, *, max_rows: int | None = None, multiple: bool = False,
                 out: TextIO | None = None):
        self.fmt = fmt
        self.max_rows = max_rows or None
        self.multiple = multiple
        self._out = out
        self.count = 0

    @property
    def out(self) -> TextIO:
        return self._out if self._out is not None else sys.stdout

    def result(self, columns: Sequence[str], batches: Batches, types: Sequence[Any] | None = None,
               title: str | None = None) -> None:
        first = self.count == 0
        self.count += 1
        if self.fmt == "csv":
            if not first:
                self.out.write("\n")
            self._csv(columns, batches)
        elif self.fmt == "json":
            if self.multiple:
                self.out.write("[\n" if first else ",\n")
            self._json(columns, batches, types)
        else:
            self._table(columns, batches, title)

    def finish(self) -> None:
        if self.fmt == "json" and self.multiple:
            self.out.write("[\n]\n" if self.count == 0 else "\n]\n")
        self.out.flush()

    def _csv(self, columns: Sequence[str], batches: Batches) -> None:
        writer = csv.writer(self.out, lineterminator="\n")
        writer.writerow(columns)
        for batch in batches:
            writer.writerows(batch)

    def _json(self, columns: Sequence[str], batches: Batches, types: Sequence[Any] | None) -> None:
        names = unique_names(columns)
        convert = [json_converter(t) for t in types] if types else [json_value] * len(names)
        out = self.out
        opened = False
        for batch in batches:
            for row in batch:  # one record at a time: a batch of long values is never joined into one string
                out.write("[\n" if not opened else ",\n")
                out.write(json.dumps({n: f(v) for n, f, v in zip(names, convert, row)}, allow_nan=False,
                                     ensure_ascii=False))
                opened = True
        out.write("\n]" if opened else "[]")
        if not self.multiple:
            out.write("\n")

    def _table(self, columns: Sequence[str], batches: Batches, title: str | None) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(title) if title else None, show_lines=False, highlight=False)
        for c in columns:  # a value wider than its column folds onto the next line: nothing is cut with an ellipsis
            table.add_column(Text(table_text(c)), overflow="fold")
        cap = self.max_rows
        shown, more = 0, False
        for batch in batches:
            if cap is not None and shown >= cap:
                more = bool(batch)  # the rest is never read: a huge result prints at once
                break
            take = batch if cap is None else batch[:cap - shown]
            for row in take:
                table.add_row(*[Text(table_text(v)) for v in row])
            shown += len(take)
            if len(take) < len(batch):
                more = True
                break
        console = Console(file=self.out, width=table_width(self.out), markup=False, emoji=False, highlight=False)
        console.print(table)
        if more:
            self.out.write(f"... more rows not shown (the first {shown:,} shown); use --format csv for all rows "
                           f"(or --max-rows 0)\n")
        self.out.flush()  # each result as soon as it is complete, also through a pipe


#: the width of a table printed to a file or a pipe when $COLUMNS does not say
PIPED_WIDTH = 200


def table_width(out: TextIO) -> int | None:
    """The width tables are laid out in: $COLUMNS where it is set (also when piped: `COLUMNS=100 biaslab info |
    less`), else the terminal's (None: rich asks it), else `PIPED_WIDTH` for a file or a pipe."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if out.isatty() else PIPED_WIDTH


def emit(columns: Sequence[str], rows: Iterable[Row], fmt: str, title: str | None = None,
         max_rows: int | None = None) -> None:
    """Print one result (rows: any iterable of rows) as a rich table, CSV (header + rows) or JSON (a list of
    objects). Text is shown literally in tables; JSON is strict (see `json_value`)."""
    printer = ResultPrinter(fmt, max_rows=max_rows)
    printer.result(columns, [rows if isinstance(rows, Sequence) else list(rows)], title=title)
    printer.finish()
