"""`runners collect --dataset winopron`: exact and sample modes through the warehouse."""

from __future__ import annotations

import pytest

from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse


def _config(tmp_path, data_dir, name, **kw) -> CollectConfig:
    return CollectConfig(dataset="winopron", db=str(tmp_path / name), data_dir=str(data_dir), **kw)


def test_sql_rederivation_equals_a_fresh_exact_run(tmp_path, data_dir, dataset_folder):
    """Stored at T=0.5, top_k=40; re-derived in SQL at T=0.3, top_k=20; compared with a fresh run at those settings."""
    dataset_folder("winopron")
    base = collect(_config(tmp_path, data_dir, "a.duckdb", limit=6))
    assert base.added == 6
    fresh = collect(_config(tmp_path, data_dir, "b.duckdb", limit=6, temperature=0.3, top_k=20))
    assert fresh.model_key == base.model_key
    with Warehouse.open(tmp_path / "b.duckdb", read_only=True) as wh:
        expected = {(r, o): p for r, o, p in wh.con.execute(
            "SELECT r.stimulus_id, c.option, c.prob FROM choice_probs c JOIN choice_requests r "
            "USING (model_key, request_id) WHERE c.option <> 'unresolved'").fetchall()}
    with Warehouse.open(tmp_path / "a.duckdb", read_only=True) as wh:
        derived = {(r, o): p for r, o, p in wh.con.execute(
            "SELECT r.stimulus_id, c.option, c.prob FROM choice_probs_at(0.3, 20) c JOIN choice_requests r "
            "USING (model_key, request_id) WHERE c.option <> 'unresolved'").fetchall()}
        unresolved = wh.con.execute("SELECT max(prob) FROM choice_probs_at(0.3, 20) WHERE option = 'unresolved'")
        assert unresolved.fetchone()[0] < 1e-7
        at_collection = wh.con.execute("""
            SELECT max(abs(a.prob - b.prob)) FROM choice_probs_at(0.5, 40) a
            JOIN choice_probs b USING (model_key, request_id, option)""").fetchone()[0]
    assert at_collection < 1e-12
    # a second exact run at other settings into the same warehouse is a new collection, not "nothing to do"
    again = collect(_config(tmp_path, data_dir, "a.duckdb", limit=6, temperature=0.3, top_k=20))
    assert again.added == 6
    assert derived.keys() == expected.keys() and len(derived) == 6 * 3
    for key, p in expected.items():
        assert derived[key] == pytest.approx(p, abs=1e-6)
    assert max(p for (_, o), p in expected.items() if o != "invalid") > 0.01  # real mass on the options


def test_sample_mode_is_seeded_and_idempotent(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("winopron")
    kw = dict(limit=3, mode="sample", samples=5, seed=11, temperature=1.0, top_k=50)
    first = collect(_config(tmp_path, data_dir, "s1.duckdb", **kw), loaded=tiny_gpt2)
    assert first.added == 15
    again = collect(_config(tmp_path, data_dir, "s1.duckdb", **kw), loaded=tiny_gpt2)
    assert (again.pending, again.added) == (0, 0)
    other = collect(_config(tmp_path, data_dir, "s2.duckdb", **kw), loaded=tiny_gpt2)
    assert other.added == 15
    rows = []
    for name in ("s1.duckdb", "s2.duckdb"):
        with Warehouse.open(tmp_path / name, read_only=True) as wh:
            rows.append(wh.con.execute(
                "SELECT request_id, sample_index, seed, text, token_ids, valid FROM samples ORDER BY ALL").fetchall())
            params = wh.con.execute("SELECT DISTINCT temperature, top_k, top_p, max_new_tokens FROM samples")
            assert params.fetchall() == [(1.0, 50, 1.0, 6)]
    assert rows[0] == rows[1]
    assert any(not r[5] for r in rows[0])  # invalid answers are kept, flagged
    more = collect(_config(tmp_path, data_dir, "s1.duckdb", **{**kw, "samples": 7}), loaded=tiny_gpt2)
    assert more.added == 6  # only the two new sample indices per prompt


def test_absurd_sampling_parameters_are_refused_before_loading(tmp_path, data_dir):
    for kw, message in ((dict(mode="sample", temperature=0.0), "temperature must be > 0"),
                        (dict(top_k=0), "top_k must be >= 1"),
                        (dict(top_k=80), "between 1 and --k-store"),
                        (dict(mode="sample", samples=0), "--samples must be at least 1")):
        with pytest.raises(ValueError, match=message):
            _config(tmp_path, data_dir, "x.duckdb", **kw).validate()
