"""Macro files declare what they read (`-- requires:`); the order follows the declarations, after the views."""

from __future__ import annotations

import duckdb
import pytest

from biaslab import views
from biaslab.views import macros
from biaslab.warehouse import migrations


def _file(name, sql):
    return macros.parse_file(name, sql)


def test_a_file_runs_after_the_file_it_requires_whatever_the_names():
    a = _file("a_summary.sql", "-- requires: z_base\nCREATE OR REPLACE TEMP VIEW a_summary AS FROM z_base;")
    z = _file("z_base.sql", "CREATE OR REPLACE TEMP VIEW z_base AS SELECT 1 AS x;")
    m = _file("m_macro.sql", "CREATE OR REPLACE TEMP MACRO m_at(k) AS TABLE SELECT k AS x;")
    ordered = macros.order_files([a, z, m])
    assert [f.name for f in ordered] == ["m_macro.sql", "z_base.sql", "a_summary.sql"]
    assert a.requires == ("z_base",) and m.provides == (("m_at", "macro"),)
    con = duckdb.connect()
    for f in ordered:
        con.execute(f.sql)
    assert con.execute("FROM a_summary").fetchall() == [(1,)]


def test_unknown_requirement_and_cycles_are_refused_and_views_count_as_given():
    with pytest.raises(RuntimeError, match="requires 'missing'"):
        macros.order_files([_file("a.sql", "-- requires: missing\nCREATE TEMP VIEW a AS SELECT 1;")])
    a = _file("a.sql", "-- requires: b\nCREATE TEMP VIEW a AS FROM b;")
    b = _file("b.sql", "-- requires: a\nCREATE TEMP VIEW b AS FROM a;")
    with pytest.raises(RuntimeError, match="cycle"):
        macros.order_files([a, b])
    assert macros.order_files([_file("c.sql", "-- requires: a_view\nSELECT 1;")], frozenset({"a_view"}))


def test_shipped_macro_files_declare_every_dependency():
    """Each shipped file runs with only the base tables, the views and the macro files it declares before it."""
    files = {f.name: f for f in macros.macro_files()}
    provider = {obj: f.name for f in files.values() for obj, _ in f.provides}
    con = duckdb.connect()
    for mig in migrations.migrations():
        con.execute(mig.sql)
    for name, sql in views.statements():
        if name in views.VIEWS:
            con.execute(sql)
    for f in files.values():
        con.execute("BEGIN")
        needed, todo = [], [r for r in f.requires if r in provider]
        while todo:
            dep = files[provider[todo.pop()]]
            if dep.name != f.name and dep.name not in [d.name for d in needed]:
                needed.insert(0, dep)
                todo += [r for r in dep.requires if r in provider]
        for dep in needed:
            con.execute(dep.sql)
        con.execute(f.sql)  # fails when the file reads a macro of a file it does not declare
        con.execute("ROLLBACK")
    assert {"choice_probs_at", "winopron_pf_at"} <= set(provider)
