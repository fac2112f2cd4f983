"""Issue 56, item 3: nothing reaches a hosted provider before the user has agreed to the cost, and a rerun with
nothing pending sends nothing (not even the 1-token probe that learns the snapshot), through `collect` against the
stand-in of OpenAI's chat API (tests/chat_stub.py)."""

from __future__ import annotations

import pytest

from biaslab.errors import UsageError
from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse
from chat_stub import ChatStub


@pytest.fixture
def stub():
    server = ChatStub(extensions=True)
    yield server
    server.close()


def _config(stub, db, data_dir, samples=2):
    return CollectConfig(dataset="winopron", backend="openai-chat", model="stub-model", db=str(db),
                         data_dir=str(data_dir), limit=2, where={"context": "unprimed", "option_order": "MF"},
                         protocol="choice", mode="sample", samples=samples, seed=3,
                         top_k=0,
                         engine_args={"base_url": stub.url, "api_key_env": "STUB_KEY", "extensions": True})


def test_declining_the_cost_sends_nothing(stub, tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-test")
    asked = []
    with pytest.raises(UsageError, match="not confirmed: nothing was sent"):
        collect(_config(stub, tmp_path / "w.duckdb", data_dir), confirm=lambda line: asked.append(line) or False)
    assert len(asked) == 1 and "4 requests" in asked[0] and stub.completions == 0


def test_a_rerun_with_nothing_pending_sends_nothing_even_to_a_provider_that_is_down(tmp_path, data_dir,
                                                                                   monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-test")
    openai_like = ChatStub(extensions=False)  # as OpenAI's API: no vLLM version, no top_k
    db = tmp_path / "w.duckdb"
    config = _config(openai_like, db, data_dir).model_copy(update={"engine_args": {
        "base_url": openai_like.url, "api_key_env": "STUB_KEY"}})
    first = collect(config, confirm=lambda line: True)
    assert first.added == 4 and openai_like.completions == 5  # the probe, after the answer, and the 4 samples
    openai_like.close()  # the provider is down
    again = collect(config, confirm=lambda line: pytest.fail("nothing to agree to"))
    assert again.pending == 0 and again.added == 0


def test_a_new_snapshot_is_learned_after_consent_and_its_work_agreed_to_again(stub, tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-test")
    db = tmp_path / "w.duckdb"
    collect(_config(stub, db, data_dir), confirm=lambda line: True)
    stub.snapshot = "stub-model-2026-06-01"  # the provider moved on
    asked = []
    more = collect(_config(stub, db, data_dir, samples=3), confirm=lambda line: asked.append(line) or True)
    # agreed to the 2 samples pending under the snapshot last seen; under the new one all 6 are pending: asked again
    assert [line.split(" requests")[0].split()[-1] for line in asked] == ["2", "6"]
    assert more.added == 6 and stub.completions == 5 + 1 + 6
    with Warehouse.open(db, read_only=True) as wh:
        assert sorted(r[0] for r in wh.rows("SELECT revision FROM models")) == ["stub-model-2026-01-01",
                                                                                 "stub-model-2026-06-01"]
        # issue 56, item 6: the two snapshots are named apart in every listing, metric table and comparison
        from biaslab.warehouse.catalog import MODELS_SQL, NAMED_COLLECTIONS_SQL

        expected = ["stub-model @ stub-model-2026-01-01", "stub-model @ stub-model-2026-06-01"]
        assert sorted(r[0] for r in wh.rows(f"SELECT model_name FROM ({MODELS_SQL})")) == expected
        assert sorted({r[0] for r in wh.rows(f"SELECT model_name FROM ({NAMED_COLLECTIONS_SQL})")}) == expected
    from biaslab.warehouse.handle import open_warehouse

    with open_warehouse(str(db)) as handle:
        assert sorted(handle.models()["model_name"]) == expected


def test_without_a_terminal_billed_requests_need_yes_or_a_cost_cap(stub, tmp_path, data_dir):
    """Issue 67, item 8: under cron, Slurm or `</dev/null` (no terminal to ask) and without --yes, a hosted model
    was sent everything unasked. Now nothing is sent unless --yes or --max-cost (with prices) is given."""
    from click.testing import CliRunner

    from biaslab.cli.runners_cli import runners

    base = ["collect", "--backend", "openai-chat", "--base-url", stub.url, "--model", "stub-model", "--api-key-env",
            "STUB_KEY", "--dataset", "winopron", "--where", "context=unprimed", "--where", "option_order=MF",
            "--limit", "2", "--mode", "sample", "--samples", "2", "--top-k", "0", "--data-dir", str(data_dir)]
    env = {"STUB_KEY": "sk-test"}
    refused = CliRunner().invoke(runners, [*base, "--db", str(tmp_path / "a.duckdb")], env=env)  # stdin: no tty
    assert refused.exit_code == 2 and stub.completions == 0, refused.output
    assert "neither --yes nor --max-cost given" in refused.output and "not confirmed: nothing was sent" in \
        refused.output.strip().splitlines()[-1]
    capped = CliRunner().invoke(runners, [*base, "--db", str(tmp_path / "b.duckdb"), "--max-cost", "1",
                                          "--price-in", "1", "--price-out", "1"], env=env)
    sent = stub.completions  # the 4 samples and the probe that learns the snapshot
    assert capped.exit_code == 0 and sent >= 4 and "4 samples added" in capped.output, capped.output
    agreed = CliRunner().invoke(runners, [*base, "--db", str(tmp_path / "c.duckdb"), "--yes"], env=env)
    assert agreed.exit_code == 0 and stub.completions == 2 * sent, agreed.output
