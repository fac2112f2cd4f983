"""`biaslab.schema.evidence` is the one description of the stored columns: it must equal what the numbered
migrations create, column for column (name, DuckDB type, nullability, order), and build Arrow tables of those
types."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from biaslab.schema import evidence
from biaslab.warehouse import migrations


def _migrated() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for migration in migrations.migrations():
        con.execute(migration.sql)
    return con


def test_the_arrow_schemas_equal_the_migrations_column_for_column():
    con = _migrated()
    stored = con.execute("""SELECT table_name, column_name, data_type, is_nullable = 'YES'
                            FROM information_schema.columns WHERE table_schema = 'main'
                            ORDER BY table_name, ordinal_position""").fetchall()
    tables = sorted({t for t, *_ in stored})
    assert tables == sorted(evidence.TABLES)
    described = [row for t in tables for row in evidence.describe([t])]
    assert described == [tuple(r) for r in stored]


def test_every_key_column_exists_and_is_not_null():
    for table, keys in evidence.KEYS.items():
        fields = {f.name: f for f in evidence.SCHEMAS[table]}
        for key in keys:
            assert key in fields, (table, key)
            assert not fields[key].nullable, (table, key)


def test_arrow_builds_rows_of_the_stored_types_and_refuses_unknown_columns():
    table = evidence.arrow("choice_probs", {"request_id": ["r1", "r2"], "option": ["she", "he"],
                                            "prob": [0.25, 0.75]}, model_key="m", temperature=0.5, top_k=40,
                           top_p=1.0)
    assert table.column_names == ["model_key", "request_id", "option", "temperature", "top_k", "top_p", "prob"]
    assert table.schema.field("top_k").type == pa.int32()
    assert table.column("model_key").to_pylist() == ["m", "m"]
    with pytest.raises(ValueError, match="no column"):
        evidence.arrow("choice_probs", {"probability": [0.5]})
    with pytest.raises(ValueError, match="different lengths"):
        evidence.arrow("choice_probs", {"option": ["a"], "prob": [0.1, 0.2]})


def test_an_arrow_table_of_the_schema_inserts_into_the_migrated_table_unchanged():
    con = _migrated()
    rows = evidence.arrow("choice_nodes", {
        "request_id": ["r"], "node_id": [0], "parent_id": [None], "token_id": [None], "depth": [0],
        "topk_ids": [[5, 3]], "topk_logits": [[1.5, 0.25]], "logsumexp": [2.0]}, model_key="m")
    con.register("incoming", rows)
    con.execute("INSERT INTO choice_nodes BY NAME SELECT * FROM incoming")
    assert con.execute("SELECT topk_ids, topk_logits, logsumexp FROM choice_nodes").fetchone() == (
        [5, 3], [1.5, 0.25], 2.0)


def _migration_keys() -> dict[str, list[str]]:
    """table -> the columns the numbered migrations mark `-- key`, in column order."""
    import re

    keys: dict[str, list[str]] = {}
    for migration in migrations.migrations():
        table = None
        for line in migration.sql.splitlines():
            created = re.match(r"\s*CREATE TABLE IF NOT EXISTS (\w+)", line)
            if created:
                table = created[1]
                keys.setdefault(table, [])
                continue
            if line.startswith(")"):
                table = None
            column = re.match(r"\s*(\w+)\s+[^-]*--\s*key\b", line)
            if table and column:
                keys[table].append(column[1])
    return keys


def test_the_key_columns_marked_in_the_migrations_are_the_declared_keys():
    marked = _migration_keys()
    assert {t: tuple(cols) for t, cols in marked.items() if t != "meta"} == evidence.KEYS
    assert marked["meta"] == []  # keyed by its `key` column, not an identity key


def test_roles_declare_parents_before_children_and_value_kinds_of_existing_columns():
    order = list(evidence.ROLES)
    assert set(order) == set(evidence.TABLES) - {"meta"}
    for table, role in evidence.ROLES.items():
        if role.parent is not None:
            assert order.index(role.parent) < order.index(table), (table, role.parent)
            assert evidence.ROLES[role.parent].evidence and role.evidence
        for column, kind in role.values.items():
            assert column in evidence.column_names(table), (table, column)
            assert kind in evidence.VALUE_KINDS, (table, column, kind)
    assert evidence.MERGE_ORDER == ("stimuli", "user_datasets", "attribute_edits", "models", "runs",
                                    "sequence_scores", "token_scores", "choice_requests", "choice_nodes",
                                    "choice_edges", "choice_probs",
                                    "chat_positions", "gen_requests", "samples", "imported_answers", "api_batches")
    assert [evidence.added_unit(t) for t in ("choice_requests", "samples", "sequence_scores", "token_scores")] == [
        "requests", "samples", "scored sequences", "rows"]
