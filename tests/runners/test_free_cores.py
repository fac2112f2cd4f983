"""Threads that follow the cores other processes leave free (engines/threads.py, issue 35): the count from the
tick counters (fake ones here, and the real /proc on this machine), re-measured only after the interval, and the
HF backend applying it before each batch of work."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from biaslab.engines.threads import FreeCores, follow_free_cores


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


def test_follow_free_cores_sets_torch_threads():
    before = torch.get_num_threads()
    ticks = Ticks()
    cores = _cores(ticks, allowed={0, 1})
    ticks.run(3.0, own_cores=1.0, other_cores=1.0)
    try:
        assert follow_free_cores(cores) == 1 and torch.get_num_threads() == 1
        assert follow_free_cores(None) == 1
    finally:
        torch.set_num_threads(before)


def test_the_hf_backend_applies_it_before_each_batch(tiny_gpt2):
    from biaslab.engines.hf.backend import HFBackend

    before = torch.get_num_threads()
    calls = []

    class Counting:
        def threads(self):
            calls.append(1)
            return 1

    backend = HFBackend(tiny_gpt2, batch_tokens=10)
    try:
        backend.follow_free_cores(Counting())
        backend.score([[1, 2, 3, 4]])
        backend.top_k([[1, 2, 3]], 3)
        assert len(calls) == 2 and torch.get_num_threads() == 1
        # issue 35: a chunk scored in one call re-checks before each of its batches (2 sequences of 5 tokens per
        # 10-token batch), not once per chunk: 7 sequences alone, then 2 groups sharing a prefix, 1 batch each
        calls.clear()
        backend.score([[1, 2, 3, 4, k] for k in range(5, 12)])
        assert len(calls) == 4
        calls.clear()
        backend.score([[1, 2, 3, 4, 5, 6, k] for k in (7, 8)] + [[9, 8, 7, 6, 5, 4, k] for k in (3, 2)],
                      groups=[0, 0, 1, 1])
        assert len(calls) == 2
    finally:
        torch.set_num_threads(before)


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
def test_a_run_records_the_thread_counts_it_used(tmp_path, tiny_gpt2, data_dir, dataset_folder, monkeypatch, fixed):
    """bf16 evidence can change with the thread count (docs/decisions.md, issue 35), so a run whose count followed
    the free cores records the counts it used (`runs.params.threads_used`); `--threads` fixes it and records none;
    the count goes back to the allowed one after the run."""
    import json

    from biaslab.engines import threads as threads_module
    from biaslab.runners.collect import CollectConfig, collect
    from biaslab.warehouse import Warehouse

    class OneFree(FreeCores):
        def _measure(self) -> int:
            return 1

    dataset_folder("winopron")
    monkeypatch.setattr(threads_module, "FreeCores", OneFree)
    seen: list[int] = []
    real = threads_module.follow_free_cores
    monkeypatch.setattr(threads_module, "follow_free_cores", lambda cores: seen.append(real(cores)) or seen[-1])
    db = tmp_path / "w.duckdb"
    before = torch.get_num_threads()
    try:
        collect(CollectConfig(dataset="winopron", db=str(db), data_dir=str(data_dir), limit=4, threads=fixed),
                loaded=tiny_gpt2)
        assert torch.get_num_threads() == (fixed or threads_module.allowed_cpus())
    finally:
        torch.set_num_threads(before)
    with Warehouse.open(db, read_only=True) as wh:
        params = json.loads(wh.con.execute("SELECT params FROM runs").fetchone()[0])
    if fixed is None:
        assert seen and set(seen) == {1} and params["threads_used"] == [1]
        assert params["threads"] == threads_module.allowed_cpus()  # the count at the start, as before
    else:
        assert not seen and "threads_used" not in params and params["threads"] == fixed
