"""`check_warehouse`: a clean warehouse is all ok; each injected problem is found with the right count."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from biaslab.warehouse import Warehouse
from biaslab.warehouse import migrations
from biaslab.warehouse.check import Finding, check_warehouse, format_findings, ok


def _stimulus(sid: str) -> dict:
    return {"stimulus_id": sid, "dataset": "d", "upstream_version": "v", "item_id": sid, "text": f"text {sid}"}


def _model(key: str) -> dict:
    return {"model_key": key, "name": key, "source": "hf", "kind": "causal", "dtype": "fp32", "quant": "none",
            "bos_policy": "none", "registered_at": datetime(2024, 1, 1)}


def _seq(model: str, rid: str, sid: str) -> dict:
    return {"model_key": model, "request_id": rid, "stimulus_id": sid, "protocol": "p", "scheme": "causal",
            "text": "t", "n_tokens": 2, "sum_logprob": -1.0}


def _tok(model: str, rid: str, pos: int) -> dict:
    return {"model_key": model, "request_id": rid, "position": pos, "token_id": pos, "logprob": -0.5}


def _creq(model: str, rid: str, sid: str) -> dict:
    return {"model_key": model, "request_id": rid, "stimulus_id": sid, "protocol": "fc", "mode": "exact",
            "prompt_version": "v1", "adaptation": "none", "prompt_text": "pick", "options": ["he", "she"],
            "max_new_tokens": 4, "k_store": 64}


def _sample(model: str, rid: str, sid: str, i: int) -> dict:
    return {"model_key": model, "request_id": rid, "sample_index": i, "seed": 7, "temperature": 1.0, "top_k": 50,
            "top_p": 1.0, "max_new_tokens": 4, "stimulus_id": sid, "text": "he'", "token_ids": [1, 2],
            "token_logprobs": [-0.1, -0.2], "finish_reason": "stop", "answer": "he", "valid": True}


@pytest.fixture
def clean_path(tmp_path):
    """A small warehouse with every table filled consistently, closed; returns its path."""
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as wh:
        run = wh.start_run("runners collect --dataset d")
        wh.append("stimuli", [_stimulus("s1"), _stimulus("s2")])
        wh.append("models", [_model("m1"), _model("m2")])
        for model in ("m1", "m2"):
            wh.append_with_children(
                "sequence_scores", [_seq(model, "r1", "s1"), _seq(model, "r2", "s2")],
                {"token_scores": [_tok(model, rid, pos) for rid in ("r1", "r2") for pos in range(2)]})
        wh.append_with_children("choice_requests", [_creq("m1", "c1", "s1")], {
            "choice_nodes": [{"model_key": "m1", "request_id": "c1", "node_id": 0, "depth": 0,
                              "topk_ids": [1, 2], "topk_logits": [0.5, 0.1], "logsumexp": 1.0}],
            "choice_edges": [{"model_key": "m1", "request_id": "c1", "node_id": 0, "token_id": 1, "outcome": "he"},
                             {"model_key": "m1", "request_id": "c1", "node_id": 0, "token_id": 2, "outcome": "she"}],
            "choice_probs": [{"model_key": "m1", "request_id": "c1", "option": o, "temperature": 1.0, "top_k": 40,
                              "top_p": 1.0, "prob": p} for o, p in (("he", 0.6), ("she", 0.3), ("invalid", 0.1))],
        })
        wh.append("samples", [_sample("m1", "c1", "s1", i) for i in range(3)])
        wh.finish_run(run, rows_added=1)
    return path


def _raw(path, *statements: str) -> None:
    con = duckdb.connect(str(path))
    try:
        for sql in statements:
            con.execute(sql)
    finally:
        con.close()


def _check(path) -> list[Finding]:
    with Warehouse.open(path, read_only=True) as wh:
        return check_warehouse(wh)


def _problems(findings) -> dict[tuple[str, str | None], Finding]:
    return {(f.check, f.table): f for f in findings if f.status == "problem"}


def test_clean_warehouse_is_all_ok(clean_path):
    findings = _check(clean_path)
    assert ok(findings), format_findings(findings)
    assert all(f.status == "ok" and f.count == 0 for f in findings)
    checks = {(f.check, f.table) for f in findings}
    assert ("schema_version", "meta") in checks and ("unfinished_runs", "runs") in checks
    assert {t for c, t in checks if c == "duplicate_keys"} == {
        "stimuli", "models", "runs", "sequence_scores", "token_scores", "choice_requests", "choice_nodes",
        "choice_edges", "choice_probs", "samples", "gen_requests", "annotations", "user_datasets", "chat_positions",
        "api_batches", "attribute_edits", "imported_answers"}
    assert {t for c, t in checks if c == "orphan_rows"} == {"token_scores", "choice_nodes", "choice_edges",
                                                            "choice_probs", "chat_positions"}
    assert {t for c, t in checks if c == "unknown_stimulus"} == {"sequence_scores", "choice_requests", "samples",
                                                                 "gen_requests", "attribute_edits", "imported_answers"}
    assert len([c for c, _ in checks if c == "unknown_model"]) == 10  # every evidence table (chat_positions, imports)
    assert format_findings(findings).endswith(f"all {len(findings)} check(s) ok")


def test_check_is_read_only(clean_path):
    """A reader connection suffices (any write would raise on it), and checking changes nothing."""
    before = clean_path.read_bytes()
    con = duckdb.connect(str(clean_path), read_only=True)
    try:
        assert ok(check_warehouse(con))
    finally:
        con.close()
    assert clean_path.read_bytes() == before


def test_duplicate_keys_are_counted_per_key(clean_path):
    _raw(clean_path,
         # one key stored three times (2 extra rows) and another twice: 2 duplicated keys
         "INSERT INTO token_scores SELECT * FROM token_scores WHERE model_key = 'm1' AND request_id = 'r1' "
         "AND position = 0 LIMIT 1",
         "INSERT INTO token_scores SELECT * FROM token_scores WHERE model_key = 'm1' AND request_id = 'r1' "
         "AND position = 0 LIMIT 1",
         "INSERT INTO token_scores SELECT * FROM token_scores WHERE model_key = 'm2' AND request_id = 'r2' "
         "AND position = 1",
         "INSERT INTO stimuli SELECT * FROM stimuli WHERE stimulus_id = 's2'")
    found = _problems(_check(clean_path))
    assert set(found) == {("duplicate_keys", "token_scores"), ("duplicate_keys", "stimuli")}
    assert found["duplicate_keys", "token_scores"].count == 2
    assert "3 extra row(s)" in found["duplicate_keys", "token_scores"].detail
    assert found["duplicate_keys", "stimuli"].count == 1
    assert "'s2'" in found["duplicate_keys", "stimuli"].detail


def test_duplicate_sample_differing_only_in_a_sampling_parameter_is_not_a_duplicate(clean_path):
    _raw(clean_path, "INSERT INTO samples SELECT * REPLACE (0.7 AS temperature) FROM samples WHERE sample_index = 0")
    assert ok(_check(clean_path))
    _raw(clean_path, "INSERT INTO samples SELECT * REPLACE ('other' AS text) FROM samples WHERE sample_index = 0 "
                     "AND temperature = 1.0")
    found = _problems(_check(clean_path))
    assert set(found) == {("duplicate_keys", "samples")} and found["duplicate_keys", "samples"].count == 1


def test_orphan_token_rows(clean_path):
    _raw(clean_path,
         "INSERT INTO token_scores VALUES ('m1', 'gone', 0, 5, -0.1, NULL, NULL), "
         "('m1', 'gone', 1, 6, -0.2, NULL, NULL)",
         # same request id under another model is still an orphan: parents match on (model_key, request_id)
         "INSERT INTO models SELECT * REPLACE ('m3' AS model_key) FROM models WHERE model_key = 'm1'",
         "INSERT INTO token_scores VALUES ('m3', 'r1', 0, 5, -0.1, NULL, NULL)")
    found = _problems(_check(clean_path))
    assert set(found) == {("orphan_rows", "token_scores")}
    assert found["orphan_rows", "token_scores"].count == 3
    assert "2 missing" in found["orphan_rows", "token_scores"].detail


def test_orphan_choice_edge(clean_path):
    _raw(clean_path, "DELETE FROM choice_requests",
         # nodes and probs of the deleted request are orphans too; add one edge under an unknown request
         "INSERT INTO choice_edges VALUES ('m1', 'nope', 0, 3, '__live__', 1)")
    found = _problems(_check(clean_path))
    assert found["orphan_rows", "choice_edges"].count == 3
    assert found["orphan_rows", "choice_nodes"].count == 1
    assert found["orphan_rows", "choice_probs"].count == 3
    assert "'nope'" in found["orphan_rows", "choice_edges"].detail


def test_orphan_choice_edge_alone(clean_path):
    _raw(clean_path, "INSERT INTO choice_edges VALUES ('m1', 'nope', 0, 3, 'he', NULL)")
    found = _problems(_check(clean_path))
    assert set(found) == {("orphan_rows", "choice_edges")} and found["orphan_rows", "choice_edges"].count == 1


def _run_in_dead_process(path) -> str:
    """Start a run from a child process that then exits without finishing it (as a SIGKILL would leave it)."""
    import subprocess
    import sys

    code = ("import sys; from biaslab.warehouse import Warehouse\n"
            "wh = Warehouse.open(sys.argv[1]); print(wh.start_run('runners collect --dataset winogender')); wh.close()")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_run_left_running(clean_path):
    with Warehouse.open(clean_path) as wh:  # this (live) process: a run in progress, not a problem
        live = wh.start_run("runners collect --dataset winobias", {"model": "tiny"})
    dead = _run_in_dead_process(clean_path)
    _raw(clean_path, "INSERT INTO runs (run_id, command, started_at, status) "
                     "VALUES ('r-old', 'biaslab data load x', TIMESTAMP '2020-01-02 03:04:05', 'running')")
    found = _problems(_check(clean_path))
    assert set(found) == {("unfinished_runs", "runs")}
    f = found["unfinished_runs", "runs"]
    assert f.count == 2
    assert "runners collect --dataset winogender" in f.detail and "biaslab data load x" in f.detail
    assert "winobias" not in f.detail and "(process dead)" in f.detail and "(process unknown)" in f.detail
    assert "2020-01-02 03:04:05" in f.detail
    assert f.detail.index("r-old") < f.detail.index("winogender")  # oldest first
    assert "--repair" in f.detail
    findings = _check(clean_path)
    text = format_findings(findings)
    assert "PROBLEM unfinished_runs runs:" in text and text.endswith(f"1 problem(s) in {len(findings)} check(s)")

    from biaslab.warehouse.check import repair_stale_runs

    with Warehouse.open(clean_path) as wh:
        assert repair_stale_runs(wh) == [dead]
        status = dict(wh.con.execute("SELECT run_id, status FROM runs").fetchall())
    assert status[dead] == "interrupted" and status[live] == "running" and status["r-old"] == "running"
    f = _problems(_check(clean_path))["unfinished_runs", "runs"]
    assert f.count == 1 and "r-old" in f.detail  # unknown process: left for the user


def test_reused_pid_reads_as_dead():
    import os

    from biaslab.warehouse.process import current_process, process_state

    me = current_process()
    assert process_state(me["host"], me["pid"], me["pid_started"]) == "alive"
    assert process_state(me["host"], me["pid"], me["pid_started"] + 1) == "dead"  # same PID, other start time
    assert process_state("some-other-host", me["pid"], me["pid_started"]) == "unknown"
    assert process_state(None, None, None) == "unknown"
    assert os.getpid() == me["pid"]


def test_check_repair_cli(clean_path):
    from click.testing import CliRunner

    from biaslab.cli.main import biaslab

    dead = _run_in_dead_process(clean_path)
    result = CliRunner().invoke(biaslab, ["warehouse", "check", "--db", str(clean_path)])
    assert result.exit_code == 1 and dead in result.output
    result = CliRunner().invoke(biaslab, ["warehouse", "check", "--db", str(clean_path), "--repair"])
    assert result.exit_code == 0, result.output
    assert f"marked 1 run(s) of dead processes 'interrupted': {dead[:8]}" in result.output
    assert f"all {len(_check(clean_path))} check(s) ok" in result.output


def test_result_with_unknown_model(clean_path):
    _raw(clean_path,
         "INSERT INTO sequence_scores SELECT * REPLACE ('ghost' AS model_key) FROM sequence_scores "
         "WHERE model_key = 'm1'",
         "INSERT INTO token_scores SELECT * REPLACE ('ghost' AS model_key) FROM token_scores WHERE model_key = 'm1'")
    found = _problems(_check(clean_path))
    assert set(found) == {("unknown_model", "sequence_scores"), ("unknown_model", "token_scores")}
    assert found["unknown_model", "sequence_scores"].count == 2
    assert found["unknown_model", "token_scores"].count == 4
    assert "1 model_key(s)" in found["unknown_model", "token_scores"].detail
    assert "'ghost'" in found["unknown_model", "token_scores"].detail


def test_result_with_unknown_stimulus(clean_path):
    _raw(clean_path, "DELETE FROM stimuli WHERE stimulus_id = 's1'")
    found = _problems(_check(clean_path))
    assert set(found) == {("unknown_stimulus", t) for t in ("sequence_scores", "choice_requests", "samples")}
    assert found["unknown_stimulus", "sequence_scores"].count == 2  # r1 under m1 and m2
    assert found["unknown_stimulus", "choice_requests"].count == 1
    assert found["unknown_stimulus", "samples"].count == 3


def test_every_problem_at_once(clean_path):
    _raw(clean_path,
         "INSERT INTO models SELECT * FROM models WHERE model_key = 'm2'",
         "INSERT INTO token_scores VALUES ('m1', 'gone', 0, 5, -0.1, NULL, NULL)",
         "INSERT INTO choice_edges VALUES ('m1', 'nope', 0, 3, 'he', NULL)",
         "INSERT INTO runs (run_id, command, started_at, status) VALUES ('x', 'c', now(), 'running')",
         "INSERT INTO choice_probs VALUES ('ghost', 'c1', 'he', 1.0, -1, 1.0, 0.5)")
    findings = _check(clean_path)
    assert not ok(findings)
    got = {key: f.count for key, f in _problems(findings).items()}
    assert got == {
        ("duplicate_keys", "models"): 1,
        ("orphan_rows", "token_scores"): 1,
        ("orphan_rows", "choice_edges"): 1,
        ("orphan_rows", "choice_probs"): 1,  # no ('ghost', 'c1') request either
        ("unfinished_runs", "runs"): 1,
        ("unknown_model", "choice_probs"): 1,
        ("value_rules", "choice_probs"): 2,  # top_k -1 (0 is 'none'), and its request's outcomes sum to 0.5
    }
    lines = format_findings(findings).splitlines()
    assert len(lines) == 8 and lines[-1] == f"7 problem(s) in {len(findings)} check(s)"


def test_schema_version_mismatch_and_missing_table(clean_path):
    _raw(clean_path, "UPDATE meta SET value = '1' WHERE key = 'schema_version'", "DROP TABLE samples")
    con = duckdb.connect(str(clean_path), read_only=True)  # Warehouse.open would refuse it
    try:
        findings = check_warehouse(con)
    finally:
        con.close()
    found = _problems(findings)
    assert set(found) == {("schema_version", "meta")}
    detail = found["schema_version", "meta"].detail
    assert f"schema version 1, this biaslab writes {migrations.current_version()}" in detail
    assert "missing table(s): samples" in detail
    assert not any(f.table == "samples" for f in findings)


def test_newer_schema_version_is_a_problem(clean_path):
    _raw(clean_path, "UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con = duckdb.connect(str(clean_path), read_only=True)
    try:
        found = _problems(check_warehouse(con))
    finally:
        con.close()
    assert set(found) == {("schema_version", "meta")}
    assert "newer than this biaslab" in found["schema_version", "meta"].detail
