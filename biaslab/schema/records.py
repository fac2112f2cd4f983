"""The model record: what identifies a model's outputs (`ModelSpec`, whose hash is the `model_key` of docs/design.md
section 3). The rows of the evidence tables are described by `biaslab.schema.evidence`."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from .identity import content_hash

#: the weights dtypes a model key can name: the one vocabulary of `--dtype`, the engines and the stored `models.dtype`
Dtype = Literal["bf16", "fp16", "fp32"]
DTYPES: tuple[str, ...] = get_args(Dtype)
#: each dtype's full name, as torch (`torch.<name>`) and vLLM (`dtype=<name>`) spell it
DTYPE_NAMES: dict[str, str] = dict(zip(DTYPES, ("bfloat16", "float16", "float32"), strict=True))
#: the dtype of a hosted model (a chat API): the provider's own, not known here
PROVIDER_DTYPE = "provider"
#: "none", "nf4" (bitsandbytes, `--quant nf4`) or the quant_method of a checkpoint shipped quantized (e.g. "mxfp4")
Quant = str
BosPolicy = Literal["prepend", "eos_as_bos", "none"]  # eos_as_bos: GPT-2 style tokenizers without a BOS


class ModelSpec(BaseModel):
    """What changes a model's outputs; `model_key` hashes exactly these fields (docs/design.md sections 3 and 10).

    The backend fields (`backend`, `backend_version`, `engine_args`) and `model_args` join the hash except for a
    plain Hugging Face model (backend "hf", no model arguments): those keys predate backends and stay what they
    were, so stored evidence keeps its key (docs/decisions.md, "Backends (interface and hf)"); transformers'
    version is in every run's `runs.params` / `runs.versions`. A `--model-arg` on hf, and every vllm / openai
    model, is keyed with all of them: evidence from two engines never mixes.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="alias, hub id or local path as given by the user")
    source: str = Field(description="resolved hub id or absolute path")
    revision: str | None = Field(None, description="hub revision or sha256 of the weights file")
    kind: Literal["causal", "masked"] = "causal"
    dtype: Dtype | Literal["provider"] = "bf16"
    quant: Quant = "none"
    tokenizer: str | None = Field(None, description="tokenizer identity (path/id and its file hash)")
    bos_policy: BosPolicy = "prepend"
    backend: str = Field("hf", description="engine: hf, vllm or openai")
    backend_version: str | None = Field(None, description="engine version (transformers / vllm / the server's)")
    model_args: dict[str, str] = Field(default_factory=dict,
                                       description="--model-arg key=value given to the model constructor")
    engine_args: dict[str, str] = Field(default_factory=dict,
                                        description="engine settings that can change numbers (e.g. vLLM's "
                                                    "tensor_parallel_size, the served model's name), values as strings")
    converted_from: str | None = Field(None, description="the quantized file the weights were de-quantized from "
                                                         "(e.g. 'gguf Q4_K_M'); not keyed: the revision hashes "
                                                         "that file")

    @property
    def model_key(self) -> str:
        exclude = {"name", "converted_from"}
        if self.backend == "hf":
            exclude |= {"backend", "backend_version", "engine_args"}
            if not self.model_args:
                exclude.add("model_args")
        return content_hash(self.model_dump(mode="json", exclude=exclude))

    def to_row(self) -> dict:
        """The `models` table row of this spec: its fields (model and engine arguments as JSON text), the key and
        the time of registration (UTC, naive)."""
        import json
        from datetime import datetime, timezone

        row = self.model_dump(mode="json")
        for name in ("model_args", "engine_args"):
            row[name] = json.dumps(row[name], sort_keys=True)
        return {**row, "model_key": self.model_key, "registered_at": datetime.now(timezone.utc).replace(tzinfo=None)}
