"""`audit status` / `--dry-run` without the model (issue 72, item 1): a collection whose last run of the same work
finished is answered from the warehouse (`survey.known`); anything else needs the model, which a dry run never reads.
"""

from __future__ import annotations

import json

import pytest

from biaslab.runners import survey as survey_module
from biaslab.runners.collect import CollectConfig, collect, surveys
from biaslab.warehouse import Warehouse


@pytest.fixture
def stored(tmp_path, data_dir, tiny_gpt2_dir):
    """Two CrowS-Pairs pairs collected on the tiny model in fp32 (finished); the config and its result."""
    config = CollectConfig(dataset="crows-pairs", model=str(tiny_gpt2_dir), dtype="fp32", db=str(tmp_path / "w.duckdb"),
                           data_dir=str(data_dir), limit=2, threads=1)
    return config, collect(config)


def _no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was prepared")

    monkeypatch.setattr(survey_module, "engine_handle", refuse)


def test_finished_work_is_answered_without_the_model(stored, monkeypatch):
    config, result = stored
    with monkeypatch.context() as m:  # the reference: surveyed in full, the model prepared
        m.setattr(survey_module, "known", lambda *args, **kwargs: None)
        full = surveys([config])[0]
    assert not full.known and full.pending == 0
    _no_model(monkeypatch)
    found = surveys([config, config], prepare=False)
    assert all(f.known for f in found)
    assert [(f.model_key, f.stimuli, f.requests, f.pending) for f in found] == \
        [(result.model_key, result.stimuli, result.requests, 0)] * 2 == [(full.model_key, full.stimuli,
                                                                         full.requests, full.pending)] * 2
    assert survey_module.model_key(config) == result.model_key


def test_other_work_needs_the_model(stored, monkeypatch):
    config, result = stored
    bigger = config.model_copy(update={"limit": 3})
    full = surveys([bigger])[0]
    assert not full.known and full.pending == 2 and full.requests == 6  # one more pair: two sentences pending
    assert surveys([config.model_copy(update={"dtype": None})], prepare=True)[0].known is False  # automatic dtype
    _no_model(monkeypatch)
    assert surveys([bigger], prepare=False) == [None]
    assert surveys([config.model_copy(update={"dtype": None})], prepare=False) == [None]
    assert surveys([config.model_copy(update={"where": {"attrs.bias_type": "age"}})], prepare=False) == [None]


def test_unfinished_older_or_other_version_runs_are_surveyed_in_full(stored, monkeypatch):
    """A run of the work that did not finish (partly stored), one recorded before the counts were, or one counted by
    another biaslab version: surveyed in full (`prepare="started"` prepares the model for the first; a dry run
    says it does not know)."""
    config, result = stored

    def edit(sql: str) -> None:
        with Warehouse.open(config.db) as wh:
            wh.con.execute(sql)

    edit("UPDATE runs SET status = 'interrupted'")
    assert surveys([config], prepare="started")[0].pending == 0  # prepared: the evidence is all there
    edit("UPDATE runs SET status = 'finished', params = json_merge_patch(params, '{\"survey\": null}')")
    assert surveys([config], prepare="started")[0].known is False
    with Warehouse.open(config.db, read_only=True) as wh:
        params = json.loads(wh.rows("SELECT params FROM runs")[0][0])
    assert "survey" not in params
    edit("UPDATE runs SET params = json_merge_patch(params, "
         "'{\"survey\": {\"stimuli\": 4, \"requests\": 4, \"biaslab\": \"0.0.1\"}}')")
    _no_model(monkeypatch)
    assert surveys([config], prepare=False) == [None]


def test_a_model_folder_written_since_is_surveyed_in_full(tmp_path, data_dir, tiny_gpt2_dir, monkeypatch):
    """A local model whose files changed after its run finished may have another key: not answered from the run."""
    import os
    import shutil
    import time

    folder = tmp_path / "model"
    shutil.copytree(tiny_gpt2_dir, folder)  # a copy: the session's tiny model is left as it is
    config = CollectConfig(dataset="crows-pairs", model=str(folder), dtype="fp32", db=str(tmp_path / "w.duckdb"),
                           data_dir=str(data_dir), limit=1, threads=1)
    collect(config)
    assert surveys([config], prepare=False)[0].known
    later = time.time() + 3600
    os.utime(next(p for p in folder.iterdir() if p.is_file()), (later, later))
    _no_model(monkeypatch)
    assert surveys([config], prepare=False) == [None]


def test_runs_record_what_they_covered(stored):
    config, result = stored
    with Warehouse.open(config.db, read_only=True) as wh:
        params = json.loads(wh.rows("SELECT params FROM runs")[0][0])
    assert params["survey"] == {"stimuli": result.stimuli, "requests": result.requests,
                                "biaslab": survey_module.survey_record(0, 0)["biaslab"]}
