"""Integrity checks of a warehouse (`biaslab warehouse check`): every block of every table readable (checksums),
schema version, duplicate identity keys, orphan rows, results pointing at unknown stimuli or models, and runs left
unfinished.

Every check is a read-only SELECT, so it works on a warehouse opened with `read_only=True` (or on a bare DuckDB
connection to a warehouse that `Warehouse.open` refuses, e.g. one written by an older biaslab).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import duckdb

from . import migrations, rules
from ..sql.quoting import identifier, identifiers
from .errors import WarehouseError
from .store import TABLE_KEYS, schema_version

Status = Literal["ok", "problem"]

_EXAMPLES = 3  # keys / runs quoted in a finding's detail


@dataclass(frozen=True)
class Finding:
    """Outcome of one check on one table: `count` is the number of problems found (0 when ok)."""

    check: str
    table: str | None
    status: Status
    count: int
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _finding(check: str, table: str | None, count: int, ok_detail: str, problem_detail: str) -> Finding:
    if count:
        return Finding(check, table, "problem", int(count), problem_detail)
    return Finding(check, table, "ok", 0, ok_detail)


def _connection(wh) -> duckdb.DuckDBPyConnection:
    return wh.con if hasattr(wh, "con") else wh


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND table_type = 'BASE TABLE'"
    ).fetchall()
    return {r[0] for r in rows}


def _fmt_key(values: Sequence) -> str:
    return "(" + ", ".join(repr(v) for v in values) + ")" if len(values) > 1 else repr(values[0])


def _check_schema(con, present: set[str]) -> Finding:
    try:
        found = schema_version(con)
    except WarehouseError as exc:
        return Finding("schema_version", "meta", "problem", 1, str(exc))
    supported = migrations.current_version()
    missing = sorted(t for t in TABLE_KEYS if t not in present)
    if found == supported and not missing:
        return Finding("schema_version", "meta", "ok", 0, f"schema version {found} (current)")
    parts = []
    if found > supported:
        parts.append(f"schema version {found} is newer than this biaslab ({supported}): upgrade biaslab")
    elif found < supported:
        parts.append(f"schema version {found}, this biaslab writes {supported}: run `biaslab warehouse migrate`")
    else:
        parts.append(f"schema version {found} (current)")
    if missing:
        parts.append(f"missing table(s): {', '.join(missing)}")
    return Finding("schema_version", "meta", "problem", max(1, len(missing)), "; ".join(parts))


def _check_duplicates(con, table: str, keys: Sequence[str]) -> Finding:
    key_sql, names = identifiers(keys), ", ".join(keys)
    repeated_sql = f"FROM {identifier(table)} GROUP BY {key_sql} HAVING count(*) > 1"
    n_keys, n_extra = con.execute(f"SELECT count(*), coalesce(sum(n - 1), 0) FROM "
                                  f"(SELECT count(*) AS n {repeated_sql})").fetchone()
    if not n_keys:
        return _finding("duplicate_keys", table, 0, f"no duplicate ({names})", "")
    examples = con.execute(f"SELECT {key_sql} {repeated_sql} ORDER BY {key_sql} LIMIT {_EXAMPLES}").fetchall()
    shown = "; ".join(_fmt_key(e) for e in examples)
    return _finding("duplicate_keys", table, n_keys, "",
                    f"{n_keys} key(s) ({names}) stored more than once, {n_extra} extra row(s); e.g. {shown}")


def _check_missing(con, check: str, child: str, parent: str, cols: Sequence[str]) -> Finding:
    """Rows of `child` whose `cols` name no row of `parent` (orphans of a parent request, unknown models or
    stimuli)."""
    cols_sql = identifiers(cols)
    missing_sql = f"FROM {identifier(child)} ANTI JOIN {identifier(parent)} USING ({cols_sql})"
    n_rows, n_parents = con.execute(f"SELECT count(*), count(DISTINCT ({cols_sql})) {missing_sql}").fetchone()
    names = ", ".join(cols)
    if not n_rows:
        return _finding(check, child, 0, f"every ({names}) is in {parent}", "")
    examples = con.execute(f"SELECT DISTINCT {cols_sql} {missing_sql} ORDER BY {cols_sql} LIMIT {_EXAMPLES}").fetchall()
    if check == "orphan_rows":
        shown = "; ".join(_fmt_key(e) for e in examples)
        return _finding(check, child, n_rows, "", f"{n_rows} row(s) without their {parent} parent ({n_parents} "
                                                  f"missing ({names})); e.g. {shown}")
    shown = ", ".join(repr(e[0]) for e in examples)
    return _finding(check, child, n_rows, "", f"{n_rows} row(s) name {n_parents} {names}(s) not in {parent}; "
                                              f"e.g. {shown}")


def _check_values(con, present: set[str]) -> list[Finding]:
    """The value rules of `rules` (probabilities in [0, 1], finite log-probabilities <= 0, exact outcomes summing
    to 1, one schema version, ...): one finding per table that breaks one, else one ok finding."""
    broken = [*rules.meta_violations(con, identifier, present), *rules.value_violations(con, identifier, present),
              *rules.sum_violations(con, identifier, present)]
    if not broken:
        return [_finding("value_rules", None, 0, f"every value rule holds ({len(rules.VALUE_RULES)} column rules, "
                                                 f"sums of exact outcomes, one schema version)", "")]
    tables = list(dict.fromkeys(v.table for v in broken))
    return [_finding("value_rules", t, sum(v.count for v in broken if v.table == t), "",
                     "; ".join(v.line() for v in broken if v.table == t)) for t in tables]


def running_runs(con) -> list[tuple[str, str, object, str]]:
    """(run_id, command, started_at, state) of every run marked 'running'; state is 'alive', 'dead' (its process
    is gone: killed, out of memory, machine restarted) or 'unknown' (another host, or no process recorded)."""
    from .process import process_state

    columns = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs' AND table_schema = 'main'"
    ).fetchall()}
    process_sql = "host, pid, pid_started" if {"host", "pid", "pid_started"} <= columns else "NULL, NULL, NULL"
    rows = con.execute(
        f"SELECT run_id, command, started_at, {process_sql} FROM runs WHERE status = 'running' "
        "ORDER BY started_at, run_id"
    ).fetchall()
    return [(run_id, command, started, process_state(host, pid, ticks))
            for run_id, command, started, host, pid, ticks in rows]


def _check_unfinished_runs(con) -> Finding:
    rows = running_runs(con)
    stale = [r for r in rows if r[3] != "alive"]
    if not stale:
        live = f" ({len(rows)} in progress)" if rows else ""
        return _finding("unfinished_runs", "runs", 0, f"no run left running{live}", "")
    shown = "; ".join(f"{run_id} `{command}` started {started} (process {state})"
                      for run_id, command, started, state in stale[:_EXAMPLES])
    more = f"; and {len(stale) - _EXAMPLES} more" if len(stale) > _EXAMPLES else ""
    dead = sum(r[3] == "dead" for r in stale)
    hint = f"; `biaslab warehouse check --repair` marks the {dead} of dead processes 'interrupted'" if dead else ""
    return _finding("unfinished_runs", "runs", len(stale), "",
                    f"{len(stale)} run(s) still marked 'running' whose process is not running here: "
                    f"{shown}{more}{hint}")


def repair_stale_runs(wh) -> list[str]:
    """Mark runs left 'running' by a dead process of this host as 'interrupted'; returns their run ids.

    Runs of live processes, of other hosts and runs without a recorded process are left as they are.
    """
    stale = [run_id for run_id, _, _, state in running_runs(wh.con) if state == "dead"]
    if stale:
        with wh.transaction():
            wh.con.execute("UPDATE runs SET status = 'interrupted' "
                           "WHERE status = 'running' AND list_contains(?, run_id)", [stale])
    return stale


def _check_blocks(con, table: str) -> Finding:
    """Read every stored value of `table` (a hash over each whole row, so no column is skipped): DuckDB verifies
    each block's checksum as it reads it, so a damaged block (random bytes, a bad sector) or a truncated file is
    named here, where a query reads only the blocks it needs and can answer from a damaged file without a word."""
    try:
        rows = con.execute(f"SELECT count(*), bit_xor(hash({identifier(table)})) FROM {identifier(table)}").fetchone()
    except duckdb.Error as exc:
        return Finding("blocks", table, "problem", 1, f"cannot read every block: {str(exc).splitlines()[0]}")
    return Finding("blocks", table, "ok", 0, f"every block of {rows[0]:,} rows read")


def check_warehouse(wh) -> list[Finding]:
    """Run every integrity check on `wh` (a `Warehouse` or a DuckDB connection); read-only.

    Every table is read whole first (`_check_blocks`); the other checks skip a table that is missing (the
    schema-version finding names it) or that cannot be read whole (its blocks finding names the damage).
    """
    con = _connection(wh)
    present = _tables(con)
    findings = [_check_blocks(con, table) for table in sorted(present)]
    findings.append(_check_schema(con, present))
    present -= {f.table for f in findings if f.check == "blocks" and not f.ok}  # unreadable: nothing more to ask
    for table, keys in TABLE_KEYS.items():
        if table in present:
            findings.append(_check_duplicates(con, table, keys))
    references = [*(("orphan_rows", c, p, cols) for c, p, cols in rules.PARENTS),
                  *(("unknown_stimulus", t, "stimuli", ("stimulus_id",)) for t in rules.STIMULUS_TABLES),
                  *(("unknown_model", t, "models", ("model_key",)) for t in rules.RESULT_TABLES)]
    for check, child, parent, cols in references:
        if child in present and parent in present:
            findings.append(_check_missing(con, check, child, parent, cols))
    findings += _check_values(con, present)
    if "runs" in present:
        findings.append(_check_unfinished_runs(con))
    return findings


def ok(findings: Sequence[Finding]) -> bool:
    """True when no finding is a problem."""
    return all(f.status == "ok" for f in findings)


def format_findings(findings: Sequence[Finding], *, verbose: bool = False) -> str:
    """Plain-text summary: one line per problem (every finding with `verbose`), then a totals line."""
    lines = []
    for f in findings:
        if f.status == "ok" and not verbose:
            continue
        where = f" {f.table}" if f.table else ""
        lines.append(f"{f.status.upper():7} {f.check}{where}: {f.detail}")
    problems = [f for f in findings if f.status != "ok"]
    if problems:
        lines.append(f"{len(problems)} problem(s) in {len(findings)} check(s)")
    else:
        lines.append(f"all {len(findings)} check(s) ok")
    return "\n".join(lines)
