"""What stored evidence must satisfy, checked the same way wherever rows come from: an export being imported, a shard
being merged, or a warehouse being checked (`biaslab warehouse check`).

Value rules (one column of one row): probabilities are in [0, 1]; log-probabilities are finite and at most
`LOGPROB_SLACK` (a log-probability is <= 0; the slack absorbs float rounding of a near-certain token); logsumexps
and logits are finite; sampling settings are in range (T > 0, top_k >= 0 with 0 for no truncation, 0 < top_p <= 1);
token counts are not negative. Set rules (several rows): the outcomes of one exact-mode request at one setting
(options, 'unresolved', 'invalid') sum to 1 within `SUM_TOLERANCE`; identity keys are unique; every evidence row
names a model of `models`, a stimulus of `stimuli`, and its parent request; `meta` holds exactly one schema
version.

Each rule is SQL written here (no text from the data goes into it) over a table reference that the caller gives
(`table_sql(table)`: the warehouse's own table, `shard."table"` of an attached shard, or a staged import), so the rules
run inside DuckDB on tables of any size and report the first offending row with the number of rows that break the
rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..schema.evidence import (  # noqa: F401  (PARENTS, RESULT_TABLES, STIMULUS_TABLES: read here by check, merge)
    KEYS, PARENTS, RESULT_TABLES, ROLES, SCHEMAS, STIMULUS_TABLES, VALUE_KINDS)
from ..sql.quoting import identifier, identifiers

#: a stored log-probability may exceed 0 by this much (float rounding of a probability of ~1)
LOGPROB_SLACK = 1e-6
#: the outcomes of one exact-mode request sum to 1 within this much
SUM_TOLERANCE = 1e-6

#: a table reference: table name -> SQL naming it (quoted)
Ref = Callable[[str], str]

_LOGPROB = f"(isfinite({{c}}) AND {{c}} <= {LOGPROB_SLACK})"
_PROB = "(isfinite({c}) AND {c} BETWEEN 0 AND 1)"


@dataclass(frozen=True)
class Rule:
    """A value rule: `ok` is an SQL predicate on column `column` of `table` (written `{c}`) that every row meets
    (NULL meets it: nullability is the schema's business)."""

    table: str
    column: str
    text: str
    ok: str

    def predicate_sql(self) -> str:
        return self.ok.format(c=f"t.{identifier(self.column)}")


def _list_all(predicate: str) -> str:
    """A predicate on every element `x` of a list column."""
    return "coalesce(list_bool_and(list_transform({c}, x -> " + predicate.format(c="x") + ")), true)"


#: value kind (`evidence.VALUE_KINDS`) -> the SQL predicate on a column `{c}` that checks it
KIND_SQL: dict[str, str] = {
    "probability": _PROB,
    "logprob": _LOGPROB,
    "logprobs": _list_all(_LOGPROB),
    "count": "{c} >= 0",
    "logsumexp": "isfinite({c})",
    "logits": _list_all("isfinite({c})"),
    "temperature": "(isfinite({c}) AND {c} > 0)",
    "top_k": "{c} >= 0",
    "top_p": "(isfinite({c}) AND {c} > 0 AND {c} <= 1)",
}

#: every value rule, from the tables' declared value kinds (`evidence.ROLES`)
VALUE_RULES: tuple[Rule, ...] = tuple(Rule(table, column, VALUE_KINDS[kind], KIND_SQL[kind])
                                      for table, role in ROLES.items() for column, kind in role.values.items())

@dataclass(frozen=True)
class Violation:
    """Rows of `table` that break `rule` (about `column`): how many, and the first one (`example`: its key, or its
    row number in the file, with the offending value)."""

    table: str
    column: str
    rule: str
    count: int
    example: str

    def line(self, where: str = "") -> str:
        """One line: where, table, column, the first offending row, the rule, and how many rows break it."""
        prefix = f"{where}: " if where else ""
        more = f" ({self.count} rows break it)" if self.count > 1 else ""
        return f"{prefix}table {self.table}, column {self.column}, {self.example}: must be {self.rule}{more}"


def _row_label(table: str, row: tuple, names: list[str]) -> str:
    return "row " + ", ".join(f"{n}={v!r}" for n, v in zip(names, row))


def _first(con, sql: str, params=()) -> tuple[int, tuple | None]:
    """(rows matching the query's WHERE, the first of them) for a query selecting `count(*) OVER ()` then columns."""
    row = con.execute(sql, list(params)).fetchone()
    return (int(row[0]), row[1:]) if row else (0, None)


def value_violations(con, table_sql: Ref, tables: set[str], label: Callable[[str], list[str]] | None = None
                     ) -> list[Violation]:
    """Every value rule broken in the tables of `tables` (referenced with `table_sql`). `label(table)` names the columns
    that identify a row in messages (default: the table's identity key)."""
    out = []
    for rule in VALUE_RULES:
        if rule.table not in tables:
            continue
        names = (label or (lambda t: list(KEYS[t])))(rule.table)
        count, row = _first(con, f"SELECT count(*) OVER (), {identifiers(names)}, t.{identifier(rule.column)} "
                                 f"FROM {table_sql(rule.table)} AS t "
                                 f"WHERE NOT coalesce({rule.predicate_sql()}, true) LIMIT 1")
        if count:
            out.append(Violation(rule.table, rule.column, rule.text, count,
                                 f"{_row_label(rule.table, row[:-1], names)} (got {row[-1]!r})"))
    return out


def sum_violations(con, table_sql: Ref, tables: set[str]) -> list[Violation]:
    """Exact-mode outcomes of one request and setting that do not sum to 1 within SUM_TOLERANCE."""
    if "choice_probs" not in tables:
        return []
    group = ["model_key", "request_id", "temperature", "top_k", "top_p"]
    count, row = _first(con, f"SELECT count(*) OVER (), {identifiers(group)}, total FROM "
                             f"(SELECT {identifiers(group)}, sum(prob) AS total FROM {table_sql('choice_probs')} "
                             f"GROUP BY ALL) WHERE NOT abs(total - 1) <= {SUM_TOLERANCE} LIMIT 1")
    if not count:
        return []
    return [Violation("choice_probs", "prob", f"outcomes of one request summing to 1 (within {SUM_TOLERANCE})",
                      count, f"{_row_label('choice_probs', row[:-1], group)} (sum {row[-1]!r})")]


def key_violations(con, table_sql: Ref, tables: set[str]) -> list[Violation]:
    """Identity keys stored more than once."""
    out = []
    for table, keys in KEYS.items():
        if table not in tables:
            continue
        count, row = _first(con, f"SELECT count(*) OVER (), {identifiers(keys)} FROM {table_sql(table)} "
                                 f"GROUP BY ALL HAVING count(*) > 1 LIMIT 1")
        if count:
            out.append(Violation(table, ", ".join(keys), "a unique identity key", count,
                                 f"{_row_label(table, row, list(keys))} (stored more than once)"))
    return out


def reference_violations(con, table_sql: Ref, tables: set[str], known_sql: Ref | None = None) -> list[Violation]:
    """Rows naming a parent request, a model or a stimulus that neither `table_sql` nor `known_sql` (e.g. the warehouse
    a shard is merged into) holds."""
    def present_sql(table: str, columns: tuple[str, ...]) -> str:
        sources = [f"SELECT {identifiers(columns)} FROM {table_sql(table)}"] if table in tables else []
        if known_sql is not None:
            sources.append(f"SELECT {identifiers(columns)} FROM {known_sql(table)}")
        return " UNION ALL ".join(sources) or f"SELECT {identifiers(columns)} FROM (SELECT NULL AS x) WHERE false"

    checks = [*PARENTS, *((t, "models", ("model_key",)) for t in RESULT_TABLES),
              *((t, "stimuli", ("stimulus_id",)) for t in STIMULUS_TABLES)]
    out = []
    for child, parent, columns in checks:
        if child not in tables:
            continue
        count, row = _first(con, f"SELECT count(*) OVER (), {identifiers(columns)} FROM {table_sql(child)} "
                                 f"ANTI JOIN ({present_sql(parent, columns)}) USING ({identifiers(columns)}) LIMIT 1")
        if count:
            out.append(Violation(child, ", ".join(columns), f"a row of {parent}", count,
                                 f"{_row_label(child, row, list(columns))} (no such {parent} row)"))
    return out


def meta_violations(con, table_sql: Ref, tables: set[str]) -> list[Violation]:
    """`meta` must hold exactly one schema_version."""
    if "meta" not in tables:
        return []
    n = con.execute(f"SELECT count(*) FROM {table_sql('meta')} WHERE key = 'schema_version'").fetchone()[0]
    if n == 1:
        return []
    return [Violation("meta", "key", "one schema_version row", max(n, 1), f"{n} schema_version rows")]


def violations(con, table_sql: Ref, tables: set[str], known_sql: Ref | None = None,
               label: Callable[[str], list[str]] | None = None) -> list[Violation]:
    """Every rule of this module broken by the tables `tables` (of biaslab's schema) as referenced by `table_sql`."""
    tables = {t for t in tables if t in SCHEMAS}
    return [*meta_violations(con, table_sql, tables), *key_violations(con, table_sql, tables),
            *value_violations(con, table_sql, tables, label), *sum_violations(con, table_sql, tables),
            *reference_violations(con, table_sql, tables, known_sql)]
