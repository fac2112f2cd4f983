"""The connection statements shipped compiled (`biaslab/sql/views.json`, issue 57) equal the Ibis compilation of the
views now, byte for byte, and are used only while their sources are unchanged."""

from __future__ import annotations

from biaslab.sql import prepared_views
from biaslab.views import compile as view_compile


def test_the_shipped_statements_equal_the_ibis_compilation():
    shipped = prepared_views.shipped()
    assert shipped is not None, ("biaslab/sql/views.json is stale or absent: a view, a macro or the stored schema "
                                 "changed; run `python -m biaslab.views.prepare` and commit the file")
    view_compile.compiled.cache_clear()
    assert list(shipped) == view_compile.statements(temp=True)


def test_a_stale_file_is_never_used(monkeypatch):
    assert prepared_views.read() is not None
    # as if a view, a macro or the schema had been edited since the file was written
    monkeypatch.setattr(prepared_views, "fingerprint", lambda: "0" * 64)
    assert prepared_views.read() is None


def test_a_connection_runs_the_shipped_statements(tmp_path, monkeypatch):
    from biaslab.warehouse import Warehouse

    ran = []
    real = prepared_views.shipped

    def spy():
        found = real()
        ran.append(found is not None)
        return found

    monkeypatch.setattr(prepared_views, "shipped", spy)
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        names = {r[0] for r in wh.rows("SELECT view_name FROM duckdb_views() WHERE NOT internal")}
    assert ran == [True] and {"option_probs", "winopron_pf"} <= names
