"""The dtype vocabulary is declared once (`schema.records.Dtype`); the CLI and the hf and vLLM engines read it."""

from __future__ import annotations

import torch
from click.testing import CliRunner

from biaslab.cli.runners_cli import runners
from biaslab.engines.hf.loading import DTYPES as HF_DTYPES
from biaslab.schema import ModelSpec
from biaslab.schema.records import DTYPE_NAMES, DTYPES, PROVIDER_DTYPE


def test_one_vocabulary_read_by_the_engines_and_the_cli():
    assert DTYPES == ("bf16", "fp16", "fp32") == tuple(DTYPE_NAMES)
    assert HF_DTYPES == {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    help_text = CliRunner().invoke(runners, ["collect", "--help"], terminal_width=200).output
    assert "--dtype [bf16|fp16|fp32]" in help_text
    dtype = ModelSpec.model_json_schema()["properties"]["dtype"]["anyOf"]
    assert dtype == [{"enum": list(DTYPES), "type": "string"}, {"const": PROVIDER_DTYPE, "type": "string"}]


def test_the_vllm_engine_spells_the_same_names():
    import ast
    from pathlib import Path

    import biaslab.engines.vllm as vllm_source  # importable without vllm installed (vllm loads lazily)

    assert vllm_source.DTYPES is DTYPE_NAMES
    tree = ast.parse(Path(vllm_source.__file__).read_text(encoding="utf-8"))
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in ("bfloat16", "float16")}
    assert literals == set()  # no second spelling of the vocabulary in the engine
