"""A rerun with nothing pending, for every protocol: loads no model, adds nothing, says "0 pending, 0 <unit> added",
exit 0.

The second run replaces `PreparedModel.load` with a function that fails the test, so "no model loaded" is checked,
not assumed. Both entry points: `collect()` and the `runners collect` command.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from biaslab.cli.runners_cli import runners
from biaslab.runners.collect import CollectConfig, collect
from biaslab.engines.hf.loading import PreparedModel
from biaslab.warehouse import Warehouse

#: (dataset folder, collect options): prob, choice exact, choice sample, gen
PROTOCOLS = {
    "prob": ("winogender", dict(dataset="winogender", limit=4)),
    "choice-exact": ("winopron", dict(dataset="winopron", limit=2, max_new_tokens=3)),
    "choice-sample": ("winopron", dict(dataset="winopron", limit=2, mode="sample", samples=3, max_new_tokens=3)),
    "gen": ("ruff", dict(dataset="ruff", protocol="gen", limit=2, samples=2, max_new_tokens=4)),
}


def _refuse(self):
    raise AssertionError("a model was loaded although nothing was pending")


def _cli_args(options: dict) -> list[str]:
    names = {"max_new_tokens": "--max-new-tokens"}
    args = []
    for key, value in options.items():
        args += [names.get(key, "--" + key.replace("_", "-")), str(value)]
    return args


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_rerun_through_collect_loads_nothing_and_adds_nothing(protocol, tmp_path, tiny_gpt2_dir, data_dir,
                                                              dataset_folder, monkeypatch):
    folder, options = PROTOCOLS[protocol]
    dataset_folder(folder)
    config = dict(options, model=str(tiny_gpt2_dir), dtype="fp32", device="cpu", db=str(tmp_path / "w.duckdb"),
                  data_dir=str(data_dir))
    first = collect(CollectConfig(**config))
    assert first.pending > 0 and first.added > 0
    monkeypatch.setattr(PreparedModel, "load", _refuse)
    again = collect(CollectConfig(**config))
    assert (again.requests, again.pending, again.added) == (first.requests, 0, 0)
    with Warehouse.open(tmp_path / "w.duckdb", read_only=True) as wh:
        runs = wh.con.execute("SELECT status, rows_added FROM runs ORDER BY started_at").fetchall()
    assert runs == [("finished", first.added), ("finished", 0)]


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_rerun_through_the_cli_prints_zero_pending_zero_added(protocol, tmp_path, tiny_gpt2_dir, data_dir,
                                                              dataset_folder, monkeypatch):
    folder, options = PROTOCOLS[protocol]
    dataset_folder(folder)
    args = ["collect", *_cli_args(options), "--model", str(tiny_gpt2_dir), "--dtype", "fp32", "--device", "cpu",
            "--db", str(tmp_path / "w.duckdb"), "--data-dir", str(data_dir)]
    first = CliRunner().invoke(runners, args)
    assert first.exit_code == 0, first.output
    assert not re.search(r" 0 (requests|samples|scored sequences) added", first.output)
    monkeypatch.setattr(PreparedModel, "load", _refuse)
    again = CliRunner().invoke(runners, args)
    assert again.exit_code == 0, again.output
    assert re.search(r"0 pending, 0 (requests|samples|scored sequences) added", again.output)
