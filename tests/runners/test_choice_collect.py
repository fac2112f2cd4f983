"""`runners collect --dataset winopron`: exact and sample modes through the warehouse."""

from __future__ import annotations

import pytest
import torch

from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse


def _config(tmp_path, data_dir, name, **kw) -> CollectConfig:
    """A collection of one prompt (unprimed, MF) per template unless `where` says otherwise: `limit` counts
    templates, so limit=N is N prompts here."""
    kw.setdefault("where", {"context": "unprimed", "option_order": "MF"})
    return CollectConfig(dataset="winopron", db=str(tmp_path / name), data_dir=str(data_dir), **kw)


def test_sql_rederivation_equals_a_fresh_exact_run(tmp_path, data_dir, dataset_folder):
    """Stored at T=0.5, top_k=40; re-derived in SQL at T=0.3, top_k=20; compared with a fresh run at those settings."""
    dataset_folder("winopron")
    # fp32 given explicitly: the default dtype depends on the processor. Both sides start from the same stored
    # float32 logits and compute in float64 (the SQL macro in DOUBLE), so the tolerance does not depend on the dtype
    base = collect(_config(tmp_path, data_dir, "a.duckdb", limit=6, dtype="fp32"))
    assert base.added == 6
    fresh = collect(_config(tmp_path, data_dir, "b.duckdb", limit=6, temperature=0.3, top_k=20, dtype="fp32"))
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
    again = collect(_config(tmp_path, data_dir, "a.duckdb", limit=6, temperature=0.3, top_k=20, dtype="fp32"))
    assert again.added == 6
    assert derived.keys() == expected.keys() and len(derived) == 6 * 3
    # Tolerance from the dtype: the first answer token's logits are the same in both runs (one prompt per
    # forward), but deeper trie levels batch the live nodes of a prompt together and the two settings keep
    # different nodes alive, so a node's fp32 logits differ by a few ulps of their magnitude (seen: 1.3e-5 at
    # |z| = 35). A logit error d moves a probability by at most d / (2 T) per level.
    with Warehouse.open(tmp_path / "a.duckdb", read_only=True) as wh:
        zmax = wh.con.execute("SELECT max(abs(z)) FROM "
                              "(SELECT unnest(topk_logits) AS z FROM choice_nodes)").fetchone()[0]
    logit_error = 8 * torch.finfo(torch.float32).eps * zmax
    tolerance = 2 * logit_error / (2 * 0.3)  # two levels below the shared first one
    for key, p in expected.items():
        assert derived[key] == pytest.approx(p, abs=tolerance)
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
    for kw, message in ((dict(mode="sample", temperature=0.0), "--temperature must be > 0, got 0.0"),
                        (dict(temperature=-1.0), "--temperature must be > 0, got -1.0"),  # exact mode as well
                        (dict(top_k=0), "--top-k must be between 1 and --k-store"),  # 0 (none) is for chat APIs
                        (dict(mode="sample", top_k=0), "is for chat APIs without top_k"),
                        (dict(top_k=80), "between 1 and --k-store"),
                        (dict(mode="sample", samples=0), "--samples must be at least 1"),
                        (dict(mode="sample", samples=10**9), "--samples must be at most 200000, got 1000000000"),
                        (dict(mode="sample", pll="original"), "--pll does not apply to --protocol choice")):
        with pytest.raises(ValueError, match=message):
            _config(tmp_path, data_dir, "x.duckdb", **kw).validate()


def test_choice_probs_at_computes_in_double_and_refuses_absurd_settings(tmp_path):
    """A closed-form node: logits [2, 1, 0.5] at T = 0.3 (a DECIMAL literal), k = 2 -> softmax of the top 2."""
    import math

    import duckdb

    with Warehouse.open(tmp_path / "m.duckdb") as wh:
        wh.append_with_children("choice_requests", [{
            "model_key": "m", "request_id": "r", "stimulus_id": "s", "protocol": "choice", "mode": "exact",
            "prompt_version": "v", "adaptation": "none", "prompt_text": "p", "options": ["a", "b"],
            "max_new_tokens": 2, "k_store": 3}], {
            "choice_nodes": [{"model_key": "m", "request_id": "r", "node_id": 0, "depth": 0, "topk_ids": [7, 8, 9],
                              "topk_logits": [2.0, 1.0, 0.5], "logsumexp": 3.0}],
            "choice_edges": [{"model_key": "m", "request_id": "r", "node_id": 0, "token_id": 7, "outcome": "a"},
                             {"model_key": "m", "request_id": "r", "node_id": 0, "token_id": 8, "outcome": "b"},
                             {"model_key": "m", "request_id": "r", "node_id": 0, "token_id": 9, "outcome": "b"}]})
        got = dict(wh.con.execute("SELECT option, prob FROM choice_probs_at(0.3, 2)").fetchall())
        pa_ = 1 / (1 + math.exp((1.0 - 2.0) / 0.3))
        assert got["a"] == pytest.approx(pa_, abs=1e-15) and got["b"] == pytest.approx(1 - pa_, abs=1e-15)
        assert got["invalid"] == pytest.approx(0.0, abs=1e-15) and got["unresolved"] == 0.0
        types = wh.con.execute("SELECT typeof(prob), typeof(temperature) FROM choice_probs_at(0.3, 2)").fetchone()
        assert types == ("DOUBLE", "DOUBLE")
        for temp, k, message in ((0, 2, "temperature must be > 0"), (-0.5, 2, "temperature must be > 0"),
                                 ("NULL", 2, "temperature must be > 0"), (0.5, 0, "top_k must be at least 1"),
                                 (0.5, 4, "top_k 4 exceeds the 3 logits stored")):
            with pytest.raises(duckdb.Error, match=message):
                wh.con.execute(f"SELECT * FROM choice_probs_at({temp}, {k})").fetchall()


def test_an_exact_collection_ends_with_its_valid_share_and_what_it_means(tmp_path, tiny_gpt2, data_dir,
                                                                          dataset_folder):
    """Issue 71, item 3: the run says its valid share (the mean over its prompts of the mass of answers that are an
    option), equal to the option_probs view's valid mass, and below 0.5 with the chat prompt names the plain one."""
    dataset_folder("winopron")
    db = tmp_path / "w.duckdb"
    result = collect(CollectConfig(dataset="winopron", db=str(db), data_dir=str(data_dir), limit=1),
                     loaded=tiny_gpt2)
    [line] = [n for n in result.notes if n.startswith("valid share")]
    with Warehouse.open(db, read_only=True) as wh:
        expected, prompts = wh.rows("SELECT avg(v), count(*) FROM (SELECT stimulus_id, any_value(valid_mass) AS v "
                                    "FROM option_probs GROUP BY stimulus_id)")[0]
    assert line.startswith(f"valid share {expected:.2f} over {prompts} prompts: on average {expected:.0%} of the")
    assert ("--prompt forced_choice_plain_v1" in line) == (expected < 0.5)
    again = collect(CollectConfig(dataset="winopron", db=str(db), data_dir=str(data_dir), limit=1), loaded=tiny_gpt2)
    assert again.added == 0 and line in again.notes  # a rerun with nothing to do says it too
