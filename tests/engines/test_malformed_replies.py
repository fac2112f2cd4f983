"""Issue 56, item 4: a 200 reply whose JSON is cut off in transit is sent again (up to `retries` times), then one line
naming the server, with nothing stored and no traceback, in all three chat engines (each through its own SDK against
its stand-in server, tests/chat_stub.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from biaslab.cli.runners_cli import runners
from biaslab.warehouse import Warehouse
from chat_stub import WINOPRON, AnthropicStub, ChatStub, GeminiStub

#: engine -> (its stand-in, its --base-url from the stand-in's URL, a reply cut off in the middle of its JSON)
ENGINES = {
    "openai-chat": (lambda: ChatStub(extensions=True), lambda url: url,
                    b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "mess'),
    "anthropic": (AnthropicStub, lambda url: url.removesuffix("/v1"), b'{"id": "msg_1", "type": "message", "cont'),
    "gemini": (GeminiStub, lambda url: url.removesuffix("/v1"), b'{"candidates": [{"content": {"par'),
}


def _collect(engine, server, db, data_dir, retries):
    return CliRunner().invoke(runners, [
        "collect", "--backend", engine, "--base-url", ENGINES[engine][1](server.url), "--model", "stub-model",
        "--api-key-env", "STUB_KEY", "--db", str(db), "--yes", *WINOPRON, "--data-dir", str(data_dir),
        "--limit", "1", "--mode", "sample", "--samples", "2", "--engine-arg", f"retries={retries}"],
        env={"STUB_KEY": "sk-test"})


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_cut_off_reply_is_sent_again_then_refused_in_one_line(engine, tmp_path, data_dir):
    make, _, cut = ENGINES[engine]
    server = make()
    try:
        # the probe answers normally (None: the stand-in's own reply), the first sample's reply is cut off once
        server.script = [None, (200, cut, {})]
        ok = _collect(engine, server, tmp_path / "ok.duckdb", data_dir, retries=1)
        assert ok.exit_code == 0, ok.output
        with Warehouse.open(tmp_path / "ok.duckdb", read_only=True) as wh:
            assert wh.count("samples") == 2
        server.script = [None, (200, cut, {})]
        failed = _collect(engine, server, tmp_path / "no.duckdb", data_dir, retries=0)
        assert failed.exit_code == 1 and "Traceback" not in failed.output, failed.output
        lines = [line for line in failed.output.splitlines() if line.startswith("Error:")]
        assert len(lines) == 1 and "sent a malformed reply 1 time(s): its JSON cannot be read" in lines[0]
        with Warehouse.open(tmp_path / "no.duckdb", read_only=True) as wh:
            assert wh.count("samples") == 0
        server.script = [(200, cut, {})]  # the probe itself
        probe = _collect(engine, server, tmp_path / "probe.duckdb", data_dir, retries=0)
        assert probe.exit_code == 1 and "sent a malformed reply" in probe.output and "Traceback" not in probe.output
    finally:
        server.close()
