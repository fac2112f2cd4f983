"""`--backend anthropic` against a stub of the Messages API (tests/chat_stub.py `AnthropicStub`): the prefill
continued as a final assistant message, the sampling settings in the body and no seed (the API takes none),
replies parsed as every engine's, a rerun adds nothing; logprobs mode refused with the reason before any request;
an API that refuses a sampling field answers in one line; gen with --min-new-tokens 0; the key only in the SDK's
header."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

pytest.importorskip("anthropic")

from biaslab.cli.runners_cli import runners  # noqa: E402
from biaslab.warehouse import Warehouse  # noqa: E402
from chat_stub import WINOPRON, AnthropicStub  # noqa: E402

KEY = "anthropic-test-key-" + "5e" * 12


@pytest.fixture
def claude():
    server = AnthropicStub()
    yield server
    server.close()


def collect(server, db, *args):
    return CliRunner().invoke(runners, [
        "collect", "--backend", "anthropic", "--base-url", server.url.removesuffix("/v1"), "--model", "stub-model",
        "--api-key-env", "CLAUDE_STUB_KEY", "--db", str(db), "--yes", *args], env={"CLAUDE_STUB_KEY": KEY})


def test_sample_mode_continues_the_prefill_and_sends_the_sampling_settings(claude, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "3", "--mode", "sample", "--samples", "3"]
    result = collect(claude, db, *args)
    assert result.exit_code == 0, result.output
    sent = claude.bodies[1:]
    assert len(sent) == 9 and all(b["messages"][-1] == {"role": "assistant", "content": "{'BLANK':'"} for b in sent)
    assert {(b["temperature"], b["top_p"], b["top_k"], b["max_tokens"]) for b in sent} == {(0.5, 1.0, 40, 6)}
    assert all("seed" not in b and b["system"].startswith("Below you will find") for b in sent)
    headers = [{k.lower(): v for k, v in h.items()} for h in claude.headers]
    assert {h.get("authorization") for h in headers} == {f"Bearer {KEY}"}
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT s.answer, s.valid, s.finish_reason, r.options, r.adaptation FROM samples s "
                       "JOIN choice_requests r USING (model_key, request_id)")
        spec = wh.rows("SELECT backend, revision, dtype FROM models")
    assert len(rows) == 9 and all(valid and reason == "stop" and answer in options
                                  for answer, valid, reason, options, _ in rows)
    assert {r[4] for r in rows} == {"chat_api+prefill_continued"}
    assert sum(answer == options[1] for answer, _, _, options, _ in rows) == 3  # every third request: the second
    assert spec == [("anthropic", "stub-claude-2026-01-01", "provider")]
    assert KEY.encode() not in db.read_bytes()
    # a rerun with nothing pending sends nothing, not even the snapshot probe (issue 56, item 3)
    assert "0 samples added" in collect(claude, db, *args).output and claude.completions == 10


def test_logprobs_mode_is_refused_with_why_and_a_refused_field_is_one_line(claude, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    refused = collect(claude, db, *WINOPRON, "--data-dir", str(data_dir), "--mode", "logprobs")
    assert refused.exit_code == 1 and "returns no log-probabilities" in refused.output and claude.completions == 0
    claude.refused_fields = ("top_k",)
    result = collect(claude, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode",
                     "sample", "--samples", "1")
    assert result.exit_code == 1 and "answered 400: top_k: Extra inputs are not permitted" in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: ") and result.output.count("Error") == 1
    ok = collect(claude, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode",
                 "sample", "--samples", "1", "--top-k", "0")  # 0: no truncation, so no top_k is sent
    assert ok.exit_code == 0, ok.output


def test_gen_with_min_new_tokens_0(claude, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = ["--dataset", "ruff", "--data-dir", str(data_dir), "--protocol", "gen", "--limit", "1", "--samples", "2"]
    assert "pass --min-new-tokens 0" in collect(claude, db, *args).output
    result = collect(claude, db, *args, "--min-new-tokens", "0")
    assert result.exit_code == 0, result.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT count(*), min(finish_reason) FROM samples")[0] == (4, "length")


def test_message_batches_submit_once_and_a_rerun_fetches(claude, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    claude.polls_to_end = 2
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode", "sample", "--samples",
            "3", "--batch", "--engine-arg", "batch_poll_s=0.01"]
    first = collect(claude, db, *args, "--engine-arg", "batch_wait_s=0")
    assert first.exit_code == 1 and "batch msgbatch_1 is in_progress" in first.output
    probes = claude.completions
    second = collect(claude, db, *args)
    assert second.exit_code == 0 and "6 samples added" in second.output, second.output
    assert "fetching: the 6 pending requests" in second.output and claude.completions == probes  # nothing sent
    assert list(claude.batches) == ["msgbatch_1"] and len(claude.batches["msgbatch_1"]["lines"]) == 6
    assert all("metadata_seed" not in line["params"] for line in claude.batches["msgbatch_1"]["lines"])
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT count(DISTINCT seed), bool_and(valid) FROM samples")[0] == (6, True)
    assert "0 samples added" in collect(claude, db, *args).output and len(claude.batches) == 1


def _message(stub, **change):
    reply = stub.answer({"model": "stub-model", "_path": "/v1/messages",
                         "messages": [{"role": "user", "content": "options: [a, b]"}]})[1]
    return {**reply, **change}


def test_429_5xx_malformed_refused_and_a_new_model_mid_run(claude, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode", "sample", "--engine-arg",
            "retries=1"]
    probe = (200, _message(claude), {})
    claude.script = [probe, (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
                             {"retry-after": "0"})]
    assert collect(claude, db, *args, "--samples", "1").exit_code == 0  # retried, then answered
    claude.script = [probe] + [(529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
                                {"retry-after": "0"})] * 2
    overloaded = collect(claude, db, *args, "--samples", "2")
    assert overloaded.exit_code == 1 and "answered 529 after 1 retries: busy" in overloaded.output
    claude.script = [probe, (200, {k: v for k, v in _message(claude).items() if k != "content"}, {})]
    malformed = collect(claude, db, *args, "--samples", "2")
    assert malformed.exit_code == 1 and "malformed reply" in malformed.output
    claude.script = [probe, (200, _message(claude, content=[], stop_reason="refusal"), {})]
    assert collect(claude, db, *args, "--samples", "2").exit_code == 0
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT finish_reason, valid FROM samples ORDER BY sample_index") == [
            ("stop", True), ("refused", False)]
    claude.script = [probe]
    claude.snapshot = "stub-claude-2026-02-01"
    changed = collect(claude, db, *args, "--samples", "3")
    assert changed.exit_code == 1 and "answered with snapshot 'stub-claude-2026-02-01'" in changed.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("samples") == 2
