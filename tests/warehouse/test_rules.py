"""The value rules are derived from the declared value kinds (`evidence.ROLES`): every kind has SQL, and each SQL
accepts a good value and refuses a bad one, evaluated in DuckDB."""

from __future__ import annotations

import duckdb
import pytest

from biaslab.schema import evidence
from biaslab.warehouse import rules

#: kind -> (a value that meets it, values that break it), as DuckDB literals
CASES = {
    "probability": ("0.25", ["-0.01", "1.5", "'nan'::DOUBLE", "'inf'::DOUBLE"]),
    "logprob": ("-3.0", ["0.5", "'-inf'::DOUBLE", "'nan'::DOUBLE"]),
    "logprobs": ("[-1.0, -2.0]", ["[-1.0, 0.1]", "[-1.0, 'nan'::DOUBLE]"]),
    "count": ("0", ["-1"]),
    "logsumexp": ("12.5", ["'inf'::DOUBLE", "'nan'::DOUBLE"]),
    "logits": ("[3.0::FLOAT, -1.0::FLOAT]", ["[3.0::FLOAT, 'inf'::FLOAT]"]),
    "temperature": ("0.7", ["0.0", "-1.0", "'inf'::DOUBLE"]),
    "top_k": ("0", ["-1"]),  # 0: no top-k truncation (a chat API without top_k)
    "top_p": ("1.0", ["0.0", "1.01", "'nan'::DOUBLE"]),
}


def test_every_declared_kind_has_sql_and_a_case_here():
    assert set(rules.KIND_SQL) == set(evidence.VALUE_KINDS) == set(CASES)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_kind_accepts_a_good_value_and_refuses_bad_ones(kind):
    good, bad = CASES[kind]
    con = duckdb.connect()
    check = lambda value: con.execute(f"SELECT {rules.KIND_SQL[kind].format(c=value)}").fetchone()[0]  # noqa: E731
    assert check(good) is True
    assert [check(value) for value in bad] == [False] * len(bad)


def test_the_rules_cover_every_declared_column_once():
    declared = sorted((t, c) for t, role in evidence.ROLES.items() for c in role.values)
    assert sorted((r.table, r.column) for r in rules.VALUE_RULES) == declared
    assert ("choice_probs", "prob") in declared and ("samples", "token_logprobs") in declared
