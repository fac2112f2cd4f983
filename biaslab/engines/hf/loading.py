"""Model loading: alias, hub id, local folder or `.gguf` file; dtype, NF4 quantization, device; the model key.

The `model_key` (DESIGN.md section 3) hashes what changes outputs: the resolved source, the weights' revision or
file hash, dtype, quantization, the tokenizer's identity and the BOS policy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...schema import ModelSpec
from ..base import Identified
from ..aliases import ALIASES

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MASKED_MODEL_TYPES = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
                      "camembert", "mpnet", "modernbert"}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


@dataclass
class LoadedModel(Identified):
    """A model ready to run, with the spec that identifies its outputs."""

    model: Any
    tokenizer: Any
    spec: ModelSpec
    device: torch.device



def model_row(spec: ModelSpec) -> dict[str, Any]:
    """The `models` table row of a spec."""
    from datetime import datetime, timezone

    import json

    row = spec.model_dump(mode="json")
    for name in ("model_args", "engine_args"):
        row[name] = json.dumps(row[name], sort_keys=True)
    return {**row, "model_key": spec.model_key, "registered_at": datetime.now(timezone.utc).replace(tzinfo=None)}


def cpu_supports_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: str | None) -> torch.device:
    """The torch device named by --device (default: cuda when present, else cpu), refused in one line when it is
    not a device name or not available on this machine. "auto" (accelerate's device_map over every GPU) resolves
    to the device that receives the inputs: the first GPU, else the CPU."""
    if not device or device == "auto":
        return default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {device!r} is not a torch device name (e.g. cpu, cuda, cuda:1)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA GPU is available here (torch {torch.__version__}, "
                             f"CUDA build: {torch.version.cuda or 'no'}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {device}: MPS is not available here; use --device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"--device {device}: unsupported device type {dev.type!r} (cpu, cuda or mps)")
    return dev


def default_dtype(device: torch.device) -> str:
    """bf16 on GPUs and on CPUs with native bf16 (AVX512-BF16 / AMX), else fp32."""
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if cpu_supports_bf16() else "fp32"


def files_sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _tokenizer_identity(tokenizer: Any, source: str) -> str:
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
    raise ValueError("tokenizer has neither a BOS nor an EOS token: cannot score the first token")


def detect_kind(config: Any) -> str:
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith("ForMaskedLM") for a in archs):
        return "masked"
    if any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs):
        return "causal"
    return "masked" if getattr(config, "model_type", "") in MASKED_MODEL_TYPES else "causal"


@dataclass
class PreparedModel(Identified):
    """Tokenizer and identity of a model whose weights are not loaded yet (enough to find pending work)."""

    folder: str
    load_kwargs: dict[str, Any]
    tokenizer: Any
    spec: ModelSpec
    device: torch.device

    def load(self) -> LoadedModel:
        """Load the weights onto the device, in eval mode."""
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        auto = AutoModelForMaskedLM if self.spec.kind == "masked" else AutoModelForCausalLM
        model = auto.from_pretrained(self.folder, **self.load_kwargs)
        if self.spec.quant not in ("none", "nf4") and getattr(model, "hf_quantizer", None) is None:
            raise ValueError(f"--model {self.spec.name}: shipped {self.spec.quant}-quantized, but transformers loaded "
                             f"it dequantized here (missing kernels for this device?); its evidence would not be "
                             f"{self.spec.quant} evidence")
        if self.spec.quant != "nf4" and "device_map" not in self.load_kwargs:
            model.to(self.device)
        model.eval()
        return LoadedModel(model=model, tokenizer=self.tokenizer, spec=self.spec, device=self.device)


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
            raise ValueError(f"--model-arg {key}: unknown (known: {', '.join(sorted(MODEL_ARGS))})")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        elif raw.lstrip("-").isdigit():
            value = int(raw)
        elif raw.startswith("{"):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"--model-arg {key}: invalid JSON ({exc.msg})") from None
        out[key] = value
    if not isinstance(out.get("trust_remote_code", False), bool):
        raise ValueError("--model-arg trust_remote_code takes true or false")
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


def prepare_model(name: str, *, dtype: str | None = None, quant: str = "none", device: str | None = None,
                  kind: str | None = None, revision: str | None = None,
                  model_args: dict[str, str] | None = None) -> PreparedModel:
    """Resolve `name` (built-in alias, local folder, `.gguf` file, or hub id), load its tokenizer, compute its key.

    Parameters
    ----------
    dtype, quant : weights dtype (default per device) and "none" / "nf4" (bitsandbytes NF4, bf16 compute); a
        checkpoint shipped quantized (config.quantization_config) is loaded as shipped and keyed with its method.
    device : a torch device name, or "auto": accelerate's device_map="auto" over every visible GPU.
    revision : hub revision (branch, tag or commit) of a hub id; the resolved commit is keyed.
    model_args : --model-arg key=value pairs (`MODEL_ARGS`); trust_remote_code is False unless given true.
    """
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    args = parse_model_args(dict(model_args or {}))
    args.setdefault("trust_remote_code", False)
    dev = resolve_device(device)
    dtype = dtype or default_dtype(dev)
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if quant not in ("none", "nf4"):
        raise ValueError(f"--quant must be 'none' or 'nf4', got {quant!r}")
    load_kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], **args}
    if device == "auto":
        load_kwargs["device_map"] = "auto"
    requested_revision, revision = revision, None
    if requested_revision is not None and (name in ALIASES or name.endswith(".gguf") or Path(name).expanduser().exists()):
        raise ValueError(f"--revision applies to hub ids only; {name} is a built-in alias or a local file/folder")
    if name in ALIASES:
        resolved = ALIASES[name]()
        folder, source, revision = str(resolved.folder), resolved.source, resolved.revision
    elif name.endswith(".gguf"):
        path = Path(name).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"--model: GGUF file {path} not found")
        from transformers import GgufConfig

        folder, source = str(path.parent), str(path)
        load_kwargs.update(gguf_file=path.name, quantization_config=GgufConfig(dequantize=True))
        revision = files_sha256([path])
    elif Path(name).expanduser().is_dir():
        path = Path(name).expanduser().resolve()
        folder = source = str(path)
        weights = [p for p in path.iterdir() if p.suffix in _WEIGHT_SUFFIXES and p.is_file()]
        if not weights:
            raise ValueError(f"--model: folder {path} holds no weights ({', '.join(_WEIGHT_SUFFIXES)})")
        revision = files_sha256(weights)
    elif name.startswith(("/", ".", "~")) or Path(name).suffix in _WEIGHT_SUFFIXES:
        raise ValueError(f"--model: no model folder or file at {name} (and it is not a built-in alias: "
                         f"{', '.join(sorted(ALIASES))})")
    else:
        folder = source = name  # hub id: needs a reachable hub
    if quant == "nf4":
        from transformers import BitsAndBytesConfig

        if dev.type != "cuda":
            raise ValueError("--quant nf4 needs a CUDA GPU (bitsandbytes); use --dtype bf16 on CPU")
        load_kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    tok_kwargs: dict[str, Any] = {"gguf_file": load_kwargs["gguf_file"]} if "gguf_file" in load_kwargs else {}
    if args["trust_remote_code"]:
        tok_kwargs["trust_remote_code"] = True
    if requested_revision is not None:
        tok_kwargs["revision"] = load_kwargs["revision"] = requested_revision
    try:
        config = AutoConfig.from_pretrained(folder, **tok_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(folder, **tok_kwargs)
    except OSError as exc:
        raise ValueError(f"--model {name}: cannot load ({str(exc).splitlines()[0]})") from None
    except ValueError as exc:  # e.g. custom code without trust_remote_code=true
        raise ValueError(f"--model {name}: {str(exc).splitlines()[0]}") from None
    shipped = shipped_quantization(config) if "gguf_file" not in load_kwargs else None
    if shipped is not None:
        if quant == "nf4":
            raise ValueError(f"--model {name} is shipped {shipped}-quantized: load it as shipped (no --quant nf4)")
        quant = shipped
    kind = kind or detect_kind(config)
    if revision is None:
        revision = getattr(config, "_commit_hash", None) or requested_revision
    bos_policy = "none" if kind == "masked" else bos_token_id(tokenizer)[1]
    import transformers

    spec = ModelSpec(name=name, source=source, revision=revision, kind=kind, dtype=dtype, quant=quant,
                     tokenizer=_tokenizer_identity(tokenizer, source), bos_policy=bos_policy, backend="hf",
                     backend_version=transformers.__version__, model_args=dict(sorted((model_args or {}).items())))
    return PreparedModel(folder=folder, load_kwargs=load_kwargs, tokenizer=tokenizer, spec=spec, device=dev)


def load_model(name: str, **kwargs: Any) -> LoadedModel:
    """prepare_model(name, ...).load(): the model ready to run."""
    return prepare_model(name, **kwargs).load()
