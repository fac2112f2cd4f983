"""`--backend openai-chat` against a stub of OpenAI's chat completions API (tests/chat_stub.py, documented wire
format): gen, choice sample and choice logprobs end to end through `runners collect`; a rerun adds nothing; the
logprobs mode's probabilities against the formula computed by hand; 429 with Retry-After, 5xx, malformed and refused
replies, a changed snapshot mid-run; the cost shown and refused before any request; prob and exact mode refused with
why; the key never stored. The real server (vLLM's, CPU) is in tests/runners/test_backend_vllm.py."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

pytest.importorskip("openai")

from biaslab.cli.main import biaslab as biaslab_cli  # noqa: E402
from biaslab.cli.runners_cli import runners  # noqa: E402
from biaslab.warehouse import Warehouse  # noqa: E402
from chat_stub import ANSWER_ALTERNATIVES, WINOPRON, P_FIRST, ChatStub, seed_unit  # noqa: E402

KEY = "sk-test-" + "7f3a9c" * 6  # a key-shaped secret that must never be written anywhere
LIMIT = 4


@pytest.fixture
def stub():
    server = ChatStub()
    yield server
    server.close()


@pytest.fixture
def strict():
    """OpenAI-like: refuses vLLM's extension fields (top_k, min_tokens, continue_final_message)."""
    server = ChatStub(extensions=False)
    yield server
    server.close()


def collect(server, db, *args, key=True, env=None):
    base = ["collect", "--backend", "openai-chat", "--base-url", server.url, "--model", "stub-model",
            "--db", str(db), "--yes", *(["--api-key-env", "STUB_KEY"] if key else []), *args]
    return CliRunner().invoke(runners, base, env={"STUB_KEY": KEY, **(env or {})})


def test_sample_mode_stores_seeded_parsed_replies_and_a_rerun_adds_nothing(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", str(LIMIT), "--mode", "sample",
            "--samples", "5", "--seed", "1"]
    first = collect(stub, db, *args)
    assert first.exit_code == 0, first.output
    assert "20 samples added" in first.output and "20 requests, about" in first.output
    sent = stub.bodies[1:]  # after the probe
    assert len(sent) == 20 and len({b["seed"] for b in sent}) == 20
    assert {b["temperature"] for b in sent} == {0.5} and {b["top_k"] for b in sent} == {40}
    assert all(b["continue_final_message"] and b["messages"][-1]["role"] == "assistant" for b in sent)
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT s.seed, s.answer, s.valid, r.options, s.token_ids, s.finish_reason FROM samples s "
                       "JOIN choice_requests r USING (model_key, request_id) ORDER BY s.seed")
        spec = wh.rows("SELECT backend, revision, dtype FROM models")
        assert wh.rows("SELECT backend_version FROM models") == [("0.32.0-stub",)]  # vLLM's version (GET /version)
        adaptation = wh.rows("SELECT DISTINCT adaptation, mode FROM choice_requests")
    assert [r[1] for r in rows] == [r[3][0] if seed_unit(r[0]) < P_FIRST else r[3][1] for r in rows]
    assert 0 < sum(r[1] == r[3][0] for r in rows) < 20
    assert all(r[2] and r[4] == [] and r[5] == "stop" for r in rows)
    assert spec == [("openai-chat", "stub-model-2026-01-01", "provider")]
    assert adaptation == [("chat_api+prefill_continued", "sample")]
    again = collect(stub, db, *args)
    # nothing pending: nothing is sent, not even the snapshot probe (issue 56, item 3)
    assert again.exit_code == 0 and "0 samples added" in again.output and stub.completions == 21


def _lead_share(temperature: float, top_k: int) -> float:
    """A lead token's share at T and top-k, by hand: the stub returns it (0.9) and "<" (0.05); 0.05 is not returned,
    which at T <= 1 can weigh at most one token of probability 0.05 (no top-k, or top-k above 2)."""
    spare = 0.0 if top_k and top_k <= 2 else (0.05 / 0.9) ** (1 / temperature)
    return 1 / (1 + (0.05 / 0.9) ** (1 / temperature) + spare)


def _by_hand(temperature: float, top_k: int, lead_tokens: int = 0) -> dict[str, float]:
    """The module formula of choice_chat on the stub's alternatives, written out: outcome role -> probability
    (`lead_tokens` written by the model before the answer: the greedy path's share, the rest unresolved)."""
    kept = ANSWER_ALTERNATIVES[:top_k] if top_k and top_k <= len(ANSWER_ALTERNATIVES) else ANSWER_ALTERNATIVES
    top = kept[0][1]
    weight = {role: (p / top) ** (1 / temperature) for role, p in kept}
    spare = 0.0
    if not (top_k and top_k <= len(ANSWER_ALTERNATIVES)):
        rest, p_min = 1 - sum(p for _, p in ANSWER_ALTERNATIVES), min(p for _, p in ANSWER_ALTERNATIVES)
        count = (top_k - len(ANSWER_ALTERNATIVES)) if top_k else math.inf
        spare = min(count, rest / p_min) * (p_min / top) ** (1 / temperature)
    outcome = {"first": "first", "second": "second", "prefix": "first", "invalid": "invalid",
               "unresolved": "unresolved"}
    total = sum(weight.values()) + spare
    out = {"first": 0.0, "second": 0.0, "unresolved": spare / total, "invalid": 0.0}
    for token, w in weight.items():
        out[outcome[token]] += w / total
    path = _lead_share(temperature, top_k) ** lead_tokens
    out = {k: v * path for k, v in out.items()}
    out["unresolved"] = 1 - out["first"] - out["second"] - out["invalid"]
    return out


@pytest.mark.parametrize("server_kind, top_k, temperature", [("stub", 40, 0.5), ("stub", 3, 0.5),
                                                               ("strict", 0, 0.5), ("strict", 0, 1.0),
                                                               ("strict", 3, 0.5)])
def test_logprobs_mode_derives_the_option_probabilities_by_the_formula(server_kind, top_k, temperature, request,
                                                                        tmp_path, data_dir):
    server = request.getfixturevalue(server_kind)
    db = tmp_path / "w.duckdb"
    result = collect(server, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode",
                     "logprobs", "--top-k", str(top_k), "--temperature", str(temperature))
    assert result.exit_code == 0, result.output
    continued = server_kind == "stub"
    expected = _by_hand(temperature, top_k, 0 if continued else 4)
    with Warehouse.open(db, read_only=True) as wh:
        got = wh.rows("SELECT p.request_id, p.option, p.prob, p.top_k, r.options FROM choice_probs p "
                      "JOIN choice_requests r USING (model_key, request_id) ORDER BY p.request_id, p.option")
        starts = wh.rows("SELECT position, token FROM chat_positions WHERE answer_start ORDER BY request_id")
        modes = wh.rows("SELECT DISTINCT mode, k_store, adaptation FROM choice_requests")
        pf = wh.rows("SELECT DISTINCT mode FROM winopron_pf")
    assert len(got) == 2 * 4 and {r[3] for r in got} == {top_k}
    for _, option, prob, _, options in got:
        role = {options[0]: "first", options[1]: "second"}.get(option, option)
        assert prob == pytest.approx(expected[role], abs=1e-12), option
    assert [s[0] for s in starts] == [0 if continued else 4] * 2
    assert modes == [("logprobs", 20, "chat_api+prefill_continued" if continued else "chat_api+no_prefill")]
    assert pf == [("logprobs",)]  # labelled approximate, never pooled with exact mode
    import biaslab

    with biaslab.open(db) as handle:
        listed = handle.collections()
    assert list(listed["settings"]) == [f"logprobs T={temperature:g} top_k={top_k} top_p=1 new=6 "
                                        f"prompt=forced-choice-v1"] and list(listed["stored"]) == [2]
    assert sum(expected.values()) == pytest.approx(1) and expected["first"] > expected["second"] > 0


def test_gen_stores_the_replies_as_samples(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    result = collect(stub, db, "--dataset", "ruff", "--data-dir", str(data_dir), "--protocol", "gen", "--limit",
                     "2", "--samples", "2")
    assert result.exit_code == 0, result.output
    with Warehouse.open(db, read_only=True) as wh:
        n, texts = wh.rows("SELECT count(*), list(DISTINCT text) FROM samples")[0]
        requests = wh.rows("SELECT count(*) FROM gen_requests")[0][0]
    assert requests == 4 and n == 8 and all(t.startswith(" and then she said hello") for t in texts)
    users = [b["messages"] for b in stub.bodies[1:]]
    assert all(len(m) == 1 and m[0]["role"] == "user" for m in users)
    assert {b["min_tokens"] for b in stub.bodies[1:]} == {50} and {b["top_k"] for b in stub.bodies[1:]} == {50}


def test_an_openai_like_server_refuses_what_it_cannot_apply_in_one_line(strict, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    refused = collect(strict, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode",
                      "sample", "--samples", "2")
    assert refused.exit_code == 2 and "takes no top_k" in refused.output and "--top-k 0" in refused.output
    assert not db.exists() or Warehouse.open(db, read_only=True).count("samples") == 0
    ok = collect(strict, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode",
                 "sample", "--samples", "2", "--top-k", "0")
    assert ok.exit_code == 0, ok.output
    sent = strict.bodies[-4:]
    assert all("top_k" not in b and "continue_final_message" not in b and b["messages"][-1]["role"] == "user"
               for b in sent)
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT DISTINCT top_k, valid FROM samples") == [(0, True)]


@pytest.mark.parametrize("args, needle", [
    (["--dataset", "winogender", "--protocol", "prob"], "gives no log-probabilities of given text"),
    (["--dataset", "winopron", "--mode", "exact"], "exact mode needs the model's top logits"),
])
def test_prob_and_exact_mode_are_refused_with_why_before_any_request(stub, tmp_path, data_dir, args, needle):
    result = collect(stub, tmp_path / "w.duckdb", "--data-dir", str(data_dir), *args)
    assert result.exit_code == 1 and needle in result.output and len(result.output.strip().splitlines()) == 1
    assert stub.completions == 0


def test_the_cost_is_shown_and_max_cost_refuses_before_any_request(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "4", "--mode", "sample", "--samples",
            "10", "--price-in", "2.5", "--price-out", "10"]
    refused = collect(stub, db, *args, "--max-cost", "0.0001")
    assert refused.exit_code == 2 and "above --max-cost" in refused.output and "40 requests" in refused.output
    assert stub.completions == 0  # not even the snapshot probe before the cost is agreed to (issue 56, item 3)
    assert not db.exists()  # refused before its run: the warehouse this collection created is removed again
    ok = collect(stub, db, *args, "--max-cost", "1")
    assert ok.exit_code == 0 and "estimated cost $0.0" in ok.output and stub.completions == 41
    assert ok.output.count("about to send") == 1  # asked once: nothing was stored under the snapshot learned


def test_429_with_retry_after_then_success_and_5xx_that_persists(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode", "sample", "--samples",
            "1", "--engine-arg", "retries=2"]
    stub.script = [(200, stub.answer({"model": "stub-model", "messages": []})[1], {})]  # the probe
    stub.script += [(429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "1"}),
                    (429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "0"})]
    import time

    started = time.monotonic()
    result = collect(stub, db, *args)
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started >= 1.0  # Retry-After: 1 was waited for
    assert stub.completions == 4  # probe, two 429s, the answer
    stub.script = [(200, stub.answer({"model": "stub-model", "messages": []})[1], {})]
    stub.script += [(503, {"error": {"message": "overloaded"}}, {"Retry-After": "0"})] * 3
    failed = collect(stub, db, *args[:-3], "2", *args[-2:])  # a second sample per prompt: one request
    assert failed.exit_code == 1 and "answered 503 after 2 retries: overloaded" in failed.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("samples") == 1  # the failed request stored nothing


def test_malformed_refused_and_changed_snapshot_replies(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode", "sample", "--samples",
            "1"]
    probe = (200, stub.answer({"model": "stub-model", "messages": []})[1], {})
    stub.script = [probe, (200, {"id": "x", "object": "chat.completion", "created": 0, "model": stub.snapshot,
                                 "system_fingerprint": stub.fingerprint, "choices": []}, {})]
    malformed = collect(stub, db, *args)
    assert malformed.exit_code == 1 and "malformed reply" in malformed.output
    refusal = {"id": "x", "object": "chat.completion", "created": 0, "model": stub.snapshot,
               "system_fingerprint": stub.fingerprint,
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": None, "refusal": "I can't help."}}]}
    stub.script = [probe, (200, refusal, {})]
    refused = collect(stub, db, *args)
    assert refused.exit_code == 0, refused.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT finish_reason, valid, text FROM samples") == [("refused", False, "")]
    stub.fingerprint = "fp_2"  # a new system fingerprint alone is the same snapshot: nothing stops
    same = collect(stub, db, *args[:-1], "2")
    assert same.exit_code == 0 and "1 samples added" in same.output
    stub.script = [probe]
    stub.snapshot = "stub-model-2026-02-01"  # the provider changes its snapshot after the probe
    changed = collect(stub, db, *args[:-1], "3")
    assert changed.exit_code == 1 and "answered with snapshot 'stub-model-2026-02-01'" in changed.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("samples") == 2 and wh.count("models") == 1
    again = collect(stub, db, *args[:-1], "3")  # a rerun collects under the new snapshot's own key
    assert again.exit_code == 0, again.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("models") == 2 and wh.rows("SELECT count(DISTINCT model_key) FROM samples")[0][0] == 2


def test_a_missing_key_is_one_line_and_the_key_is_never_stored(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    missing = CliRunner().invoke(runners, ["collect", "--backend", "openai-chat", "--base-url", stub.url, "--model",
                                           "stub-model", "--api-key-env", "NOT_SET_ANYWHERE", "--db", str(db),
                                           *WINOPRON, "--data-dir", str(data_dir), "--yes"])
    assert missing.exit_code == 2 and "the environment variable NOT_SET_ANYWHERE is not set" in missing.output
    assert stub.completions == 0
    result = collect(stub, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode",
                     "sample", "--samples", "2")
    assert result.exit_code == 0, result.output
    sent = {next(v for k, v in h.items() if k.lower() == "authorization") for h in stub.headers}
    assert sent == {f"Bearer {KEY}"}  # sent to the server, and only there
    out = tmp_path / "export"
    exported = CliRunner().invoke(biaslab_cli, ["warehouse", "export", str(out), "--db", str(db)])
    assert exported.exit_code == 0, exported.output
    for path in [db, *sorted(p for p in out.rglob("*") if p.is_file())]:
        assert KEY.encode() not in path.read_bytes(), path
    with Warehouse.open(db, read_only=True) as wh:
        command, params = wh.rows("SELECT command, params FROM runs")[0]
    assert "STUB_KEY" in command and KEY not in command + params and json.loads(params)["backend"] == "openai-chat"


def test_a_provider_that_never_answers_ends_the_run_in_one_line(tmp_path, data_dir):
    """A server that accepts the connection and never answers: every request is bounded by timeout_s, retries
    included (defaults: 50 s x 5 attempts, within 5 minutes); here 1 s and one retry."""
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    try:
        started = time.monotonic()
        result = CliRunner().invoke(runners, [
            "collect", "--backend", "openai-chat", "--base-url", url, "--model", "stub-model", "--db",
            str(tmp_path / "w.duckdb"), "--yes", *WINOPRON, "--data-dir", str(data_dir), "--limit", "1",
            "--mode", "sample", "--samples", "1", "--top-k", "0", "--engine-arg", "timeout_s=1", "--engine-arg",
            "retries=1"])
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    assert result.exit_code == 1 and f"{url} did not answer within 1 s, 2 times" in result.output
    assert "lower --engine-arg timeout_s or retries to give up sooner" in result.output  # not "raise timeout_s"
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0] == result.output.strip().splitlines()[-1] and elapsed < 30
    # the probe comes after the estimate, before any run: the warehouse this run created holds nothing, and is gone
    assert not (tmp_path / "w.duckdb").exists()


def test_unreturned_weight_in_each_regime():
    """U of choice_chat by hand: returned mass 0.9 (p_min 0.1, so at most one more token of 0.1 at T <= 1)."""
    from biaslab.runners.protocols.choice_chat import unreturned_weight

    lps = [math.log(0.8), math.log(0.1)]
    assert unreturned_weight(lps, 0.5, 2) == 0.0  # k <= returned: nothing else can be drawn
    assert unreturned_weight(lps, 0.5, 0) == pytest.approx((0.1 / 0.8) ** 2)  # min(inf, 0.1/0.1) = 1 token
    assert unreturned_weight(lps, 1.0, 40) == pytest.approx(0.1 / 0.8)
    assert unreturned_weight(lps, 2.0, 0) == math.inf  # T > 1 without top-k: no bound
    spread = 3 * (0.1 / 3) ** 0.5 / 0.8 ** 0.5  # T = 2, k = 5: three tokens share 0.1 evenly (concave)
    assert unreturned_weight(lps, 2.0, 5) == pytest.approx(spread)


def test_a_lead_finished_by_a_token_of_its_own_counts_the_skipped_alternatives_as_unresolved():
    """The greedy token completes the lead with no answer text; an alternative there that already carries an answer
    is not attributed (it leaves the greedy path): its mass is unresolved."""
    from biaslab.engines.base import ChatReply
    from biaslab.runners.answers import AnswerParser
    from biaslab.runners.protocols.choice_chat import reply_probabilities

    lead = "{'BLANK':'"
    parser = AnswerParser(("she", "he"), "'", lead)
    positions = [(lead, math.log(0.6), [(lead, math.log(0.6)), (lead + "he", math.log(0.4))]),
                 ("she", math.log(0.7), [("she", math.log(0.7)), ("he", math.log(0.3))])]
    found, at = reply_probabilities(parser, ChatReply("", "stop", "m", positions), ("she", "he"), 1.0, 2)
    assert at == 1
    assert found["she"] == pytest.approx(0.6 * 0.7) and found["he"] == pytest.approx(0.6 * 0.3)
    assert found["unresolved"] == pytest.approx(0.4) and found["invalid"] == 0.0


def test_a_refusal_in_logprobs_mode_is_stored_as_unresolved(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    probe = (200, stub.answer({"model": "stub-model", "messages": []})[1], {})
    refusal = {"id": "x", "object": "chat.completion", "created": 0, "model": stub.snapshot,
               "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                            "message": {"role": "assistant", "content": None, "refusal": "No."}}]}
    stub.script = [probe, (200, refusal, {})]
    result = collect(stub, db, *WINOPRON, "--data-dir", str(data_dir), "--limit", "1", "--mode",
                     "logprobs")
    assert result.exit_code == 0, result.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT option, prob FROM choice_probs WHERE prob > 0") == [("unresolved", 1.0)]
        assert wh.count("chat_positions") == 0


def test_top_logprobs_is_part_of_a_logprobs_request(stub, tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode", "logprobs"]
    assert "2 requests added" in collect(stub, db, *args, "--engine-arg", "top_logprobs=3").output
    assert "2 requests added" in collect(stub, db, *args).output  # 20 alternatives: other numbers, other requests
    assert "0 requests added" in collect(stub, db, *args).output
    assert {b.get("top_logprobs") for b in stub.bodies if b.get("logprobs")} == {3, 20}


def test_meta_and_a_pasted_key_are_refused_without_a_request_or_an_echo(stub, tmp_path, data_dir):
    meta = collect(stub, tmp_path / "w.duckdb", *WINOPRON, "--data-dir", str(data_dir), "--protocol",
                   "meta", "--mode", "sample")
    assert meta.exit_code == 1 and "a chat API takes messages, not token ids" in meta.output
    pasted = "sk-proj-" + "Ab12" * 10
    result = CliRunner().invoke(runners, ["collect", "--backend", "openai-chat", "--base-url", stub.url, "--model",
                                          "stub-model", "--api-key-env", pasted, "--db", str(tmp_path / "w.duckdb"),
                                          *WINOPRON, "--data-dir", str(data_dir), "--yes"])
    assert result.exit_code == 2 and "not a key; the value given is not shown" in result.output
    assert pasted not in result.output and stub.completions == 0


def test_batch_mode_submits_once_and_a_rerun_fetches(stub, tmp_path, data_dir):
    """--batch (OpenAI's Batch API on the stub: a JSONL file, a batch, its output file): the first run submits and
    stops when the batch is not done within batch_wait_s (nothing stored, the batch id is); the rerun fetches the
    same batch and stores every sample; a third run adds nothing and submits nothing."""
    db = tmp_path / "w.duckdb"
    stub.polls_to_end = 3
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode", "sample", "--samples",
            "4", "--batch", "--engine-arg", "batch_poll_s=0.01"]
    first = collect(stub, db, *args, "--engine-arg", "batch_wait_s=0")
    assert first.exit_code == 1 and "batch batch_1 is in_progress (0 of 8 requests done)" in first.output
    assert "run the same command again to fetch its results (it is not submitted again)" in first.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("samples") == 0 and wh.rows("SELECT batch_id, len(custom_ids) FROM api_batches") == [
            ("batch_1", 8)]
        assert wh.rows("SELECT status FROM runs") == [("pending",)]  # not failed: a rerun fetches it (issue 56)
    probes = stub.completions
    second = collect(stub, db, *args)
    assert second.exit_code == 0 and "8 samples added" in second.output, second.output
    assert list(stub.batches) == ["batch_1"] and stub.batch_posts.count("/v1/batches") == 1
    # a rerun that only fetches says so, asks nothing and sends nothing, not even the snapshot probe (issue 56,
    # item 6): no "about to send", no estimate
    assert stub.completions == probes
    assert "fetching: the 8 pending requests were submitted before (batch batch_1)" in second.output
    assert "about to send" not in second.output and "about to send 8 requests" in first.output
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT s.seed, s.answer, r.options FROM samples s JOIN choice_requests r "
                       "USING (model_key, request_id)")
    assert [a for _, a, _ in rows] == [o[0] if seed_unit(s) < P_FIRST else o[1] for s, _, o in rows]
    third = collect(stub, db, *args)
    assert third.exit_code == 0 and "0 samples added" in third.output and len(stub.batches) == 1


def test_a_partly_failed_batch_leaves_the_run_pending_and_the_rerun_asks_only_about_what_it_sends(
        stub, tmp_path, data_dir):
    """A batch of 8 ends with 3 failed lines (its error file): nothing of the chunk is stored and the run is pending,
    not failed. The rerun fetches the 5 replies the batch holds and submits only the 3 again, asking about (and
    pricing) those 3, not the 8; then all 8 samples are stored."""
    db = tmp_path / "w.duckdb"
    stub.batch_failures["batch_1"] = 3
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode", "sample", "--samples",
            "4", "--batch", "--engine-arg", "batch_poll_s=0.01", "--price-in", "2.5", "--price-out", "10"]
    first = collect(stub, db, *args)
    assert first.exit_code == 1 and "3 request(s) of batch batch_1 got no reply" in first.output, first.output
    assert "fetch the 5 replies the batch holds and to send the other 3 again" in first.output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("samples") == 0 and wh.rows("SELECT status FROM runs") == [("pending",)]
    second = collect(stub, db, *args)
    assert second.exit_code == 0 and "8 samples added" in second.output, second.output
    assert "fetching: the 8 pending requests were submitted before (batch batch_1)" in second.output
    assert "about to send 3 requests" in second.output and "about to send 8" not in second.output
    assert list(stub.batches) == ["batch_1", "batch_2"] and len(stub.batches["batch_2"]["lines"]) == 3


def test_a_wider_rerun_after_a_partly_failed_batch_prices_what_no_batch_holds_and_asks_about_the_failed_late(
        stub, tmp_path, data_dir):
    """--limit 1 sends a batch of 4 with 1 failed line (run pending); the rerun with --limit 2 has 8 pending: it
    agrees first to the 4 no batch holds (naming the 4 in batch_1), then, before sending it, asks about the 1 that
    batch holds no reply for: 5 sent in all, 5 asked about, none twice."""
    db = tmp_path / "w.duckdb"
    stub.batch_failures["batch_1"] = 1
    args = [*WINOPRON, "--data-dir", str(data_dir), "--mode", "sample", "--samples", "4", "--batch", "--engine-arg",
            "batch_poll_s=0.01", "--price-in", "2.5", "--price-out", "10"]
    first = collect(stub, db, *args, "--limit", "1")
    assert first.exit_code == 1 and "1 request(s) of batch batch_1 got no reply" in first.output, first.output
    second = collect(stub, db, *args, "--limit", "2")
    assert second.exit_code == 0 and "8 samples added" in second.output, second.output
    assert "(4 more pending requests are in batch batch_1: fetched, not sent again)" in second.output
    asked = [line for line in second.output.splitlines() if line.startswith("about to send")]
    assert [line.split(",")[0] for line in asked] == ["about to send 4 requests", "about to send 1 requests"]
    assert {k: len(v["lines"]) for k, v in stub.batches.items()} == {"batch_1": 4, "batch_2": 5}


def test_a_fetching_rerun_asks_before_it_sends_anything_the_batches_do_not_hold(stub, tmp_path, data_dir):
    """The rerun believes it only fetches (the earlier run of this work left batches of as many requests as are
    pending), but the batches hold other requests (their ids altered here): before anything is submitted the late
    agreement estimates them; above --max-cost the run stops with nothing sent."""
    db = tmp_path / "w.duckdb"
    stub.polls_to_end = 3
    args = [*WINOPRON, "--data-dir", str(data_dir), "--limit", "2", "--mode", "sample", "--samples",
            "4", "--batch", "--engine-arg", "batch_poll_s=0.01", "--price-in", "2.5", "--price-out", "10"]
    first = collect(stub, db, *args, "--engine-arg", "batch_wait_s=0")
    assert first.exit_code == 1 and "batch batch_1 is in_progress" in first.output, first.output
    with Warehouse.open(db) as wh:
        wh.con.execute("UPDATE api_batches SET custom_ids = list_transform(custom_ids, c -> 'other-' || c)")
    second = collect(stub, db, *args, "--max-cost", "0.000001")
    assert second.exit_code != 0 and "fetching: the 8 pending requests" in second.output, second.output
    assert "8 requests, about" in second.output and "above --max-cost" in second.output
    assert list(stub.batches) == ["batch_1"] and stub.batch_posts.count("/v1/batches") == 1  # nothing submitted
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("samples") == 0
