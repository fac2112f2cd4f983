"""Model identity without torch: what a model name resolves to (built-in alias, local folder, `.gguf` file or hub
id), its tokenizer and config, its `ModelSpec` (the model key, docs/design.md section 3), and the token ids every engine
needs (BOS policy, stop ids). Every backend resolves models here; only the hf backend then loads weights with torch
(`biaslab.engines.hf.loading`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError, Unsupported, UsageError
from ..schema import ModelSpec
from .aliases import ALIASES
from .hub import hub_access

MASKED_MODEL_TYPES = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
                      "camembert", "mpnet", "modernbert"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def cpu_supports_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def files_sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def tokenizer_identity(tokenizer: Any, source: str) -> str:
    """Tokenizer path plus a hash of its vocabulary and special tokens."""
    digest = hashlib.sha256()
    vocab = tokenizer.get_vocab()
    for token in sorted(vocab, key=vocab.get):
        digest.update(token.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    digest.update(repr(sorted(tokenizer.special_tokens_map.items())).encode())
    return f"{source}#{digest.hexdigest()[:16]}"


def bos_token_id(tokenizer: Any) -> tuple[int, str]:
    """Token prepended before scoring, and the policy name: the BOS token, else EOS as BOS (GPT-2 style)."""
    if tokenizer.bos_token_id is not None:
        return tokenizer.bos_token_id, "prepend"
    if tokenizer.eos_token_id is not None:
        return tokenizer.eos_token_id, "eos_as_bos"
    raise Unsupported("tokenizer has neither a BOS nor an EOS token: cannot score the first token")


def detect_kind(config: Any) -> str:
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith("ForMaskedLM") for a in archs):
        return "masked"
    if any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs):
        return "causal"
    return "masked" if getattr(config, "model_type", "") in MASKED_MODEL_TYPES else "causal"


#: --model-arg keys passed to from_pretrained (config, tokenizer and weights alike where marked)
MODEL_ARGS = {"trust_remote_code": "run the model repository's own Python code (config, tokenizer, model)",
              "attn_implementation": "attention kernel: eager, sdpa, flash_attention_2, ...",
              "low_cpu_mem_usage": "load weights without a full CPU copy",
              "max_memory": "accelerate's per-device memory limits with --device auto (a JSON object)",
              "offload_folder": "where --device auto offloads what fits nowhere"}


def parse_model_args(pairs: dict[str, str]) -> dict[str, Any]:
    """--model-arg values as from_pretrained takes them: true/false -> bool, integers -> int, JSON objects -> dict,
    else the string. Unknown keys are refused in one line (MODEL_ARGS lists the known ones)."""
    import json

    out: dict[str, Any] = {}
    for key, raw in pairs.items():
        if key not in MODEL_ARGS:
            raise UsageError(f"--model-arg {key}: unknown (known: {', '.join(sorted(MODEL_ARGS))})")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        elif raw.lstrip("-").isdigit():
            value = int(raw)
        elif raw.startswith("{"):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise UsageError(f"--model-arg {key}: invalid JSON ({exc.msg})") from None
        out[key] = value
    if not isinstance(out.get("trust_remote_code", False), bool):
        raise UsageError("--model-arg trust_remote_code takes true or false")
    return out


def shipped_quantization(config: Any) -> str | None:
    """The quant_method of a checkpoint shipped quantized (config.quantization_config, e.g. gpt-oss: "mxfp4"),
    else None."""
    qc = getattr(config, "quantization_config", None)
    if qc is None:
        return None
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    method = getattr(method, "value", method)
    return str(method) if method else "unknown"


def stop_token_ids(generation_config: Any, tokenizer: Any) -> set[int]:
    """EOS of the tokenizer plus every EOS id of the model's generation config (None: none)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos:
        ids.update(int(i) for i in config_eos)
    return ids


def folder_generation_config(folder: str) -> Any:
    """The `generation_config` of a model folder (None when it has none), without the weights."""
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError):
        return None


def served_token_ids(folder: str, tokenizer: Any) -> tuple[frozenset[int], int | None, int | None]:
    """(stop_ids, bos_id, pad_id) of a model another process serves (vllm, openai): stop_ids from the tokenizer and
    the folder's generation config (`stop_token_ids`), bos_id the scoring policy's BOS (`bos_token_id`), pad_id the
    tokenizer's pad token, else the BOS."""
    stop_ids = frozenset(stop_token_ids(folder_generation_config(folder), tokenizer))
    bos_id = bos_token_id(tokenizer)[0]
    return stop_ids, bos_id, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else bos_id


@dataclass(frozen=True)
class ModelSource:
    """Where a model name leads: the folder transformers reads, the source keyed (absolute path or hub id), the
    revision keyed (the weights' sha256 for local files), and the GGUF file name inside the folder, if any."""

    folder: str
    source: str
    revision: str | None
    gguf_file: str | None = None
    hub: bool = False
    converted_from: str | None = None   # the quantized file the folder was converted from ("gguf Q4_K_M")
    display: str | None = None          # the name shown for it (a .gguf file's stem), when not the name given


def resolve_source(name: str, revision: str | None = None) -> ModelSource:
    """A built-in alias, a `.gguf` file, a local folder with weights, or a hub id (refused in one line when it
    looks like a path that does not exist). `revision` applies to hub ids only."""
    local = name in ALIASES or name.endswith(".gguf") or Path(name).expanduser().exists()
    if revision is not None and local:
        raise UsageError(f"--revision applies to hub ids only; {name} is a built-in alias or a local file/folder")
    if name in ALIASES:
        resolved = ALIASES[name]()
        return ModelSource(str(resolved.folder), resolved.source, resolved.revision,
                           converted_from=resolved.converted_from)
    if name.endswith(".gguf"):  # converted once into the cache (issue 56, item 12); the key is the file's, as before
        path = Path(name).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"--model: GGUF file {path} not found")
        check_gguf(path)
        from .aliases import resolve_gguf_file

        revision = files_sha256([path])
        converted = resolve_gguf_file(path, revision)
        return ModelSource(str(converted.folder), str(path), revision, converted_from=converted.converted_from,
                           display=path.stem)
    if Path(name).expanduser().is_dir():
        path = Path(name).expanduser().resolve()
        weights = [p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
        if not weights:
            raise DataError(f"--model: folder {path} holds no weights ({', '.join(WEIGHT_SUFFIXES)})")
        return ModelSource(str(path), str(path), files_sha256(weights))
    if name.startswith(("/", ".", "~")) or Path(name).suffix in WEIGHT_SUFFIXES:
        raise UsageError(f"--model: no model folder or file at {name} (and it is not a built-in alias: "
                         f"{', '.join(sorted(ALIASES))})")
    return ModelSource(name, name, None, hub=True)  # hub id: needs the cache or a reachable hub (`hub.hub_access`)


#: the fixed part of a GGUF file: magic "GGUF", version (uint32), tensor count and metadata count (uint64 each)
GGUF_HEADER_BYTES = 24


def check_gguf(path: Path) -> None:
    """Refuse in one line a file that is not a GGUF file or is shorter than a GGUF header (`GGUF_HEADER_BYTES`)."""
    with open(path, "rb") as f:
        head = f.read(GGUF_HEADER_BYTES)
    if head[:4] != b"GGUF":
        raise DataError(f"--model {path}: not a GGUF file (it starts with {head[:4]!r}, a GGUF file with b'GGUF')")
    if len(head) < GGUF_HEADER_BYTES:
        raise DataError(f"--model {path}: GGUF file cut short ({len(head)} bytes; its header alone is "
                        f"{GGUF_HEADER_BYTES}): download it again")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class ModelInfo:
    """A resolved model without weights: its source, config, tokenizer, identity and the keyword arguments
    transformers needs to read it (gguf_file, revision, trust_remote_code)."""

    where: ModelSource
    config: Any
    tokenizer: Any
    spec: ModelSpec
    read_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return self.where.folder


def read_model(name: str, *, dtype: str, quant: str = "none", kind: str | None = None, revision: str | None = None,
               model_args: dict[str, str] | None = None, backend: str = "hf",
               backend_version: str | None = None) -> ModelInfo:
    """Resolve `name` (`resolve_source`), read its config and tokenizer, and compute its `ModelSpec`.

    Parameters
    ----------
    name : alias, local folder, `.gguf` file or hub id.
    dtype : the dtype the weights run in (keyed).
    quant : "none", "nf4", or replaced by the method of a checkpoint shipped quantized.
    kind : "causal" or "masked" (default: from the config).
    revision : hub revision; the resolved commit is keyed.
    model_args : --model-arg key=value (`MODEL_ARGS`), strings.
    backend, backend_version : the engine, recorded in the spec (keyed for every backend but hf).
    """
    args = parse_model_args(dict(model_args or {}))
    where = resolve_source(name, revision)
    read: dict[str, Any] = {"gguf_file": where.gguf_file} if where.gguf_file else {}
    if args.get("trust_remote_code"):
        read["trust_remote_code"] = True
    if revision is not None:
        read["revision"] = revision
    if where.hub:
        read.update(hub_access(name, revision))
    try:
        from transformers import AutoConfig, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        config = AutoConfig.from_pretrained(where.folder, **read)
        tokenizer = AutoTokenizer.from_pretrained(where.folder, **read)
    except OSError as exc:
        raise DataError(f"--model {name}: cannot load ({_first_line(exc)})") from None
    except ValueError as exc:  # e.g. custom code without trust_remote_code=true
        raise DataError(f"--model {name}: {_first_line(exc)}") from None
    except Exception as exc:  # a damaged file breaks the readers in their own ways (struct.error, KeyError, ...)
        raise DataError(f"--model {name}: cannot read its config or tokenizer ({type(exc).__name__}: "
                        f"{_first_line(exc)})") from None
    shipped = shipped_quantization(config) if not where.gguf_file else None
    if shipped is not None:
        if quant == "nf4":
            raise UsageError(f"--model {name} is shipped {shipped}-quantized: load it as shipped (no --quant nf4)")
        quant = shipped
    kind = kind or detect_kind(config)
    keyed_revision = where.revision or getattr(config, "_commit_hash", None) or revision
    bos_policy = "none" if kind == "masked" else bos_token_id(tokenizer)[1]
    spec = ModelSpec(name=where.display or name, source=where.source, revision=keyed_revision, kind=kind,
                     dtype=dtype, quant=quant, tokenizer=tokenizer_identity(tokenizer, where.source),
                     bos_policy=bos_policy, backend=backend, backend_version=backend_version,
                     model_args=dict(sorted((model_args or {}).items())), converted_from=where.converted_from)
    return ModelInfo(where, config, tokenizer, spec, read)
