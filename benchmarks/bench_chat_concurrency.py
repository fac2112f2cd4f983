"""Chat collections at high concurrency against a provider with 200 ms latency, beside a plain async client sending
the same requests (issue 57).

Usage: python benchmarks/bench_chat_concurrency.py [--concurrency 64] [--latency 0.2] [--prompts 500] [--samples 4]
       [--repeats 3]

A stand-in of OpenAI's chat completions API on 127.0.0.1 (tests/chat_stub.py; every completion waits --latency
seconds, its listen backlog raised so that no connection waits for the kernel) answers:

1. `biaslab.collect` of WinoPron in sample mode through `--backend openai-chat` with `max_concurrency` set, end to
   end (stored chunk by chunk in a fresh warehouse, as `runners collect` does);
2. the same requests (the bodies the stub received in 1) through the engine's calls, chunks of 64 as the collection
   cuts them: `call_chunks` (requests in flight across chunk boundaries, this release) and one `call_all` per chunk
   (each chunk waits for its slowest request before the next starts: the release before);
3. the same bodies from a plain `httpx.AsyncClient` with an `asyncio.Semaphore(concurrency)`: the baseline.

The measure is the sending window: from the first request's arrival to the last reply (the stub's clock), so start-up
and loading do not count. Target: the collection's window at least 0.9x as fast as the baseline's.

Then the whole commands, each a process of its own timed from its start to its exit (start-up, imports, loading the
dataset and storing included): `runners collect` as a user types it (a fresh warehouse), beside a plain script that
imports httpx and sends the same bodies at the same concurrency (3 as a command). Target: the command at least 0.9x
the plain script's rate.
Writes bench_out/chat_concurrency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import os
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

from _common import cpu_facts, first_prompts, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from chat_stub import ChatStub  # noqa: E402

TARGET = 0.9
#: the four measures, in the order each repeat takes them
NAMES = ("collect (end to end, stored per chunk)", "engine, call_chunks (this release)",
         "engine, call_all per chunk (before)", "plain httpx.AsyncClient (baseline)")
#: the chunk a chat collection stores at once (`runners.protocols.choice_chat.CHAT_CHUNK`)
CHUNK = 64


class TimedStub(ChatStub):
    """The stand-in, recording when each completion ends; `GET /bench/ends` returns the bodies received and the
    ends (the stub's clock) since the last such request, and forgets them."""

    def __init__(self, latency: float):
        http.server.ThreadingHTTPServer.request_queue_size = 1024  # every connection accepted at once
        super().__init__(extensions=True)
        self.delay_s, self.ends = latency, []

    def answer(self, body):
        if body.get("max_completion_tokens", 0) > 1:  # the engine's 1-token probe (its snapshot) is not counted
            with self.lock:
                self.ends.append(time.perf_counter())
        return super().answer(body)

    def batch_get(self, path: str):
        if path != "/bench/ends":
            return super().batch_get(path)
        with self.lock:
            taken = {"ends": self.ends, "bodies": self.bodies}
            self.ends, self.bodies = [], []
        return 200, taken


class StubProcess:
    """The stand-in in a process of its own (its handler threads do not share this process's interpreter lock with
    the clients measured)."""

    def __init__(self, latency: float):
        import subprocess

        self.latency = latency
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", str(latency)], stdout=subprocess.PIPE,
                                        text=True)
        self.url = self.process.stdout.readline().strip()

    def taken(self) -> dict:
        import httpx

        return httpx.get(self.url.removesuffix("/v1") + "/bench/ends", timeout=30).json()

    def window(self, ends: list[float]) -> float:
        """Seconds from the first arrival (its end less the latency) to the last end."""
        return max(ends) - min(ends) + self.latency

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def collect(stub: StubProcess, concurrency: int, prompts: int, samples: int, db: Path) -> int:
    import biaslab

    os.environ["BENCH_STUB_KEY"] = "sk-bench"
    result = biaslab.collect("winopron", model="stub-model", backend="openai-chat", db=str(db),
                             **first_prompts(prompts), protocol="choice", mode="sample", samples=samples, seed=1,
                             engine_args={"base_url": stub.url, "api_key_env": "BENCH_STUB_KEY",
                                          "max_concurrency": concurrency})
    return result.added


def engine_backend(stub: StubProcess, concurrency: int):
    from biaslab.engines import openai_chat
    from biaslab.engines.base import BackendOptions

    options = BackendOptions(engine_args=(("base_url", stub.url), ("api_key_env", "BENCH_STUB_KEY"),
                                          ("max_concurrency", concurrency)))
    return openai_chat.prepare("stub-model", options).load()


#: fields of the wire body that the SDK takes as `extra_body` (vLLM's sampling extensions)
EXTRA = ("top_k", "min_tokens", "repetition_penalty", "min_p", "add_generation_prompt", "continue_final_message")


def sdk_body(wire: dict) -> dict:
    """The SDK call's arguments of a body as the stub received it (vLLM's fields back into `extra_body`)."""
    body = {k: v for k, v in wire.items() if k not in EXTRA}
    extra = {k: wire[k] for k in EXTRA if k in wire}
    return {**body, "extra_body": extra} if extra else body


def replay(backend, bodies: list[dict], concurrency: int, pipelined: bool) -> None:
    from biaslab.engines.chat import call_all, call_chunks

    chunks = [[partial(backend._one, sdk_body(body)) for body in bodies[i:i + CHUNK]]
              for i in range(0, len(bodies), CHUNK)]
    if pipelined:
        for _ in call_chunks(iter(chunks), concurrency):
            pass
    else:
        for calls in chunks:
            call_all(lambda call: call(), calls, concurrency)


async def plain_async(url: str, bodies: list[dict], concurrency: int) -> None:
    import httpx

    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        async def one(body):
            async with gate:
                answer = await client.post("/chat/completions", json=body,
                                           headers={"Authorization": "Bearer sk-bench"})
                answer.raise_for_status()
        await asyncio.gather(*(one(b) for b in bodies))


def plain(url: str, bodies: list[dict], concurrency: int) -> None:
    asyncio.run(plain_async(url, bodies, concurrency))


#: the plain client as a command of its own: `python -c PLAIN_COMMAND BODIES.json URL CONCURRENCY`
PLAIN_COMMAND = """
import asyncio, json, sys
import httpx
bodies, url, concurrency = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
async def main():
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        async def one(body):
            async with gate:
                answer = await client.post("/chat/completions", json=body, headers={"Authorization": "Bearer sk-bench"})
                answer.raise_for_status()
        await asyncio.gather(*(one(b) for b in bodies))
asyncio.run(main())
"""


def runners_command(stub: StubProcess, concurrency: int, prompts: int, samples: int, db: Path) -> list[str]:
    """`runners collect` as a user types it: the same collection as `collect`."""
    runners = Path(sys.executable).with_name("runners")
    return [str(runners), "collect", "--dataset", "winopron", "--limit", str(-(-prompts // 10)), "--limit-order",
            "file", "--backend", "openai-chat", "--base-url", stub.url, "--model", "stub-model", "--mode", "sample",
            "--samples", str(samples), "--seed", "1", "--max-concurrency", str(concurrency), "--api-key-env",
            "BENCH_STUB_KEY", "--db", str(db), "--yes"]


def whole_commands(stub: StubProcess, args, folder: Path) -> tuple[float, float]:
    """Seconds from start to exit of `runners collect` (a fresh warehouse) and of the plain client's command
    sending the bodies the collection sent."""
    import json
    import subprocess

    stub.taken()
    start = time.perf_counter()
    subprocess.run(runners_command(stub, args.concurrency, args.prompts, args.samples, folder / "cmd.duckdb"),
                   check=True, capture_output=True)
    command = time.perf_counter() - start
    bodies = [b for b in stub.taken()["bodies"] if b.get("max_completion_tokens", 0) > 1]
    (folder / "bodies.json").write_text(json.dumps(bodies))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", PLAIN_COMMAND, str(folder / "bodies.json"), stub.url,
                    str(args.concurrency)], check=True, capture_output=True)
    return command, time.perf_counter() - start


def measure(stub: StubProcess, run) -> float:
    stub.taken()
    run()
    return stub.window(stub.taken()["ends"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--prompts", type=int, default=500)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)  # the stand-in's process
    args = parser.parse_args()
    if args.serve is not None:
        server = TimedStub(args.serve)
        print(server.url, flush=True)
        threading.Event().wait()
    os.environ["BENCH_STUB_KEY"] = "sk-bench"
    stub = StubProcess(args.latency)
    load_before = os.getloadavg()
    windows: dict[str, list[float]] = {name: [] for name in NAMES}
    commands: dict[str, list[float]] = {"runners collect (whole command)": [], "plain client (whole command)": []}
    try:
        for _ in range(args.repeats):  # each repeat in a fresh warehouse, the measures one after the other
            with tempfile.TemporaryDirectory() as folder:
                for name, seconds in zip(commands, whole_commands(stub, args, Path(folder))):
                    commands[name].append(seconds)
                stub.taken()
                added = collect(stub, args.concurrency, args.prompts, args.samples, Path(folder) / "w.duckdb")
                taken = stub.taken()
                windows[NAMES[0]].append(stub.window(taken["ends"]))
                bodies = [b for b in taken["bodies"] if b.get("max_completion_tokens", 0) > 1]  # the probe left out
            backend = engine_backend(stub, args.concurrency)
            try:
                windows[NAMES[1]].append(measure(stub, partial(replay, backend, bodies, args.concurrency, True)))
                windows[NAMES[2]].append(measure(stub, partial(replay, backend, bodies, args.concurrency, False)))
            finally:
                backend.close()
            windows[NAMES[3]].append(measure(stub, partial(plain, stub.url, bodies, args.concurrency)))
    finally:
        stub.close()
    collected, pipelined, per_chunk, baseline = (statistics.median(windows[name]) for name in NAMES)
    ideal = -(-len(bodies) // args.concurrency) * args.latency
    rows = dict(zip(NAMES, (collected, pipelined, per_chunk, baseline)))
    print(f"{len(bodies)} requests ({added} samples stored), concurrency {args.concurrency}, latency "
          f"{args.latency:g} s: ideal window {ideal:.2f} s; medians of {args.repeats} repeats")
    for name, seconds in rows.items():
        print(f"{name:<42} {seconds:6.2f} s  {baseline / seconds:5.2f}x the baseline's rate")
    met = baseline / collected >= TARGET
    print(f"target: collect at least {TARGET:g}x the baseline's rate: {'met' if met else 'NOT met'}")
    command, plain_command = (statistics.median(v) for v in commands.values())
    for name, seconds in zip(commands, (command, plain_command)):
        print(f"{name:<42} {seconds:6.2f} s  {plain_command / seconds:5.2f}x the plain command's rate")
    met_command = plain_command / command >= TARGET
    print(f"target: the whole command at least {TARGET:g}x the plain command's rate: "
          f"{'met' if met_command else 'NOT met'}")
    path = write_json("chat_concurrency", {
        "requests": len(bodies), "samples_stored": added, "concurrency": args.concurrency, "latency_s": args.latency,
        "ideal_window_s": ideal, "windows_s": rows, "repeats_s": windows,
        "ratio_collect_to_baseline": baseline / collected,
        "ratio_call_chunks_to_baseline": baseline / pipelined, "ratio_per_chunk_to_baseline": baseline / per_chunk,
        "target": TARGET, "met": met, "whole_commands_s": commands,
        "ratio_command_to_plain_command": plain_command / command, "met_command": met_command,
        "cpu": cpu_facts(), "load_before": load_before,
        "load_after": os.getloadavg()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
