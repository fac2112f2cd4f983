"""Engine plugins: an engine another distribution declares in the entry-point group `biaslab.engines` is found by
the registry (`biaslab.engines.registry`), offered by `runners collect --backend` with its own shortcut flag, listed
by `runners backends`, and collects evidence like a built-in engine; a plugin that does not import is listed as not
installed with the reason and breaks nothing else; a plugin named like a built-in engine is left out with one line.

The plugins live in a temporary folder as plain modules beside `*.dist-info` folders (METADATA, entry_points.txt),
which `importlib.metadata` finds on the path: no pip install. The command lines run in subprocesses with that folder
on PYTHONPATH (click builds the flags from the registry when the command is defined, at import)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from biaslab import engines
from biaslab.engines import registry
from biaslab.warehouse import Warehouse

TOY_ENGINE = '''
"""A toy engine: one token per character (id = code point) and log-probabilities computed from the ids alone."""

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from biaslab.engines.base import SCORE, EngineBase, Flag, PreparedBase, Unsupported, engine_options
from biaslab.schema import ModelSpec

NAME = "toy"
CAPABILITIES = frozenset({SCORE})
VERSION = "toy 1.0"


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scale: float = Field(1.0, gt=0, description="multiplies every log-probability")


FLAGS = (Flag("scale", "multiplies every log-probability.", name="--toy-scale"),)


def logprob(token_id, position, scale):
    return -scale * (0.5 + (token_id % 7) / 10 + position / 100)


def installed():
    return True, VERSION


def settings(options):
    return engine_options(Options, NAME, options.engine_args)


def validate_options(options):
    settings(options)


def prepare(model, options):
    return ToyPrepared(model, settings(options).scale)


class Tokenizer:
    bos_token_id = 1

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        out = {"input_ids": [ord(c) for c in text]}
        if return_offsets_mapping:
            out["offset_mapping"] = [(i, i + 1) for i in range(len(text))]
        return out


class ToyPrepared(PreparedBase):
    max_top_k = None
    label = "toy"
    device = "toy-device"

    def __init__(self, model, scale):
        self.scale, self.tokenizer = scale, Tokenizer()
        self.spec = ModelSpec(name=model, source=model, dtype="fp32", tokenizer="toy-chars", backend=NAME,
                              backend_version=VERSION, engine_args={"scale": str(scale)})

    def load(self):
        return ToyBackend(self)


class ToyBackend(EngineBase):
    name, version, capabilities, max_top_k = NAME, VERSION, CAPABILITIES, None
    bos_id, pad_id, stop_ids = 1, 0, frozenset({2})

    def __init__(self, prepared):
        self.spec, self.tokenizer, self.device, self.scale = (prepared.spec, prepared.tokenizer, prepared.device,
                                                              prepared.scale)

    def score(self, sequences, groups=None):
        return [np.array([logprob(t, i, self.scale) for i, t in enumerate(seq[1:])], dtype=np.float64)
                for seq in sequences]

    def pll(self, sequences, word_ids, scheme):
        raise Unsupported("toy: no pll")

    def top_k(self, prefixes, k):
        raise Unsupported("toy: no top_k")

    def sample(self, prompts, seeds, settings):
        raise Unsupported("toy: no sample")

    def close(self):
        pass
'''


def _dist(folder: Path, name: str, entry_points: str) -> None:
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[biaslab.engines]\n{entry_points}")


def _toy(x: float, position: int, scale: float) -> float:
    return -scale * (0.5 + (x % 7) / 10 + position / 100)


@pytest.fixture(scope="module")
def plugins(tmp_path_factory) -> Path:
    """A folder holding the toy engine (`toy`), a plugin that does not import (`broken`) and one that takes a
    built-in engine's name (`hf`)."""
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "toy_engine.py").write_text(TOY_ENGINE)
    _dist(folder, "toy-engine", "toy = toy_engine\n")
    (folder / "broken_engine.py").write_text('raise ImportError("needs the toy accelerator")\n')
    _dist(folder, "broken-engine", "broken = broken_engine\nhf = broken_engine\n")
    return folder


@pytest.fixture
def on_path(plugins, monkeypatch):
    """The plugins importable in this process, the registry read afresh (and again after the test)."""
    monkeypatch.syspath_prepend(str(plugins))
    registry._discover.cache_clear()
    registry._load_plugin.cache_clear()
    yield plugins
    for name in ("toy_engine", "broken_engine"):
        sys.modules.pop(name, None)
    registry._discover.cache_clear()
    registry._load_plugin.cache_clear()


def _runners(plugins: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "COLUMNS": "250", "PYTHONWARNINGS": "default"}
    return subprocess.run([sys.executable, "-m", "biaslab.cli.runners_entry", *args], capture_output=True, text=True,
                          env=env, timeout=240, check=False)


def test_the_registry_finds_plugins_and_a_broken_one_breaks_nothing(on_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = engines.names()
    assert names == ("hf", "vllm", "openai", "openai-chat", "gemini", "anthropic", "toy", "broken")
    clash = [str(w.message) for w in caught if issubclass(w.category, engines.EngineWarning)]
    assert clash == [("engine plugin hf = broken_engine (broken-engine 0.1) is left out: the built-in engine 'hf' "
                      "has that name")]
    assert engines.notes() == tuple(clash)
    assert engines.get("hf").NAME == "hf"  # the built-in wins the clash
    toy = engines.get("toy")
    assert toy.installed() == (True, "toy 1.0") and engines.origin("toy") == "plugin toy_engine (toy-engine 0.1)"
    assert engines.problem("toy") == "" and "needs the toy accelerator" in engines.problem("broken")
    with pytest.raises(engines.Unsupported, match="--backend broken is not available: its module 'broken_engine' "
                                                  "does not import .*needs the toy accelerator"):
        engines.get("broken")
    with pytest.raises(ValueError, match="unknown; use one of hf, vllm, openai, openai-chat, gemini, anthropic, "
                                         "toy, broken"):
        engines.get("tgi")
    found, problems = engines.flags()
    assert [(f.engine, f.flag.flag, f.type) for f in found if f.engine == "toy"] == [("toy", "--toy-scale", float)]
    assert problems == []


def test_a_plugin_engine_is_offered_listed_and_collects(plugins, tmp_path, data_dir, dataset_folder):
    dataset_folder("negation_bias_examples")
    help_text = _runners(plugins, "collect", "--help")
    assert help_text.returncode == 0, help_text.stderr
    choices = re.search(r"--backend \[([^\]]*)\]", help_text.stdout)[1]
    assert choices.replace(" ", "").replace("\n", "").split("|") == [
        "hf", "vllm", "openai", "openai-chat", "gemini", "anthropic", "toy", "broken"]
    flat = " ".join(help_text.stdout.split())
    assert "--toy-scale FLOAT toy: multiplies every log-probability." in flat
    for flag in ("--tensor-parallel-size", "--kv-cache-memory SIZE", "--base-url", "--api-key-env VAR"):
        assert flag in flat  # the built-in engines' flags are there too

    listed = _runners(plugins, "backends")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines() if line.count("│") > 2}
    assert "yes" in rows["toy"] and "toy 1.0" in rows["toy"] and "score" in rows["toy"]
    assert ("engine plugins (biaslab.engines entry points): toy: plugin toy_engine (toy-engine 0.1); broken: plugin "
            "broken_engine (broken-engine 0.1)") in listed.stdout
    assert " no " in rows["broken"] and "broken is not installed: " in listed.stdout
    assert "does not import" in listed.stdout.split("broken is not installed: ")[1].splitlines()[0]
    assert "yes" in rows["hf"]
    assert "engine plugin hf = broken_engine (broken-engine 0.1) is left out" in listed.stdout
    assert listed.stderr.count("EngineWarning") == 1  # one line, as warnings show it
    assert "toy: scale" in " ".join(listed.stdout.split())

    db = tmp_path / "w.duckdb"
    run = _runners(plugins, "collect", "--backend", "toy", "--model", "toy-model", "--dataset", "negation-examples",
                   "--protocol", "prob", "--toy-scale", "2", "--limit", "1", "--db", str(db),
                   "--data-dir", str(data_dir))
    assert run.returncode == 0, run.stdout + run.stderr
    # a limit counts negation's root items, each with its four conditions
    assert "4 stimuli, 4 requests" in run.stdout and "4 rows added" in run.stdout.replace("scored sequences", "rows")
    with Warehouse.open(db, read_only=True) as wh:
        model = wh.con.execute("SELECT backend, backend_version, model_key FROM models").fetchall()
        assert [m[:2] for m in model] == [("toy", "toy 1.0")]
        sequences = wh.con.execute("SELECT request_id, text, n_tokens, sum_logprob FROM sequence_scores "
                                   "WHERE model_key = ?", [model[0][2]]).fetchall()
        tokens = wh.con.execute("SELECT request_id, position, token_id, logprob, char_start FROM token_scores "
                                "ORDER BY request_id, position").fetchall()
        run_row = wh.con.execute("SELECT device FROM runs").fetchall()
    assert len(sequences) == 4 and run_row == [("toy-device",)]
    for request_id, text, n_tokens, total in sequences:
        mine = [t for t in tokens if t[0] == request_id]
        assert n_tokens == len(text) == len(mine)
        for position, token_id, logprob, start in (t[1:] for t in mine):
            assert token_id == ord(text[start]) and position == start
            assert logprob == pytest.approx(_toy(token_id, position, 2.0), abs=1e-12)  # what the toy engine returned
        assert total == pytest.approx(sum(_toy(ord(c), i, 2.0) for i, c in enumerate(text)), abs=1e-9)

    refused = _runners(plugins, "collect", "--backend", "broken", "--dataset", "negation-examples",
                       "--db", str(tmp_path / "b.duckdb"), "--data-dir", str(data_dir))
    assert refused.returncode != 0 and "--backend broken is not available" in refused.stdout + refused.stderr
    assert not (tmp_path / "b.duckdb").exists()
