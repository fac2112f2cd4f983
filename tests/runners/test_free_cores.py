"""Threads for the cores other processes leave free (engines/threads.py, issue 35): the count from the tick
counters (fake ones here, and the real /proc on this machine), re-measured only after the interval; a run measures
it once and keeps it, and a resumed collection takes the count its first run recorded (issue 46)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from biaslab.engines.threads import FreeCores


class Ticks:
    """Fake /proc counters: the machine's busy ticks of the allowed cores and this process's own."""

    def __init__(self):
        self.now, self.busy, self.own = 0.0, 0, 0

    def run(self, seconds: float, own_cores: float, other_cores: float, hz: int = 100):
        self.now += seconds
        self.own += int(own_cores * seconds * hz)
        self.busy += int((own_cores + other_cores) * seconds * hz)


def _cores(ticks: Ticks, allowed=frozenset({0, 1, 2, 3})) -> FreeCores:
    cores = FreeCores(set(allowed), interval=2.0, first=2.0, clock=lambda: ticks.now, busy=lambda cpus: ticks.busy,
                      own=lambda: ticks.own)
    cores.hz = 100
    return cores


@pytest.mark.parametrize("others, expected", [(0.0, 4), (0.2, 4), (0.5, 3), (1.0, 3), (1.31, 2), (2.0, 2),
                                              (3.6, 1), (9.0, 1)])
def test_threads_leave_the_busy_cores(others, expected):
    ticks = Ticks()
    cores = _cores(ticks)
    ticks.run(3.0, own_cores=4 - min(others, 3), other_cores=others)
    assert cores.threads() == expected
    assert cores.others == pytest.approx(others, abs=0.02)


def test_measured_again_only_after_the_interval_and_back_when_the_neighbour_leaves():
    ticks = Ticks()
    cores = _cores(ticks, allowed={0, 1})
    ticks.run(2.5, own_cores=1.0, other_cores=1.0)
    assert cores.threads() == 1
    ticks.run(1.0, own_cores=1.0, other_cores=0.0)
    assert cores.threads() == 1  # within the interval: unchanged
    ticks.run(1.5, own_cores=2.0, other_cores=0.0)
    assert cores.threads() == 2  # the neighbour left


def test_the_first_call_measures_before_it_answers():
    """Issue 35: a run's first batch can be most of it (scoring 400 sentences is 3 batches), so the first call never
    answers 'every core' unmeasured: it waits out the rest of the `first` window (0.25 s), then measures."""
    ticks = Ticks()
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the neighbour keeps its core while we wait
        slept.append(seconds)
        ticks.run(seconds, own_cores=0.0, other_cores=1.0)

    cores = FreeCores({0, 1}, interval=2.0, first=0.25, clock=lambda: ticks.now, busy=lambda cpus: ticks.busy,
                      own=lambda: ticks.own, sleep=sleep)
    cores.hz = 100
    ticks.run(0.05, own_cores=1.0, other_cores=1.0)
    assert cores.threads() == 1 and slept == [pytest.approx(0.2)]
    assert cores.others == pytest.approx(1.0, abs=0.05)
    ticks.run(0.5, own_cores=1.0, other_cores=1.0)
    assert cores.threads() == 1 and len(slept) == 1  # later calls within the interval never wait
    later = FreeCores({0, 1}, first=0.25, clock=lambda: ticks.now, busy=lambda cpus: ticks.busy,
                      own=lambda: ticks.own, sleep=sleep)
    later.hz = 100
    ticks.run(3.0, own_cores=2.0, other_cores=0.0)  # a window long past `first` (the model loading): no wait
    assert later.threads() == 2 and len(slept) == 1


def test_unreadable_counters_keep_every_allowed_core():
    cores = FreeCores({0, 1, 2}, interval=0.0, busy=lambda cpus: None, own=lambda: None,
                      sleep=lambda s: pytest.fail("nothing to measure: no wait"))
    assert cores.threads() == 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_real_neighbour_is_seen():
    import os

    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("one allowed core")
    core = max(allowed)
    spin = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    neighbour = subprocess.Popen([sys.executable, "-c", spin])
    try:
        cores = FreeCores(interval=0.5, first=0.5)
        time.sleep(1.0)
        assert cores.threads() <= len(allowed) - 1
        assert cores.others > 0.6
    finally:
        neighbour.kill()
        neighbour.wait()


def test_the_first_measurement_comes_sooner():
    ticks = Ticks()
    cores = FreeCores({0, 1}, interval=2.0, first=0.5, clock=lambda: ticks.now, busy=lambda cpus: ticks.busy,
                      own=lambda: ticks.own)
    cores.hz = 100
    ticks.run(0.6, own_cores=1.0, other_cores=1.0)
    assert cores.threads() == 1
    ticks.run(1.0, own_cores=2.0, other_cores=0.0)
    assert cores.threads() == 1  # then every 2 s


@pytest.mark.parametrize("fixed", [None, 2])
def test_a_run_fixes_and_records_its_thread_count(tmp_path, tiny_gpt2, data_dir, dataset_folder, monkeypatch, fixed):
    """A run measures the free cores once and keeps that count for every batch (issue 46: bf16 evidence can change
    with the count), recorded in `runs.params.threads`; `--threads` fixes it; the count goes back to the allowed
    one after the run. The engine is never asked to follow the cores during the run."""
    import json

    from biaslab.engines import threads as threads_module
    from biaslab.runners.collect import CollectConfig, collect
    from biaslab.warehouse import Warehouse

    asked: list[int] = []

    class OneFree(FreeCores):
        def _measure(self) -> int:
            asked.append(1)
            return 1

    dataset_folder("winopron")
    monkeypatch.setattr(threads_module, "FreeCores", OneFree)
    seen: list[int] = []
    real_norm = torch.nn.functional.layer_norm  # every block of every forward pass calls it
    monkeypatch.setattr(torch.nn.functional, "layer_norm",
                        lambda *a, **k: (seen.append(torch.get_num_threads()), real_norm(*a, **k))[1])
    db = tmp_path / "w.duckdb"
    before = torch.get_num_threads()
    try:
        result = collect(CollectConfig(dataset="winopron", db=str(db), data_dir=str(data_dir), limit=1,
                                       threads=fixed, prompt_batch=2), loaded=tiny_gpt2)
        assert torch.get_num_threads() == (fixed or threads_module.allowed_cpus())
    finally:
        torch.set_num_threads(before)
    with Warehouse.open(db, read_only=True) as wh:
        params = json.loads(wh.con.execute("SELECT params FROM runs").fetchone()[0])
    assert len(seen) > 4 and set(seen) == {fixed or 1}  # every layer of every forward pass at the one count
    assert params["threads"] == (fixed or 1) and "threads_used" not in params
    assert asked == ([] if fixed else [1])  # measured once, or not at all with --threads
    assert any(n.startswith(f"threads: {fixed or 1} (") for n in result.notes)


def test_a_resumed_collection_takes_the_count_its_first_run_recorded(tmp_path, tiny_gpt2, data_dir, dataset_folder,
                                                                     monkeypatch):
    """The first run measured 1 free core and stored part of the work; the machine is quiet when the collection is
    resumed, yet the resumed run computes with 1 thread, as the first did, and says why; `--threads` overrides."""
    import json

    from biaslab.engines import threads as threads_module
    from biaslab.runners.collect import CollectConfig, collect
    from biaslab.warehouse import Warehouse

    free = {"count": 1}

    class Measured(FreeCores):
        def _measure(self) -> int:
            return free["count"]

    dataset_folder("winopron")
    monkeypatch.setattr(threads_module, "FreeCores", Measured)
    db = tmp_path / "w.duckdb"
    common = dict(dataset="winopron", db=str(db), data_dir=str(data_dir), prompt_batch=2)
    before = torch.get_num_threads()
    try:
        first = collect(CollectConfig(limit=1, **common), loaded=tiny_gpt2)  # templates of 10 prompts each
        free["count"] = 2
        resumed = collect(CollectConfig(limit=2, **common), loaded=tiny_gpt2)  # a larger limit extends the sample
        override = collect(CollectConfig(limit=3, threads=2, **common), loaded=tiny_gpt2)
    finally:
        torch.set_num_threads(before)
    assert (first.added, resumed.added, override.added) == (10, 10, 10)
    with Warehouse.open(db, read_only=True) as wh:
        counts = [json.loads(p)["threads"] for p, in wh.rows("SELECT params FROM runs ORDER BY started_at")]
    assert counts == [1, 1, 2]
    [line] = [n for n in resumed.notes if n.startswith("threads:")]
    assert line.startswith(f"threads: 1 (as run {first.run_id[:8]} of this collection recorded")
