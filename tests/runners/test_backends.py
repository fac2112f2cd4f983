"""The Backend interface and the Hugging Face backend behind it.

The backend's methods are checked against independent computations on the model itself (a full forward pass and
its logits), the generic trie walk over the `StatelessExpander` against the backend's cached expander, capability
refusals happen before any model is prepared, and the model key / argument handling of the hf backend.
"""

from __future__ import annotations

import json
import shutil
import sys
import types

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from biaslab.cli.runners_cli import runners
from biaslab import engines as backends
from biaslab.runners.answers import AnswerParser
from biaslab.engines.base import SCORE, Backend, SamplingSettings, StatelessExpander, Unsupported, require
from biaslab.engines.hf.backend import HFPrepared
from biaslab.runners.collect import CollectConfig, collect
from biaslab.runners.trie import probabilities, walk
from biaslab.engines.hf.loading import prepare_model
from biaslab.schema.records import ModelSpec


@pytest.fixture(scope="module")
def backend(tiny_gpt2):
    return HFPrepared(tiny_gpt2).load()


def _full_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double()


def test_registry_names_and_one_line_refusals():
    assert backends.names()[0] == "hf" and set(backends.names()) == {"hf", "vllm", "openai", "openai-chat", "gemini",
                                                                     "anthropic"}
    hf = backends.get("hf")
    assert hf.installed()[0] and hf.CAPABILITIES == frozenset({"score", "pll", "top_k", "sample"})
    with pytest.raises(ValueError, match="unknown; use one of hf, vllm, openai, openai-chat, gemini, anthropic"):
        backends.get("tgi")


def test_hf_backend_is_a_backend(backend, tiny_gpt2):
    assert isinstance(backend, Backend)
    tok = tiny_gpt2.tokenizer
    assert backend.bos_id == (tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)
    assert tok.eos_token_id in backend.stop_ids


def test_score_equals_a_full_forward_pass(backend, tiny_gpt2):
    tok = tiny_gpt2.tokenizer
    seqs = [[backend.bos_id, *tok(t, add_special_tokens=False)["input_ids"]]
            for t in ("The nurse said that she was tired.", "The nurse said that he was tired.", "Xe went home.")]
    got = backend.score(seqs, ["a", "a", "b"])  # the first two share a prefix
    for ids, lp in zip(seqs, got):
        logits = _full_logits(tiny_gpt2.model, ids)
        want = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
        np.testing.assert_allclose(lp, want, atol=1e-5)


def test_top_k_equals_the_last_position_logits(backend, tiny_gpt2):
    tok = tiny_gpt2.tokenizer
    prefixes = [tok("The nurse said", add_special_tokens=False)["input_ids"],
                tok("Xe", add_special_tokens=False)["input_ids"]]
    top = backend.top_k(prefixes, 10)
    for row, ids in enumerate(prefixes):
        logits = _full_logits(tiny_gpt2.model, ids)[-1]
        values, order = logits.topk(10)
        assert top.ids[row].tolist() == order.tolist()
        np.testing.assert_allclose(top.logits[row], values.numpy(), atol=1e-4)
        assert top.logsumexp[row] == pytest.approx(float(torch.logsumexp(logits, -1)), abs=1e-4)


def test_generic_walk_over_the_stateless_expander_equals_the_cached_expander(backend, tiny_gpt2):
    """The generic explore (any Expander: vLLM / openai use StatelessExpander) gives the HF fast path's tries."""
    tok = tiny_gpt2.tokenizer
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("Answer: '", "The nurse said '")]
    parsers = [AnswerParser(("he", "she"), "'")] * 2
    kw = dict(max_new_tokens=3, stop_ids=backend.stop_ids, temperature=1.0, top_k=40)
    fast = walk(backend.expander(prompts, 64), tok, parsers, **kw)
    generic = walk(StatelessExpander(backend, prompts, 64), tok, parsers, **kw)
    for a, b in zip(fast, generic):
        assert a.edges == b.edges and a.node_token == b.node_token
        for option, p in probabilities(a, ("he", "she"), 1.0, 40).items():
            assert probabilities(b, ("he", "she"), 1.0, 40)[option] == pytest.approx(p, abs=1e-6)
    assert sum(len(t.node_parent) for t in fast) > 2  # the walk went below the root


def test_sample_is_seeded_per_sample_and_logprobs_are_the_models(backend, tiny_gpt2):
    tok = tiny_gpt2.tokenizer
    prompt = [backend.bos_id, *tok("The nurse said", add_special_tokens=False)["input_ids"]]
    settings = SamplingSettings(1.0, 50, 1.0, 5, 5)
    alone = backend.sample([prompt], [[7]], settings)[0][0]
    together = backend.sample([prompt, prompt], [[3, 7], [7]], settings)
    assert together[0][1].token_ids == alone.token_ids == together[1][0].token_ids
    assert len(alone.token_ids) == 5  # min_new_tokens = 5: no stop before
    logits = _full_logits(tiny_gpt2.model, prompt + alone.token_ids)
    want = torch.log_softmax(logits[len(prompt) - 1:-1], -1).gather(
        1, torch.tensor(alone.token_ids)[:, None])[:, 0].numpy()
    np.testing.assert_allclose(alone.logprobs, want, atol=1e-5)


def _fake_backend(monkeypatch, capabilities):
    module = types.ModuleType("biaslab.engines.fake")
    module.NAME, module.CAPABILITIES = "fake", frozenset(capabilities)
    module.installed = lambda: (True, "fake 1.0")
    module.validate_options = lambda options: None

    def prepare(model, options):
        raise AssertionError("prepared although the capability is missing")

    module.prepare = prepare
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(backends.BACKENDS, "fake", ".fake")


def test_a_missing_capability_is_refused_before_anything_is_prepared(monkeypatch, tmp_path, data_dir, dataset_folder):
    dataset_folder("winopron")
    _fake_backend(monkeypatch, {SCORE})
    config = CollectConfig(dataset="winopron", backend="fake", db=str(tmp_path / "w.duckdb"), data_dir=str(data_dir))
    with pytest.raises(Unsupported, match="backend 'fake' cannot run choice-exact: it has no top_k"):
        collect(config)
    assert not (tmp_path / "w.duckdb").exists()  # refused before the warehouse was even opened


def test_pll_on_a_backend_without_it_is_one_line():
    with pytest.raises(ValueError, match="cannot run pll: it has no pll"):
        require("vllm", frozenset({"score", "top_k", "sample"}), frozenset({"pll"}), "pll")
    prob = CollectConfig(dataset="winogender").plugin()  # the protocol declares what it needs
    assert prob.needs("masked") == frozenset({"pll"}) and prob.needs("causal") == frozenset({SCORE})
    with pytest.raises(ValueError, match="backend 'vllm' cannot run pll: it has no pll"):
        prob.require("vllm", frozenset({"score", "top_k", "sample"}), "masked")


def test_uninstalled_backend_is_one_line_naming_it(tmp_path, data_dir, dataset_folder):
    dataset_folder("winopron")
    try:
        module = backends.get("vllm")
    except ValueError:
        pytest.skip("no vllm backend module in this build")
    if module.installed()[0]:
        pytest.skip("vllm is installed here")
    result = CliRunner().invoke(runners, ["collect", "--dataset", "winopron", "--backend", "vllm",
                                          "--db", str(tmp_path / "w.duckdb"), "--data-dir", str(data_dir)])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--backend vllm is not available" in lines[0], result.output


# ---------------------------------------------------------------------- hf arguments and the model key
def test_model_args_trust_remote_code_off_by_default_and_keyed(tiny_gpt2_dir):
    plain = prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu")
    assert plain.load_kwargs["trust_remote_code"] is False
    assert "model_args" not in json.dumps(plain.spec.model_dump(exclude={"model_args"}))
    eager = prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu",
                          model_args={"attn_implementation": "eager"})
    assert eager.load_kwargs["attn_implementation"] == "eager"
    assert eager.spec.model_key != plain.spec.model_key
    with pytest.raises(ValueError, match="--model-arg colour: unknown"):
        prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu", model_args={"colour": "red"})
    with pytest.raises(ValueError, match="trust_remote_code takes true or false"):
        prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu", model_args={"trust_remote_code": "yes"})


def test_hf_key_without_model_args_is_the_key_from_before_backends(tiny_gpt2_dir):
    spec = prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu").spec
    legacy = ModelSpec(**spec.model_dump(include={"name", "source", "revision", "kind", "dtype", "quant",
                                                  "tokenizer", "bos_policy"}))
    assert spec.backend == "hf" and spec.backend_version
    assert spec.model_key == legacy.model_key


def test_other_backends_key_their_name_version_and_engine_args():
    base = dict(name="m", source="m", revision="r", dtype="bf16", tokenizer="t#0")
    hf = ModelSpec(**base)
    vllm = ModelSpec(**base, backend="vllm", backend_version="0.32.0")
    assert len({hf.model_key, vllm.model_key, ModelSpec(**base, backend="vllm", backend_version="0.33.0").model_key,
                ModelSpec(**base, backend="vllm", backend_version="0.32.0",
                          engine_args={"max_model_len": "4096"}).model_key}) == 4
    assert ModelSpec(**base, backend_version="4.0").model_key == hf.model_key  # hf: transformers not keyed


def test_device_auto_is_a_device_map_and_revision_is_for_hub_ids(tiny_gpt2_dir):
    auto = prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="auto")
    assert auto.load_kwargs["device_map"] == "auto"
    assert auto.spec.model_key == prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu").spec.model_key
    with pytest.raises(ValueError, match="--revision applies to hub ids only"):
        prepare_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu", revision="main")


def test_a_checkpoint_shipped_quantized_is_keyed_with_its_method(tiny_gpt2_dir, tmp_path):
    folder = tmp_path / "prequant"
    shutil.copytree(tiny_gpt2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4"}
    (folder / "config.json").write_text(json.dumps(config))
    spec = prepare_model(str(folder), dtype="bf16", device="cpu").spec
    assert spec.quant == "mxfp4"
    assert spec.model_key != prepare_model(str(tiny_gpt2_dir), dtype="bf16", device="cpu").spec.model_key


# ---------------------------------------------------------------------- CLI
def test_cli_model_arg_and_engine_args_are_one_line(tmp_path, data_dir, dataset_folder):
    dataset_folder("winopron")
    base = ["collect", "--dataset", "winopron", "--db", str(tmp_path / "w.duckdb"), "--data-dir", str(data_dir)]
    bad = CliRunner().invoke(runners, [*base, "--model-arg", "novalue"])
    assert bad.exit_code != 0 and "is not KEY=VALUE" in bad.output
    engine = CliRunner().invoke(runners, [*base, "--max-model-len", "2048"])
    assert engine.exit_code != 0 and "--backend hf takes no engine arguments (got max_model_len)" in engine.output


def test_runners_backends_lists_every_backend():
    result = CliRunner().invoke(runners, ["backends"], terminal_width=200)
    assert result.exit_code == 0, result.output
    hf_line = next(line for line in result.output.splitlines() if " hf " in line)
    assert "yes" in hf_line and "transformers" in hf_line and "top_k" in hf_line
    for name in ("vllm", "openai"):
        assert name in result.output


def test_every_new_option_has_help():
    text = CliRunner().invoke(runners, ["collect", "--help"], terminal_width=200).output
    for option in ("--backend", "--revision", "--model-arg", "--tensor-parallel-size", "--data-parallel-size",
                   "--gpu-memory-utilization", "--kv-cache-memory", "--max-model-len", "--base-url", "--api-key-env",
                   "--max-concurrency"):
        assert option in text


def test_vllm_cpu_engine_reserves_a_fixed_kv_cache_not_a_share_of_memory(tiny_gpt2_dir, monkeypatch):
    """On the CPU build the engine gets 1 GiB of KV cache unless told otherwise: a share of memory
    (`gpu_memory_utilization`) is a share of the NUMA node's memory less what the process holds, which differs
    between machines (0.23 GiB at 0.2 on one 24 GB machine: the engine refused to start). No engine starts here."""
    from biaslab.engines import BackendOptions
    from biaslab.engines import vllm

    def kwargs(on_gpu: bool, **engine) -> dict:
        monkeypatch.setattr(vllm, "_on_gpu", lambda: on_gpu)
        return vllm.prepare(str(tiny_gpt2_dir), BackendOptions(dtype="fp32", engine_args=tuple(engine.items())
                                                               )).engine_kwargs()

    cpu = kwargs(False)
    assert cpu["kv_cache_memory_bytes"] == 2**30 and "gpu_memory_utilization" not in cpu and cpu["enforce_eager"]
    assert kwargs(False, kv_cache_memory_bytes="3000")["kv_cache_memory_bytes"] == 3000
    share = kwargs(False, gpu_memory_utilization="0.3")  # asked for: passed on, no fixed size beside it
    assert share["gpu_memory_utilization"] == 0.3 and "kv_cache_memory_bytes" not in share
    gpu = kwargs(True)  # vLLM's own defaults on a GPU
    assert not {"kv_cache_memory_bytes", "gpu_memory_utilization", "enforce_eager"} & set(gpu)
    assert vllm.kv_cache_text(cpu) == "1.0 GiB" and vllm.kv_cache_text(share) == "a 0.3 share of memory"
    with pytest.raises(ValueError, match="--kv-cache-memory must be at least 1 byte"):
        kwargs(False, kv_cache_memory_bytes="0")
    # the unit of the size is not a key: the same model and dtype, the same key
    assert vllm.prepare(str(tiny_gpt2_dir), BackendOptions(dtype="fp32")).spec.model_key == \
        vllm.prepare(str(tiny_gpt2_dir), BackendOptions(dtype="fp32", engine_args=(("kv_cache_memory_bytes", 5),))
                     ).spec.model_key


@pytest.mark.parametrize("text, size", [("4GiB", 4 * 2**30), ("512MiB", 512 * 2**20), ("1.5 GB", 1_500_000_000),
                                        ("1073741824", 2**30), ("2 gib", 2 * 2**30), ("10kb", 10_000)])
def test_kv_cache_sizes_are_read_in_binary_and_decimal_units(text, size):
    from biaslab.cli.runners_cli import parse_size

    assert parse_size(text, "--kv-cache-memory") == size


def test_a_bad_kv_cache_size_is_one_line(tmp_path, data_dir, dataset_folder):
    dataset_folder("winopron")
    base = ["collect", "--dataset", "winopron", "--db", str(tmp_path / "w.duckdb"), "--data-dir", str(data_dir)]
    for text, why in (("lots", "is not a size"), ("1PiB", "is not a size"), ("0", "is below one byte")):
        result = CliRunner().invoke(runners, [*base, "--backend", "vllm", "--kv-cache-memory", text])
        assert result.exit_code == 2 and why in result.output and "--kv-cache-memory" in result.output
    assert not (tmp_path / "w.duckdb").exists()
