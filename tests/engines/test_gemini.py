"""`--backend gemini` against a stub of Gemini's REST format (tests/chat_stub.py `GeminiStub`): sample mode
(seeded, topK and the seed sent, parsed as in-process samples), logprobs mode by the same formula as every chat API
(the lead written by the model: the greedy path's share by hand), gen refused without --min-new-tokens 0, a 429
retried, an unknown model and a missing key in one line, the key sent only as the SDK's header."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

pytest.importorskip("google.genai")

from biaslab.cli.runners_cli import runners  # noqa: E402
from biaslab.warehouse import Warehouse  # noqa: E402
from chat_stub import ANSWER_ALTERNATIVES, WINOPRON, P_FIRST, GeminiStub, seed_unit  # noqa: E402

KEY = "gemini-test-key-" + "9c" * 12


@pytest.fixture
def gemini():
    server = GeminiStub()
    yield server
    server.close()


def collect(server, db, *args, env=None):
    return CliRunner().invoke(runners, [
        "collect", "--backend", "gemini", "--base-url", server.url.removesuffix("/v1"), "--model", "stub-model",
        "--api-key-env", "GEMINI_STUB_KEY", "--db", str(db), "--yes", *args],
        env={"GEMINI_STUB_KEY": KEY, **(env or {})})


def test_sample_mode_sends_the_seed_and_top_k_and_parses_like_every_engine(gemini, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "3", "--mode", "sample", "--samples", "4",
            "--seed", "2"]
    result = collect(gemini, db, *args)
    assert result.exit_code == 0, result.output
    sent = gemini.bodies[1:]
    assert len(sent) == 12 and {b["generationConfig"]["topK"] for b in sent} == {40}
    assert len({b["generationConfig"]["seed"] for b in sent}) == 12
    assert all(b["systemInstruction"]["parts"][0]["text"].startswith("Below you will find") for b in sent)
    headers = [{k.lower(): v for k, v in h.items()} for h in gemini.headers]
    assert {h.get("x-goog-api-key") for h in headers} == {KEY}
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT s.seed, s.answer, s.valid, r.options, r.adaptation FROM samples s "
                       "JOIN choice_requests r USING (model_key, request_id)")
        spec = wh.rows("SELECT backend, revision, dtype FROM models")
    assert [r[1] for r in rows] == [r[3][0] if seed_unit(r[0]) < P_FIRST else r[3][1] for r in rows]
    assert all(r[2] for r in rows) and {r[4] for r in rows} == {"chat_api+no_prefill"}
    assert spec == [("gemini", "stub-gemini-001", "provider")]
    assert KEY.encode() not in db.read_bytes()
    assert "0 samples added" in collect(gemini, db, *args).output


def test_logprobs_mode_by_hand(gemini, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    result = collect(gemini, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode",
                     "logprobs", "--top-k", "3", "--temperature", "0.5")
    assert result.exit_code == 0, result.output
    # the answer position: the top 3 (first .55, second .25, first's prefix .10) renormalized at T = 0.5; the four
    # lead tokens (0.9 each, "<" 0.05, 0.05 not returned: at most one token of 0.05 beyond the 2 returned < k = 3)
    weights = {role: (p / 0.55) ** 2 for role, p in ANSWER_ALTERNATIVES[:3]}
    total = sum(weights.values())
    lead = 1 / (1 + 2 * (0.05 / 0.9) ** 2)
    first = (weights["first"] + weights["prefix"]) / total * lead ** 4
    second = weights["second"] / total * lead ** 4
    with Warehouse.open(db, read_only=True) as wh:
        got = wh.rows("SELECT p.option, p.prob, r.options FROM choice_probs p JOIN choice_requests r "
                      "USING (model_key, request_id) ORDER BY p.request_id, p.option")
        starts = wh.rows("SELECT position FROM chat_positions WHERE answer_start")
    assert starts == [(4,), (4,)] and len(got) == 8
    for option, prob, options in got:
        want = {options[0]: first, options[1]: second, "invalid": 0.0, "unresolved": 1 - first - second}[option]
        assert prob == pytest.approx(want, abs=1e-12), option
    assert math.isclose(sum(p for o, p, _ in got[:4]), 1.0)
    assert {b["generationConfig"].get("logprobs") for b in gemini.bodies[1:]} == {20}


def test_gen_needs_min_new_tokens_0_and_stores_the_replies(gemini, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = ["--dataset", "ruff", "--data-dir", str(data_dir), "--protocol", "gen", "--limit", "1", "--samples", "2"]
    refused = collect(gemini, db, *args)
    # refused before any request, not even the snapshot probe (issue 56, item 3)
    assert refused.exit_code == 2 and "pass --min-new-tokens 0" in refused.output and gemini.completions == 0
    result = collect(gemini, db, *args, "--min-new-tokens", "0")
    assert result.exit_code == 0, result.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT count(*), count(DISTINCT seed) FROM samples")[0] == (4, 4)


def test_a_429_is_retried_and_failures_are_one_line(gemini, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode", "sample", "--samples",
            "1", "--engine-arg", "retries=1"]
    gemini.script = [(200, gemini.answer({"_path": "/v1/models/stub-model:generateContent"})[1], {}),
                     (429, {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}},
                      {})]
    assert collect(gemini, db, *args).exit_code == 0 and gemini.completions == 3
    unknown = CliRunner().invoke(runners, [
        "collect", "--backend", "gemini", "--base-url", gemini.url.removesuffix("/v1"), "--model", "no-such-model",
        "--api-key-env", "GEMINI_STUB_KEY", "--db", str(db), "--yes", *args], env={"GEMINI_STUB_KEY": KEY})
    assert unknown.exit_code == 2 and "has no model 'no-such-model'" in unknown.output
    missing = CliRunner().invoke(runners, ["collect", "--backend", "gemini", "--model", "stub-model", "--db", str(db),
                                           "--yes", *args], env={"GEMINI_API_KEY": ""})
    assert missing.exit_code == 2 and "the environment variable GEMINI_API_KEY is not set" in missing.output


def test_5xx_malformed_blocked_and_a_new_model_version_mid_run(gemini, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode", "sample", "--engine-arg",
            "retries=1"]
    probe = (200, gemini.answer({"_path": "/v1/models/stub-model:generateContent"})[1], {})
    assert collect(gemini, db, *args, "--samples", "1").exit_code == 0
    gemini.script = [probe] + [(503, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}},
                                {})] * 2
    failed = collect(gemini, db, *args, "--samples", "2")
    assert failed.exit_code == 1 and "answered 503 after 1 retries: overloaded" in failed.output
    gemini.script = [probe, (200, {"modelVersion": gemini.snapshot, "responseId": "x"}, {})]
    malformed = collect(gemini, db, *args, "--samples", "2")
    assert malformed.exit_code == 1 and "malformed reply" in malformed.output
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": gemini.snapshot, "responseId": "x"}
    gemini.script = [probe, (200, blocked, {})]
    assert collect(gemini, db, *args, "--samples", "2").exit_code == 0
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT finish_reason, valid FROM samples ORDER BY sample_index") == [
            ("stop", True), ("refused", False)]
    gemini.script = [probe]
    gemini.snapshot = "stub-gemini-002"
    changed = collect(gemini, db, *args, "--samples", "3")
    assert changed.exit_code == 1 and "answered with snapshot 'stub-gemini-002'" in changed.output
