"""The default dtype on a CPU, measured rather than guessed from a flag list, and a function of the CPU, not of
how busy it is.

CPUs with native bf16 instructions differ: on an AMD EPYC with AVX512-BF16 (no AMX) bf16 ran the project's
benchmark 1.9x faster than fp32, on an Intel Xeon with AVX512-BF16 (no AMX) 1.5x slower (issue 34). So where the
CPU has native bf16 (AVX512-BF16 or AMX: without them bf16 is emulated and always slower), the first use of a model
shape times one transformer block of the model's own shapes in both dtypes and takes bf16 only when it is at least
`MARGIN` times faster (fp32 is the more exact; a near tie keeps it). The probe:

* a block of the model's shapes (hidden size d, intermediate size m, h attention heads; read from its config):
  layer norm, q/k/v projections d -> d, causal scaled-dot-product attention, output projection, layer norm, gate
  and up projections d -> m, SiLU(gate) * up, down projection m -> d; on `PROBE_BATCH` sequences of
  `PROBE_TOKENS` tokens (the size of a scoring batch);
* robust to other processes (issue 46: timed on the machine's threads by the wall clock, one decision under load
  said fp32 31 ms / bf16 88 ms and the same CPU quiet fp32 57 ms / bf16 11 ms, and the dtype is part of the model
  key): the block runs on **one thread** and is timed in **this thread's CPU time** (`time.thread_time`), which
  does not count the time other processes hold the core; the two dtypes run **interleaved**, round after round
  (the first of a round alternating), so a disturbance hits both alike; each dtype's time is its **fastest** round.
  Both dtypes are warmed up twice; at least `MIN_ROUNDS` rounds and `BUDGET_S` seconds in all (about half a second);
* the result is cached per CPU model (/proc/cpuinfo "model name"), torch version and shape, in `cache_file()`
  (`$BIASLAB_CACHE` or the per-user cache folder), and recorded in every run's parameters (`dtype_choice`, with
  the load average when it was measured); `--dtype` overrides it. `benchmarks/bench_dtype_choice.py --neighbour`
  makes ten decisions quiet and ten beside a CPU-bound neighbour and counts how many agree.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .models import cpu_supports_bf16

#: bf16 is chosen only when the block runs at least this many times faster in bf16 than in fp32
MARGIN = 1.10
PROBE_BATCH, PROBE_TOKENS = 8, 64
#: the probe's wall-clock budget for both dtypes together, and the fewest interleaved rounds it takes
BUDGET_S, MIN_ROUNDS = 0.4, 4
#: what the cache key says about how the choice was measured (entries of an older probe are not reused)
PROBE = "1 thread, CPU time, interleaved"
#: shapes used when the config does not say (SmolLM2-135M's)
DEFAULT_SHAPE = (576, 1536, 9)


@dataclass(frozen=True)
class DtypeChoice:
    """The measured default: `dtype`, the block's time in each dtype (ms), what was measured and whether it came
    from the cache."""

    dtype: str
    fp32_ms: float | None
    bf16_ms: float | None
    cpu: str
    torch: str
    threads: int
    shape: tuple[int, int, int]
    reason: str
    cached: bool = False

    def record(self) -> dict[str, Any]:
        """The run-parameter form (JSON)."""
        return {**asdict(self), "shape": list(self.shape)}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def cache_file() -> Path:
    """Where measured choices are kept: $BIASLAB_CACHE/dtype_choice.json, else the per-user cache folder's."""
    env = os.environ.get("BIASLAB_CACHE")
    if env:
        return Path(env).expanduser() / "dtype_choice.json"
    import platformdirs

    return Path(platformdirs.user_cache_dir("biaslab")) / "dtype_choice.json"


def model_shape(config: Any) -> tuple[int, int, int]:
    """(hidden size, intermediate size, attention heads) from a transformers config; `DEFAULT_SHAPE` where it
    does not say."""
    if config is None:
        return DEFAULT_SHAPE
    hidden = next((getattr(config, k) for k in ("hidden_size", "n_embd", "d_model") if getattr(config, k, None)),
                  DEFAULT_SHAPE[0])
    inner = next((getattr(config, k) for k in ("intermediate_size", "n_inner", "ffn_dim") if getattr(config, k, None)),
                 4 * hidden)
    heads = max(1, int(next((getattr(config, k) for k in ("num_attention_heads", "n_head")
                             if getattr(config, k, None)), 1)))
    if int(hidden) % heads:
        heads = 1
    return int(hidden), int(inner), heads


def _block(dtype: torch.dtype, shape: tuple[int, int, int]) -> Callable[[], torch.Tensor]:
    """One transformer block of `shape` in `dtype` on fixed random weights (the module docstring), as a function."""
    hidden, inner, heads = shape
    f = torch.nn.functional
    gen = torch.Generator().manual_seed(0)

    def weight(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=gen) / cols ** 0.5).to(dtype)

    qkv, out, gate, up, down = (weight(3 * hidden, hidden), weight(hidden, hidden), weight(inner, hidden),
                                weight(inner, hidden), weight(hidden, inner))
    x = torch.randn(PROBE_BATCH, PROBE_TOKENS, hidden, generator=gen).to(dtype)

    def block() -> torch.Tensor:
        h = f.layer_norm(x, (hidden,))
        q, k, v = f.linear(h, qkv).split(hidden, dim=-1)
        split = [t.view(PROBE_BATCH, PROBE_TOKENS, heads, hidden // heads).transpose(1, 2) for t in (q, k, v)]
        a = f.scaled_dot_product_attention(*split, is_causal=True).transpose(1, 2).reshape(x.shape)
        y = x + f.linear(a, out)
        h = f.layer_norm(y, (hidden,))
        return y + f.linear(f.silu(f.linear(h, gate)) * f.linear(h, up), down)

    return block


def block_times_ms(shape: tuple[int, int, int], budget_s: float = BUDGET_S,
                   min_rounds: int = MIN_ROUNDS) -> tuple[float, float]:
    """(fp32 ms, bf16 ms): the fastest CPU time of one block of `shape` in each dtype, on one thread, the dtypes
    interleaved (the module docstring). torch's thread count is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the block's work runs on this thread, so this thread's CPU time is all of it
    try:
        blocks = {torch.float32: _block(torch.float32, shape), torch.bfloat16: _block(torch.bfloat16, shape)}
        best = dict.fromkeys(blocks, float("inf"))
        with torch.inference_mode():
            for block in blocks.values():
                block(), block()
            order, rounds, start = list(blocks), 0, time.perf_counter()
            while rounds < min_rounds or time.perf_counter() - start < budget_s:
                for dtype in order if rounds % 2 == 0 else order[::-1]:
                    t0 = time.thread_time()
                    blocks[dtype]()
                    best[dtype] = min(best[dtype], time.thread_time() - t0)
                rounds += 1
    finally:
        torch.set_num_threads(threads)
    return best[torch.float32] * 1e3, best[torch.bfloat16] * 1e3


def _key(cpu: str, shape: tuple[int, int, int]) -> str:
    return f"{cpu} | torch {torch.__version__} | {PROBE} | block {shape[0]}x{shape[1]}x{shape[2]}"


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, entry: dict) -> None:
    """Add one entry (best effort: a cache that cannot be written only means measuring again next time)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache(path)
        data[key] = entry
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def choose_cpu_dtype(config: Any = None, *, measure=None) -> DtypeChoice:
    """The default dtype on this CPU for a model of `config`'s shapes (see the module docstring).

    Parameters
    ----------
    config : the model's transformers config (None: `DEFAULT_SHAPE`).
    measure : the timing function, shape -> (fp32 ms, bf16 ms) (default `block_times_ms`).

    Returns
    -------
    DtypeChoice with dtype "bf16" when bf16_ms * MARGIN <= fp32_ms, else "fp32"; `threads` is the count the
    model will run with (the probe itself runs on one thread).
    """
    cpu, shape, threads = cpu_model(), model_shape(config), torch.get_num_threads()
    base = dict(cpu=cpu, torch=torch.__version__, threads=threads, shape=shape)
    if not cpu_supports_bf16():
        return DtypeChoice("fp32", None, None, reason="no native bf16 (AVX512-BF16 / AMX): bf16 would be emulated",
                           **base)
    path, key = cache_file(), _key(cpu, shape)
    hit = _read_cache(path).get(key)
    if isinstance(hit, dict) and hit.get("dtype") in ("fp32", "bf16"):
        return DtypeChoice(hit["dtype"], hit.get("fp32_ms"), hit.get("bf16_ms"), reason=hit.get("reason", ""),
                           cached=True, **base)
    fp32_ms, bf16_ms = (measure or block_times_ms)(shape)
    dtype = "bf16" if bf16_ms * MARGIN <= fp32_ms else "fp32"
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    reason = (f"measured ({PROBE}{load}): one block {fp32_ms:.2f} ms in fp32, {bf16_ms:.2f} ms in bf16 "
              f"({fp32_ms / bf16_ms:.2f}x; bf16 needs {MARGIN:.2f}x)")
    choice = DtypeChoice(dtype, round(fp32_ms, 4), round(bf16_ms, 4), reason=reason, **base)
    _write_cache(path, key, {k: v for k, v in choice.record().items() if k in ("dtype", "fp32_ms", "bf16_ms",
                                                                               "reason")})
    return choice
