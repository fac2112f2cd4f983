"""Loading a model's weights with transformers for the hf engine: dtype, NF4 quantization, device (`--device`,
including accelerate's "auto"), on top of the torch-free resolution and identity of `biaslab.engines.models`.

The `model_key` (docs/design.md section 3) hashes what changes outputs: the resolved source, the weights' revision or
file hash, dtype, quantization, the tokenizer's identity and the BOS policy (`models.read_model`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import torch

from ...errors import DataError, Unsupported, UsageError
from ...schema import ModelSpec
from ...schema.records import DTYPE_NAMES
from ..base import Identified
from ..models import parse_model_args, read_model
from ..dtype_choice import choose_cpu_dtype

DTYPES = {name: getattr(torch, full) for name, full in DTYPE_NAMES.items()}


@dataclass
class LoadedModel(Identified):
    """A model ready to run, with the spec that identifies its outputs."""

    model: Any
    tokenizer: Any
    spec: ModelSpec
    device: torch.device
    provenance: dict[str, Any] = field(default_factory=dict)


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
        raise UsageError(f"--device {device!r} is not a torch device name (e.g. cpu, cuda, cuda:1)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise Unsupported(f"--device {device}: no CUDA GPU is available here (torch {torch.__version__}, "
                              f"CUDA build: {torch.version.cuda or 'no'}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise Unsupported(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise Unsupported(f"--device {device}: MPS is not available here; use --device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device {device}: unsupported device type {dev.type!r} (cpu, cuda or mps)")
    return dev


def default_dtype(device: torch.device, config: Any = None) -> str:
    """bf16 on GPUs (fp16 where bf16 is not supported); on CPUs the measured choice (`dtype_choice`: fp32 without
    native bf16, else whichever runs a block of `config`'s shapes faster)."""
    return default_dtype_choice(device, config)[0]


def default_dtype_choice(device: torch.device, config: Any = None) -> tuple[str, dict | None]:
    """(dtype, the CPU measurement to record in the run or None) of `default_dtype`."""
    if device.type == "cuda":
        return ("bf16" if torch.cuda.is_bf16_supported() else "fp16"), None
    if device.type != "cpu":
        return "fp32", None
    choice = choose_cpu_dtype(config)
    return choice.dtype, choice.record()


@dataclass
class PreparedModel(Identified):
    """Tokenizer and identity of a model whose weights are not loaded yet (enough to find pending work)."""

    folder: str
    load_kwargs: dict[str, Any]
    tokenizer: Any
    spec: ModelSpec
    device: torch.device
    #: what a run records about how this model was set up (the measured default dtype: `dtype_choice`)
    provenance: dict[str, Any] = field(default_factory=dict)

    def load(self) -> LoadedModel:
        """Load the weights onto the device, in eval mode."""
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        auto = AutoModelForMaskedLM if self.spec.kind == "masked" else AutoModelForCausalLM
        try:
            model = auto.from_pretrained(self.folder, **self.load_kwargs)
        except (OSError, ValueError, RuntimeError, KeyError, EOFError, struct.error) as exc:  # damaged weights
            text = str(exc).strip().splitlines()
            raise DataError(f"--model {self.spec.name}: cannot load its weights ({type(exc).__name__}: "
                            f"{text[0] if text else 'no message'})") from None
        if self.spec.quant not in ("none", "nf4") and getattr(model, "hf_quantizer", None) is None:
            raise Unsupported(f"--model {self.spec.name}: shipped {self.spec.quant}-quantized, but transformers loaded "
                              f"it dequantized here (missing kernels for this device?); its evidence would not be "
                              f"{self.spec.quant} evidence")
        if self.spec.quant != "nf4" and "device_map" not in self.load_kwargs:
            model.to(self.device)
        model.eval()
        return LoadedModel(model=model, tokenizer=self.tokenizer, spec=self.spec, device=self.device,
                           provenance=self.provenance)


def prepare_model(name: str, *, dtype: str | None = None, quant: str = "none", device: str | None = None,
                  kind: str | None = None, revision: str | None = None,
                  model_args: dict[str, str] | None = None) -> PreparedModel:
    """Resolve `name` (built-in alias, local folder, `.gguf` file, or hub id), load its tokenizer, compute its key
    (`models.read_model`); no weights yet.

    Parameters
    ----------
    dtype, quant : weights dtype (default per device) and "none" / "nf4" (bitsandbytes NF4, bf16 compute); a
        checkpoint shipped quantized (config.quantization_config) is loaded as shipped and keyed with its method.
    device : a torch device name, or "auto": accelerate's device_map="auto" over every visible GPU.
    revision : hub revision (branch, tag or commit) of a hub id; the resolved commit is keyed.
    model_args : --model-arg key=value pairs (`models.MODEL_ARGS`); trust_remote_code is False unless given true.
    """
    import transformers

    dev = resolve_device(device)
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if quant not in ("none", "nf4"):
        raise UsageError(f"--quant must be 'none' or 'nf4', got {quant!r}")
    if quant == "nf4" and dev.type != "cuda":
        raise Unsupported("--quant nf4 needs a CUDA GPU (bitsandbytes); use --dtype bf16 on CPU")
    info = read_model(name, dtype=dtype or "fp32", quant=quant, kind=kind, revision=revision, model_args=model_args,
                      backend="hf", backend_version=transformers.__version__)
    measured = None
    if dtype is None:  # the default: measured on this CPU for this model's shapes (recorded in the run)
        dtype, measured = default_dtype_choice(dev, info.config)
        info.spec = info.spec.model_copy(update={"dtype": dtype})
    return PreparedModel(folder=info.folder, load_kwargs=_load_kwargs(info, dtype, quant, device, model_args),
                         tokenizer=info.tokenizer, spec=info.spec, device=dev,
                         provenance={"dtype_choice": measured} if measured else {})


def _load_kwargs(info, dtype: str, quant: str, device: str | None, model_args) -> dict[str, Any]:
    """The keyword arguments of `from_pretrained` for the weights."""
    args = parse_model_args(dict(model_args or {}))
    args.setdefault("trust_remote_code", False)
    kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], **args}
    if device == "auto":
        kwargs["device_map"] = "auto"
    if info.where.gguf_file:
        from transformers import GgufConfig

        kwargs.update(gguf_file=info.where.gguf_file, quantization_config=GgufConfig(dequantize=True))
    for key in ("revision", "local_files_only"):
        if key in info.read_kwargs:
            kwargs[key] = info.read_kwargs[key]
    if quant == "nf4":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_compute_dtype=torch.bfloat16)
    return kwargs


def load_model(name: str, **kwargs: Any) -> LoadedModel:
    """prepare_model(name, ...).load(): the model ready to run."""
    return prepare_model(name, **kwargs).load()
