"""A stub of OpenAI's chat completions API on 127.0.0.1 (http.server in a thread), following the documented wire
format (`POST /v1/chat/completions`: `choices[].message`, `finish_reason`, `logprobs.content[].top_logprobs`,
`model`, `system_fingerprint`, `usage`), for the `openai-chat` engine's tests.

Its "model" is a fixed rule, so every number is known by hand: a sampled reply to a forced choice answers the
first option listed in the user message when `seed_unit(seed) < P_FIRST`, else the second (the seed is required);
a logprobs reply is the greedy answer with the top log-probabilities of `alternatives(first, second)` where the
answer begins (and `LEAD_LOGPROB` for the lead's tokens); a message without options gets an open continuation.
`extensions=True` answers `GET /version` as vLLM does; `extensions=False` answers 404 there and 400 to a request
holding vLLM's fields (top_k, min_tokens, continue_final_message), as OpenAI does; `script` (a list of (status,
body, headers)) is served first, one entry per completion; `snapshot` names the model that answers (change it to
change the snapshot mid-run) and `fingerprint` its system fingerprint (not part of the snapshot).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: `runners collect` arguments that keep one prompt (unprimed, MF) of each WinoPron template: `--limit N` counts
#: templates (10 prompts each), so with these it is N prompts, as the engines' tests count them
ONE_PROMPT = ("--where", "context=unprimed", "--where", "option_order=MF")
#: `--dataset winopron` with ONE_PROMPT
WINOPRON = ("--dataset", "winopron", *ONE_PROMPT)

P_FIRST = 0.7
#: the alternatives where the answer begins, as (role, probability): the first option, the second, the first
#: option's first two letters (a prefix of it alone for every WinoPron pair), a letter of no option, a space; 0.03
#: of the mass is not returned
ANSWER_ALTERNATIVES = [("first", 0.55), ("second", 0.25), ("prefix", 0.10), ("invalid", 0.04),
                       ("unresolved", 0.03)]
OPTIONS = re.compile(r"options: \[(.+?), (.+?)\]")


def alternatives(first: str, second: str) -> list[tuple[str, float]]:
    """(token text, probability) of `ANSWER_ALTERNATIVES` for a prompt listing `first` and `second`."""
    text = {"first": first, "second": second, "prefix": first[:2], "invalid": "x", "unresolved": " "}
    return [(text[role], p) for role, p in ANSWER_ALTERNATIVES]
LEAD_LOGPROB = math.log(0.9)
#: the lead's tokens when no prefill is continued ("{'BLANK':'" written by the model)
LEAD_TOKENS = ["{'", "BLANK", "':", "'"]
EXTENSION_FIELDS = ("top_k", "min_tokens", "continue_final_message", "add_generation_prompt", "min_p",
                    "repetition_penalty")


def seed_unit(seed: int) -> float:
    """A number in [0, 1) fixed by the seed."""
    return int(hashlib.sha256(str(seed).encode()).hexdigest()[:8], 16) / 16 ** 8


class ChatStub:
    def __init__(self, *, extensions: bool = True, snapshot: str = "stub-model-2026-01-01",
                 fingerprint: str | None = "fp_1"):
        self.extensions, self.snapshot, self.fingerprint = extensions, snapshot, fingerprint
        self.script: list[tuple[int, object, dict]] = []
        self.files: dict[str, bytes] = {}  # the batch APIs: uploaded files, batches, polls before a batch ends
        self.batches: dict[str, dict] = {}
        self.batch_posts: list[str] = []
        self.polls_to_end = 2
        self.batch_failures: dict[str, int] = {}  # OpenAI's batches: batch id -> its first N lines fail (error file)
        self.delay_s = 0.0  # every completion waits this long (an interruption test's slow provider)
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body, headers=None):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/version" and stub.extensions:  # vLLM's server says what it is
                    self._send(200, {"version": "0.32.0-stub"})
                    return
                found = stub.batch_get(self.path.split("?")[0])
                if found is None:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                else:
                    self._send(*found)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                path = self.path.split("?")[0]
                if path.endswith("/files") or path.endswith("/batches"):  # the batch APIs
                    with stub.lock:
                        stub.batch_posts.append(path)
                    self._send(*stub.batch_post(path, raw, self.headers.get("Content-Type", "")))
                    return
                body = json.loads(raw or b"{}")
                with stub.lock:
                    stub.bodies.append(body)
                    stub.headers.append(dict(self.headers))
                    scripted = stub.script.pop(0) if stub.script else None
                if scripted is not None:
                    self._send(*scripted)
                    return
                if stub.delay_s:
                    import time

                    time.sleep(stub.delay_s)
                if isinstance(stub, (GeminiStub, AnthropicStub)):
                    self._send(*stub.answer({**body, "_path": self.path.split("?")[0]}))
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(*stub.answer(body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def completions(self) -> int:
        return len(self.bodies)

    # --- OpenAI's Batch API: POST /v1/files (multipart), POST /v1/batches, GET /v1/batches/{id}, GET .../content
    def batch_post(self, path: str, raw: bytes, content_type: str) -> tuple[int, dict]:
        if path.endswith("/files"):
            from email import policy
            from email.parser import BytesParser

            message = BytesParser(policy=policy.default).parsebytes(
                f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
            part = next(p for p in message.iter_parts() if p.get_param("name", header="content-disposition") == "file")
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = part.get_payload(decode=True)
            return 200, {"id": file_id, "object": "file", "bytes": len(self.files[file_id]), "created_at": 0,
                         "filename": "batch.jsonl", "purpose": "batch", "status": "processed"}
        body = json.loads(raw or b"{}")
        batch_id = f"batch_{len(self.batches) + 1}"
        lines = [json.loads(line) for line in self.files[body["input_file_id"]].decode().splitlines() if line]
        self.batches[batch_id] = {"lines": lines, "polls": 0}
        return 200, self._batch(batch_id)

    def _batch(self, batch_id: str) -> dict:
        held = self.batches[batch_id]
        ended = held["polls"] >= self.polls_to_end
        total, failed = len(held["lines"]), self.batch_failures.get(batch_id, 0)
        return {"id": batch_id, "object": "batch", "endpoint": "/v1/chat/completions", "completion_window": "24h",
                "input_file_id": "file-in", "created_at": 0, "status": "completed" if ended else "in_progress",
                "output_file_id": f"file-out-{batch_id}" if ended else None,
                "error_file_id": f"file-err-{batch_id}" if ended and failed else None,
                "request_counts": {"total": total, "completed": total - failed if ended else 0,
                                   "failed": failed if ended else 0}}

    def batch_get(self, path: str) -> tuple[int, object] | None:
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[1] == "batches" and parts[2] in self.batches:
            self.batches[parts[2]]["polls"] += 1
            return 200, self._batch(parts[2])
        if len(parts) == 4 and parts[1] == "files" and parts[2].startswith(("file-out-", "file-err-")) \
                and parts[3] == "content":
            batch_id = parts[2][len("file-out-"):]
            failed, out = self.batch_failures.get(batch_id, 0), []
            for k, line in enumerate(self.batches[batch_id]["lines"]):
                if (k < failed) != parts[2].startswith("file-err-"):
                    continue
                status, reply = (500, {"error": {"message": "The server had an error"}}) if k < failed \
                    else self.answer(line["body"])
                out.append(json.dumps({"id": "r", "custom_id": line["custom_id"], "error": None,
                                       "response": {"status_code": status, "request_id": "q", "body": reply}}))
            return 200, "\n".join(out).encode()
        return None

    def answer(self, body: dict) -> tuple[int, dict]:
        unknown = [f for f in EXTENSION_FIELDS if f in body]
        if unknown and not self.extensions:
            return 400, {"error": {"message": f"Unrecognized request argument supplied: {unknown[0]}",
                                   "type": "invalid_request_error", "param": unknown[0]}}
        if body.get("model") != "stub-model":
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist"}}
        continued = bool(body.get("continue_final_message"))
        users = [m["content"] for m in body.get("messages") or [] if m["role"] == "user"]
        listed = OPTIONS.search(users[-1]) if users else None
        seed = body.get("seed")
        if listed is None:
            text = f" and then she said hello ({seed})"  # gen: an open continuation
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length",
                      "logprobs": None}
        elif body.get("logprobs"):
            choice = self._logprobs_choice(continued, int(body.get("top_logprobs") or 0), *listed.groups())
        else:
            answer = listed[1] if seed is not None and seed_unit(int(seed)) < P_FIRST else listed[2]
            text = f"{answer}'}}" if continued else f"{{'BLANK': '{answer}'}}"
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                      "logprobs": None}
        reply = {"id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": self.snapshot,
                 "choices": [choice], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        if self.fingerprint is not None:
            reply["system_fingerprint"] = self.fingerprint
        return 200, reply

    def _logprobs_choice(self, continued: bool, k: int, first: str, second: str) -> dict:
        def entry(token, lp, alternatives):
            return {"token": token, "logprob": lp, "bytes": list(token.encode()),
                    "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}
                                     for t, v in alternatives[:k]]}

        content = [] if continued else [entry(t, LEAD_LOGPROB, [(t, LEAD_LOGPROB), ("<", math.log(0.05))])
                                        for t in LEAD_TOKENS]
        answer = [(t, math.log(p)) for t, p in alternatives(first, second)]
        content.append(entry(first, answer[0][1], answer))
        content.append(entry("'}", LEAD_LOGPROB, [("'}", LEAD_LOGPROB)]))
        text = "".join(c["token"] for c in content)
        return {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                "logprobs": {"content": content}}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class GeminiStub(ChatStub):
    """The same "model" behind Google's Gemini REST format (`POST /{version}/models/{model}:generateContent`:
    `contents`, `systemInstruction`, `generationConfig`; replies with `candidates[].content.parts`, `finishReason`,
    `logprobsResult.chosenCandidates / topCandidates`, `modelVersion`). No prefill is continued (Gemini has none)."""

    def __init__(self, *, snapshot: str = "stub-gemini-001"):
        super().__init__(extensions=False, snapshot=snapshot, fingerprint=None)

    def answer(self, body: dict) -> tuple[int, dict]:
        path = body.pop("_path", "")
        match = re.search(r"/models/([^/:]+):generateContent$", path)
        if match is None or match[1] != "stub-model":
            return 404, {"error": {"code": 404, "message": f"models/{match[1] if match else '?'} is not found",
                                   "status": "NOT_FOUND"}}
        config = body.get("generationConfig") or {}
        users = [p["text"] for c in body.get("contents") or [] if c.get("role") == "user" for p in c["parts"]]
        listed = OPTIONS.search(users[-1]) if users else None
        seed = config.get("seed")
        candidate: dict = {"index": 0, "finishReason": "STOP"}
        if listed is None:
            text = f" and then she said hello ({seed})"
        elif config.get("responseLogprobs"):
            k = int(config.get("logprobs") or 0)
            choice = self._logprobs_choice(False, k, *listed.groups())
            steps = choice["logprobs"]["content"]
            text = choice["message"]["content"]
            candidate["logprobsResult"] = {
                "chosenCandidates": [{"token": s["token"], "logProbability": s["logprob"], "tokenId": i}
                                     for i, s in enumerate(steps)],
                "topCandidates": [{"candidates": [{"token": a["token"], "logProbability": a["logprob"], "tokenId": j}
                                                  for j, a in enumerate(s["top_logprobs"])]} for s in steps]}
        else:
            answer = listed[1] if seed is not None and seed_unit(int(seed)) < P_FIRST else listed[2]
            text = f"{{'BLANK': '{answer}'}}"
        candidate["content"] = {"role": "model", "parts": [{"text": text}]}
        return 200, {"candidates": [candidate], "modelVersion": self.snapshot, "responseId": "stub",
                     "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}}


class AnthropicStub(ChatStub):
    """The same "model" behind Anthropic's Messages API (`POST /v1/messages`: `system`, `messages` ending with the
    assistant prefill to continue, `max_tokens`, sampling fields; replies with `content` text blocks, `stop_reason`
    and `model`). The API takes no seed, so a reply answers the first option listed except on every third request
    (the second)."""

    def __init__(self, *, snapshot: str = "stub-claude-2026-01-01"):
        super().__init__(extensions=False, snapshot=snapshot, fingerprint=None)
        self.refused_fields: tuple[str, ...] = ()  # sampling fields answered with 400, as an API without them would

    def answer(self, body: dict) -> tuple[int, dict]:
        if body.pop("_path", "") != "/v1/messages":
            return 404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}}
        refused = [f for f in self.refused_fields if f in body]
        if refused:
            return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                    "message": f"{refused[0]}: Extra inputs are not permitted"}}
        if body.get("model") != "stub-model":
            return 404, {"type": "error", "error": {"type": "not_found_error", "message": f"model: {body['model']}"}}
        messages = body.get("messages") or []
        users = [m["content"] for m in messages if m["role"] == "user"]
        listed = OPTIONS.search(users[-1]) if users else None
        continued = bool(messages) and messages[-1]["role"] == "assistant"
        if listed is None:
            text, stop = f" and then she said hello ({len(self.bodies)})", "max_tokens"
        else:
            answer = listed[2] if len(self.bodies) % 3 == 0 else listed[1]
            text, stop = (f"{answer}'}}" if continued else f"{{'BLANK': '{answer}'}}"), "end_turn"
        return 200, {"id": "msg_stub", "type": "message", "role": "assistant", "model": self.snapshot,
                     "content": [{"type": "text", "text": text}], "stop_reason": stop, "stop_sequence": None,
                     "usage": {"input_tokens": 10, "output_tokens": 5}}

    # --- Message Batches: POST /v1/messages/batches, GET /v1/messages/batches/{id}, GET .../results (JSONL)
    def batch_post(self, path: str, raw: bytes, content_type: str) -> tuple[int, dict]:
        if path != "/v1/messages/batches":
            return 404, {"type": "error", "error": {"type": "not_found_error", "message": path}}
        body = json.loads(raw or b"{}")
        batch_id = f"msgbatch_{len(self.batches) + 1}"
        self.batches[batch_id] = {"lines": body["requests"], "polls": 0}
        return 200, self._batch(batch_id)

    def _batch(self, batch_id: str) -> dict:
        held = self.batches[batch_id]
        ended = held["polls"] >= self.polls_to_end
        total = len(held["lines"])
        return {"id": batch_id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": {"processing": 0 if ended else total, "succeeded": total if ended else 0,
                                   "errored": 0, "canceled": 0, "expired": 0},
                "results_url": f"{self.url.removesuffix('/v1')}/v1/messages/batches/{batch_id}/results" if ended
                else None, "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-02T00:00:00Z",
                "ended_at": "2026-01-01T00:10:00Z" if ended else None, "archived_at": None,
                "cancel_initiated_at": None}

    def batch_get(self, path: str) -> tuple[int, object] | None:
        parts = path.strip("/").split("/")
        if parts[:3] != ["v1", "messages", "batches"] or len(parts) < 4 or parts[3] not in self.batches:
            return None
        if len(parts) == 4:
            self.batches[parts[3]]["polls"] += 1
            return 200, self._batch(parts[3])
        out = []
        for line in self.batches[parts[3]]["lines"]:
            status, reply = self.answer({**line["params"], "_path": "/v1/messages"})
            result = {"type": "succeeded", "message": reply} if status == 200 else \
                {"type": "errored", "error": reply}
            out.append(json.dumps({"custom_id": line["custom_id"], "result": result}))
        return 200, "\n".join(out).encode()
