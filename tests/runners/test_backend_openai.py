"""`--backend openai` without a real server: a small OpenAI-compatible completions server in a thread (http.server)
that answers from the tiny random GPT-2 through transformers, so the backend's evidence is checked against the hf
backend on the same weights (parsing, positions, top-K order), and its retries, backoff, timeouts and refusals
are checked against scripted failures. The run against a real `vllm serve` is in test_backend_vllm.py."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from biaslab.engines import BackendOptions
from biaslab.engines import openai as oa
from biaslab.engines.base import SAMPLE, SCORE, TOP_K, SamplingSettings, Unsupported


class FakeServer:
    """A completions server on 127.0.0.1 (free port). `model` (a transformers causal LM) answers completions the
    way vLLM does (echo + logprobs, top logprobs, seeded sampling, "token_id:N" tokens); `script` (a list of
    (status, body, headers)) is served first, one entry per request, for failure tests; `max_logprobs` refuses
    larger `logprobs` like vLLM; `delay_s` delays every answer; `fail_after` answers 503 from that many
    completions on (a server going away)."""

    def __init__(self, model=None, *, max_logprobs: int = 64, served: str = "tiny", version: str = "0.0-fake",
                 token_id_prompts: bool = True, text_tokens: bool = False, echo_shift: str | None = None,
                 honour_seed: bool = True):
        self.model, self.max_logprobs, self.served, self.version = model, max_logprobs, served, version
        # how a server may differ from vLLM (llama-cpp-python's server: the first three): token-id prompts refused
        # with a 500 validation error; tokens as text; echoed values shifted by one ("lead": a value for the first
        # token, "inner": None first, then shifted); seeds ignored
        self.token_id_prompts, self.text_tokens, self.echo_shift = token_id_prompts, text_tokens, echo_shift
        self.honour_seed = honour_seed
        self.script: list[tuple[int, object, dict]] = []
        self.delay_s = 0.0
        self.fail_after: int | None = None
        self.completions = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status, body, headers=None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.endswith("/v1/models"):
                    self._send(200, {"data": [{"id": server.served, "root": "/models/tiny"}]})
                elif self.path == "/version":
                    self._send(200, {"version": server.version})
                else:
                    self._send(404, {"error": {"message": "no such path"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.headers = dict(self.headers)
                import time

                time.sleep(server.delay_s)
                with server.lock:
                    scripted = server.script.pop(0) if server.script else None
                    server.completions += 1
                    failing = server.fail_after is not None and server.completions > server.fail_after
                if scripted is not None:
                    self._send(*scripted)
                elif failing:
                    self._send(503, {"error": {"message": "going away"}})
                else:
                    status, answer = server.complete(body)
                    self._send(status, answer)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @torch.inference_mode()
    def logprobs(self, ids: list[int]) -> np.ndarray:
        """log softmax of the model's logits at every position of `ids` (float64) [len, vocab]."""
        logits = self.model(torch.tensor([ids])).logits[0].double()
        return torch.log_softmax(logits, -1).numpy()

    def complete(self, body: dict) -> tuple[int, dict]:
        k = body.get("logprobs")
        if k is not None and k > self.max_logprobs:
            return 400, {"error": {"message": f"Requested sample logprobs of {k}, which is greater than max "
                                              f"allowed: {self.max_logprobs}"}}
        if isinstance(body["prompt"], list) and not self.token_id_prompts:
            return 500, {"error": {"message": "1 validation error for CreateCompletionRequest\nprompt\n  Input "
                                              "should be a valid string", "type": "internal_server_error"}}
        prompt = list(body["prompt"]) if isinstance(body["prompt"], list) else [ord(c) % 50 for c in body["prompt"]]
        tokens, values, tops = [], [], []
        if body.get("echo"):
            table = self.logprobs(prompt)
            tokens += prompt
            if self.echo_shift is None:
                values += [None] + [float(table[i - 1, prompt[i]]) for i in range(1, len(prompt))]
            else:  # value i = log p(token i+1 | tokens <= i)
                shifted = [float(table[i, prompt[i + 1]]) for i in range(len(prompt) - 1)]
                after = float(table[-1].max())  # the log-probability of the greedy next token
                values += shifted + [after] if self.echo_shift == "lead" else [None] + shifted[1:] + [after]
            tops += [None] * len(prompt)
        seed = int(body.get("seed") or 0) if self.honour_seed else int(torch.randint(0, 2**31, ()))
        generator = torch.Generator().manual_seed(seed)
        stops, reason, seq = set(body.get("stop_token_ids") or []), "length", list(prompt)
        for step in range(body.get("max_tokens", 16)):
            lp = torch.from_numpy(self.logprobs(seq)[-1])
            if body.get("temperature", 1.0) == 0:
                token = int(lp.argmax())
            else:
                z = lp / body["temperature"]
                if step < body.get("min_tokens", 0):
                    z[list(stops)] = -float("inf")
                token = int(torch.multinomial(torch.softmax(z, -1), 1, generator=generator))
            tokens.append(token)
            values.append(float(lp[token]))
            order = torch.argsort(lp, descending=True)[: max(k or 0, 1)].tolist()
            tops.append({f"token_id:{t}": float(lp[t]) for t in order})
            seq.append(token)
            if token in stops:
                reason = "stop"
                break
        name = (lambda t: f"tok{t}") if self.text_tokens else (lambda t: f"token_id:{t}")
        tops = [{name(int(k.split(":")[1])): v for k, v in top.items()} if top else top for top in tops]
        logprobs = {"tokens": [name(t) for t in tokens], "token_logprobs": values, "top_logprobs": tops}
        return 200, {"choices": [{"index": 0, "text": "", "finish_reason": reason,
                                  "logprobs": logprobs if k is not None else None}]}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def fake(tiny_gpt2):
    server = FakeServer(tiny_gpt2.model)
    yield server
    server.close()


@pytest.fixture
def scripted():
    server = FakeServer()
    yield server
    server.close()


def options(url: str, **engine) -> BackendOptions:
    return BackendOptions(dtype="fp32", engine_args=tuple(sorted({"base_url": url, **engine}.items())))


def sequences(tokenizer) -> list[list[int]]:
    texts = ["The nurse said that she would help.", "He left", "xe"]
    return [[tokenizer.bos_token_id, *tokenizer(t, add_special_tokens=False)["input_ids"]] for t in texts]


# ------------------------------------------------------------------------------------ against the hf backend
def test_prepare_keys_the_served_model_and_probes_k(fake, tiny_gpt2_dir, tiny_gpt2):
    prepared = oa.prepare(str(tiny_gpt2_dir), options(fake.url))
    assert prepared.max_top_k is None                    # asked only when a protocol needs top-K
    prepared.verify(frozenset({TOP_K}))
    assert prepared.max_top_k == 64                      # from the refusal "max allowed: 64" of the 256 probe
    assert prepared.spec.backend == "openai" and prepared.spec.backend_version == "0.0-fake"
    assert prepared.spec.engine_args == {"served_model": "tiny"}
    assert prepared.model_key != tiny_gpt2.spec.model_key  # engines never share a key
    other = oa.prepare(str(tiny_gpt2_dir), options(fake.url.replace("127.0.0.1", "localhost")))
    assert other.model_key == prepared.model_key          # the URL is not part of the key


def test_score_and_top_k_equal_the_hf_backend(fake, tiny_gpt2_dir, tiny_gpt2):
    from biaslab.engines.hf.backend import HFPrepared

    backend = oa.prepare(str(tiny_gpt2_dir), options(fake.url, max_concurrency=3)).load()
    hf = HFPrepared(tiny_gpt2).load()
    seqs = sequences(backend.tokenizer)
    for a, b in zip(backend.score(seqs), hf.score(seqs)):
        assert a.dtype == np.float64 and len(a) == len(b)
        np.testing.assert_allclose(a, b, atol=1e-5)
    mine, theirs = backend.top_k(seqs, 64), hf.top_k(seqs, 64)
    assert (mine.ids == theirs.ids).all() and (mine.logsumexp == 0).all()
    np.testing.assert_allclose(mine.logits, theirs.logits - theirs.logsumexp[:, None], atol=1e-5)
    with pytest.raises(Unsupported, match=r"returns K = 64 top log-probabilities per token; K = 65 asked"):
        backend.top_k(seqs, 65)
    backend.close()


def test_samples_are_seeded_and_stop_tokens_are_not_stored(fake, tiny_gpt2_dir):
    backend = oa.prepare(str(tiny_gpt2_dir), options(fake.url)).load()
    prompt = sequences(backend.tokenizer)[0]
    settings = SamplingSettings(temperature=1.0, top_k=50, top_p=1.0, max_new_tokens=12)
    first = backend.sample([prompt], [[1, 2, 3, 4, 5, 6, 7, 8]], settings)[0]
    again = backend.sample([prompt], [[1, 2, 3, 4, 5, 6, 7, 8]], settings)[0]
    assert [s.token_ids for s in first] == [s.token_ids for s in again]
    assert len({tuple(s.token_ids) for s in first}) > 1   # seeds matter
    for s in first:  # stored log-probabilities are the model's own: rescoring the sample gives them back
        assert not set(s.token_ids) & backend.stop_ids
        assert (s.finish_reason == "stop") == (len(s.token_ids) < 12)
        rescored = backend.score([prompt + s.token_ids])[0][len(prompt) - 1:]
        np.testing.assert_allclose(s.logprobs, rescored, atol=1e-9)
    body = backend.sample_body(prompt, 7, settings)
    assert {k: body[k] for k in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed")} == \
        {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0, "seed": 7}
    backend.close()


def test_collect_through_the_server_equals_hf_and_a_dying_server_leaves_no_partial_chunk(
        fake, tiny_gpt2_dir, tiny_gpt2, data_dir, dataset_folder, tmp_path):
    from biaslab.runners.collect import CollectConfig, collect
    from biaslab.warehouse import Warehouse

    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    common = dict(dataset="winogender", db=str(db), data_dir=str(data_dir), limit=6, chunk_size=4, dtype="fp32")
    collect(CollectConfig(**common), loaded=tiny_gpt2)
    config = CollectConfig(**common, model=str(tiny_gpt2_dir), backend="openai",
                           engine_args={"base_url": fake.url, "retries": 1})
    key = oa.prepare(str(tiny_gpt2_dir), options(fake.url)).model_key
    fake.completions = 0
    fake.fail_after = 3 + 4 + 2   # the checks (id prompt, 2 echoes), the first chunk (4 requests), 2 of the next
    with pytest.raises(oa.ServerError, match="failed after 2 attempts"):
        collect(config)
    with Warehouse.open(db, read_only=True) as wh:
        stored = wh.con.execute("SELECT count(*) FROM sequence_scores WHERE model_key = ?", [key]).fetchone()[0]
        status = wh.con.execute("SELECT status FROM runs WHERE model_key = ?", [key]).fetchone()[0]
    assert (stored, status) == (4, "failed")  # the first chunk only: nothing of the failed one
    fake.fail_after = None
    result = collect(config)
    assert (result.pending, result.added) == (18 - 4, 18 - 4)
    assert collect(config).added == 0
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.con.execute(
            "SELECT a.request_id, a.position, a.token_id, a.logprob, b.token_id, b.logprob FROM token_scores a "
            "JOIN token_scores b USING (request_id, position) WHERE a.model_key = ? AND b.model_key = ?",
            [key, tiny_gpt2.spec.model_key]).fetchall()
    assert len(rows) > 18 and all(r[2] == r[4] for r in rows)
    assert max(abs(r[3] - r[5]) for r in rows) < 1e-5


# ------------------------------------------------------------------------------------ retries and refusals
def client(server: FakeServer, **kw):
    sleeps: list[float] = []
    c = oa.Client(server.url, kw.pop("api_key", None), sleep=sleeps.append, **kw)
    return c, sleeps


def test_retries_with_exponential_backoff_then_succeeds(scripted):
    scripted.script = [(503, {"error": {"message": "busy"}}, {}), (500, {}, {}), (502, "bad gateway", {}),
                       (200, {"ok": 1}, {})]
    c, sleeps = client(scripted, retries=5)
    assert c.request("POST", "completions", {}) == {"ok": 1}
    assert c.attempts == 4 and sleeps == [oa.BACKOFF_S, 2 * oa.BACKOFF_S, 4 * oa.BACKOFF_S]


def test_429_waits_as_long_as_retry_after_says(scripted):
    scripted.script = [(429, {"error": {"message": "slow down"}}, {"Retry-After": "3"}), (200, {"ok": 1}, {})]
    c, sleeps = client(scripted)
    assert c.request("POST", "completions", {}) == {"ok": 1} and sleeps == [3.0]


def test_gives_up_after_its_retries_in_one_line(scripted):
    scripted.script = [(500, {"error": {"message": "boom"}}, {})] * 3
    c, sleeps = client(scripted, retries=2)
    with pytest.raises(oa.ServerError) as info:
        c.request("POST", "completions", {})
    assert "failed after 3 attempts (HTTP 500: boom)" in str(info.value) and "\n" not in str(info.value)
    assert c.attempts == 3 and len(sleeps) == 2


def test_a_client_error_is_not_retried(scripted):
    scripted.script = [(400, {"error": {"message": "prompt too long"}}, {})]
    c, sleeps = client(scripted)
    with pytest.raises(oa.ServerError, match=r"refused: HTTP 400: prompt too long"):
        c.request("POST", "completions", {})
    assert c.attempts == 1 and sleeps == []


def test_timeouts_and_refused_connections_are_retried(scripted):
    scripted.delay_s = 0.5
    c, sleeps = client(scripted, retries=1, timeout_s=0.1)
    with pytest.raises(oa.ServerError, match=r"failed after 2 attempts \(ReadTimeout"):
        c.request("POST", "completions", {})
    assert c.attempts == 2
    scripted.close()
    c, _ = client(scripted, retries=2)
    with pytest.raises(oa.ServerError, match=r"failed after 3 attempts \(ConnectError"):
        c.request("GET", "models")


def test_one_failure_fails_the_whole_batch(scripted):
    scripted.script = [(200, {"i": 0}, {}), (404, {"error": {"message": "gone"}}, {})] + [(200, {"i": 9}, {})] * 8
    c, _ = client(scripted, max_concurrency=1)
    with pytest.raises(oa.ServerError, match="gone"):
        c.map("completions", [{}] * 10)


def test_the_servers_k_comes_from_its_refusal_or_its_answer(scripted, tiny_gpt2):
    top = {"choices": [{"logprobs": {"top_logprobs": [{f"token_id:{i}": -1.0 for i in range(20)}]}}]}
    scripted.script = [(400, {"error": {"message": "Requested sample logprobs of 256, which is greater than max "
                                                   "allowed: 20"}}, {}), (200, top, {})]
    c, _ = client(scripted)
    assert oa.probe_top_k(c, "tiny", [1]) == 20 and c.attempts == 2  # the limit, then its keys checked
    scripted.script = [(200, {"choices": [{"logprobs": {"top_logprobs": [{f"token_id:{i}": -1.0 for i in
                                                                             range(5)}]}}]}, {})]
    assert oa.probe_top_k(c, "tiny", [1]) == 5


def test_engine_arguments_are_checked_before_any_request(monkeypatch):
    with pytest.raises(ValueError, match="needs --base-url"):
        oa.validate_options(BackendOptions())
    with pytest.raises(ValueError, match="must be http:// or https://"):
        oa.validate_options(options("127.0.0.1:8000"))
    monkeypatch.delenv("BIASLAB_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="BIASLAB_TEST_KEY is not set"):
        oa.validate_options(options("http://x/v1", api_key_env="BIASLAB_TEST_KEY"))
    with pytest.raises(ValueError, match="unknown engine argument .tensor_parallel_size."):
        oa.validate_options(options("http://x/v1", tensor_parallel_size=2))
    with pytest.raises(ValueError, match="--quant nf4 is chosen by the server"):
        oa.validate_options(BackendOptions(quant="nf4", engine_args=(("base_url", "http://x/v1"),)))
    with pytest.raises(ValueError, match="needs --dtype"):  # the server's dtype is keyed but never reported
        oa.validate_options(BackendOptions(engine_args=(("base_url", "http://x/v1"),)))


def test_a_k_store_above_the_engines_k_is_refused_before_any_run_row():
    from types import SimpleNamespace

    from biaslab.runners.collect import CollectConfig

    config = CollectConfig(dataset="winopron", protocol="choice", backend="openai", dtype="fp32", k_store=128,
                           engine_args={"base_url": "http://x/v1"}).plugin()
    with pytest.raises(ValueError, match=r"--k-store 128 exceeds the 100 top log-probabilities this engine returns: "
                                         r"give --k-store between 64 and 100 .* or raise the engine's limit .*"
                                         r"--max-logprobs 128; --backend vllm: --engine-arg max_logprobs=128"):
        config.check_engine(SimpleNamespace(max_top_k=100))
    default = CollectConfig(dataset="winopron", protocol="choice", backend="openai", dtype="fp32",
                            engine_args={"base_url": "http://x/v1"}).plugin()
    with pytest.raises(ValueError) as refused:  # vLLM's default max_logprobs: no --k-store can work
        default.check_engine(SimpleNamespace(max_top_k=20))
    message = str(refused.value)
    assert "returns at most 20" in message and "no --k-store works here" in message
    assert "--max-logprobs 64" in message and "lower --k-store" not in message
    config.check_engine(SimpleNamespace(max_top_k=128))   # equal: fine
    config.check_engine(SimpleNamespace(max_top_k=None))  # no limit (hf): fine
    sample = CollectConfig(dataset="winopron", protocol="choice", backend="openai", dtype="fp32", mode="sample",
                           k_store=128, engine_args={"base_url": "http://x/v1"}).plugin()
    sample.check_engine(SimpleNamespace(max_top_k=20))    # sample mode stores no top-K


def test_the_api_key_is_sent_as_a_bearer_token(scripted):
    scripted.script = [(200, {"ok": 1}, {})]
    c, _ = client(scripted, api_key="sekret")
    c.request("POST", "completions", {})
    assert scripted.headers["Authorization"] == "Bearer sekret"


# ------------------------------------------------------------------------------------ servers that differ from vLLM
@pytest.fixture
def stub(tiny_gpt2):
    """A server factory: FakeServer(tiny model, **differences); closed after the test."""
    made = []

    def make(**differences):
        made.append(FakeServer(tiny_gpt2.model, **differences))
        return made[-1]

    yield make
    for server in made:
        server.close()


def checks(server, tiny_gpt2_dir) -> oa.OpenAIPrepared:
    return oa.prepare(str(tiny_gpt2_dir), options(server.url, retries=5))


@pytest.mark.parametrize("needs", [{SCORE}, {TOP_K}, {SAMPLE}])
def test_a_server_refusing_token_id_prompts_is_named_at_once(stub, tiny_gpt2_dir, needs):
    """llama-cpp-python's server answers a token-id prompt with HTTP 500 (a validation error): refused in one
    line, without the retries (one id request, one text request to tell the two apart)."""
    server = stub(token_id_prompts=False)
    prepared = checks(server, tiny_gpt2_dir)
    server.completions = 0
    with pytest.raises(Unsupported) as refused:
        prepared.verify(frozenset(needs))
    assert "does not accept prompts as token-id lists (it answers text prompts" in str(refused.value)
    assert "validation error" in str(refused.value) and "\n" not in str(refused.value)
    assert server.completions == 2


@pytest.mark.parametrize("shift, reason", [
    ("lead", "echoes a log-probability for the first prompt token"),
    ("inner", "not log p(token | the tokens before it)"),
])
def test_shifted_echo_log_probabilities_are_refused_for_prob(stub, tiny_gpt2_dir, shift, reason):
    server = stub(echo_shift=shift)
    with pytest.raises(Unsupported, match=re.escape(reason)):
        checks(server, tiny_gpt2_dir).verify(frozenset({SCORE}))
    checks(server, tiny_gpt2_dir).verify(frozenset({TOP_K, SAMPLE}))  # what prob needs only


def test_token_text_instead_of_ids_is_refused_where_ids_are_needed(stub, tiny_gpt2_dir):
    server = stub(text_tokens=True)
    checks(server, tiny_gpt2_dir).verify(frozenset({SCORE}))  # prob reads only the echoed values: fine
    with pytest.raises(Unsupported, match=r"keys its top log-probabilities by token text \('tok"):
        checks(server, tiny_gpt2_dir).verify(frozenset({TOP_K}))
    with pytest.raises(Unsupported, match=r"returns sampled tokens as text \(\['tok"):
        checks(server, tiny_gpt2_dir).verify(frozenset({SAMPLE}))


def test_a_server_ignoring_seeds_is_refused_for_sampling(stub, tiny_gpt2_dir):
    server = stub(honour_seed=False)
    with pytest.raises(Unsupported, match="per-request seeds are not honoured"):
        checks(server, tiny_gpt2_dir).verify(frozenset({SAMPLE}))


def test_the_vllm_like_server_passes_every_check_once(fake, tiny_gpt2_dir):
    prepared = checks(fake, tiny_gpt2_dir)
    fake.completions = 0
    prepared.verify(frozenset({SCORE, TOP_K, SAMPLE}))
    assert prepared.max_top_k == 64 and fake.completions == 1 + 2 + 2 + 2  # ids, echo, top-K, seeds
    prepared.verify(frozenset({SCORE}))
    assert fake.completions == 7  # verified once


@pytest.mark.parametrize("protocol, extra", [("prob", []), ("choice", []), ("gen", ["--samples", "1"])])
def test_collect_against_a_llama_cpp_like_server_refuses_before_any_run_row(stub, tiny_gpt2_dir, data_dir,
                                                                            dataset_folder, tmp_path, protocol,
                                                                            extra):
    from click.testing import CliRunner

    from biaslab.cli.runners_cli import runners

    dataset = {"prob": "winogender", "choice": "winopron", "gen": "misgendered"}[protocol]
    dataset_folder(dataset)
    server = stub(token_id_prompts=False, text_tokens=True, echo_shift="lead")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(runners, ["collect", "--dataset", dataset, "--protocol", protocol, "--backend",
                                          "openai", "--base-url", server.url, "--model", str(tiny_gpt2_dir),
                                          "--dtype", "fp32", "--db", str(db), "--data-dir", str(data_dir), *extra])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: --backend openai: the server at http://127.0.0.1:")
    assert "does not accept prompts as token-id lists" in lines[0]
    assert not db.exists()  # no warehouse, so no run row


def test_a_server_failing_mid_run_is_one_line_and_the_run_is_marked_failed(stub, tiny_gpt2_dir, data_dir,
                                                                          dataset_folder, tmp_path):
    from click.testing import CliRunner

    from biaslab.cli.runners_cli import runners
    from biaslab.warehouse import Warehouse

    dataset_folder("winogender")
    server = stub()
    server.fail_after = 3  # the checks pass, then every completion answers 503
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(runners, ["collect", "--dataset", "winogender", "--backend", "openai", "--base-url",
                                          server.url, "--model", str(tiny_gpt2_dir), "--dtype", "fp32", "--db",
                                          str(db), "--data-dir", str(data_dir), "--limit", "4",
                                          "--engine-arg", "retries=1"])
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith(" ")]
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert lines[-1].startswith("Error: POST http://127.0.0.1:") and "failed after 2 attempts (HTTP 503" in lines[-1]
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT status FROM runs") == [("failed",)] and wh.count("sequence_scores") == 0


def test_a_hung_server_ends_the_request_after_two_silences(scripted):
    """Issue 45, item 5: a server that takes the request and never answers is asked twice, whatever `retries` is,
    so with the defaults (120 s) a run ends within 4 minutes in one line naming the server."""
    import time

    scripted.delay_s = 3.0
    c, sleeps = client(scripted, retries=5, timeout_s=0.2)
    start = time.perf_counter()
    with pytest.raises(oa.ServerError, match=r"POST http://127\.0\.0\.1:\d+/v1/completions failed after 2 attempts "
                                             r"\(ReadTimeout.*sent no answer within 0\.2 s, 2 times") as info:
        c.request("POST", "completions", {})
    assert c.attempts == 2 and len(sleeps) == 1 and time.perf_counter() - start < 2.5
    assert "\n" not in str(info.value)
