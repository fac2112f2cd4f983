"""CPU threads for torch: every core this process is allowed to run on (its CPU affinity), not the machine's count,
less the cores other processes keep busy when a run starts (`FreeCores`), then fixed for the whole run.

A job started with `taskset -c 0-3` or under a cgroup-limited scheduler slot sees all the machine's cores in
`os.cpu_count()`; oversubscribing them slows every matrix product. The count used is recorded in each run's
parameters (`runs.params.threads`).

Why fewer threads beside a neighbour: the engine runs many small multi-threaded operations (a trie level of a
135M-parameter model is a few milliseconds), and each ends in a barrier that waits for its slowest thread. When
another process shares one of the cores, the thread on that core gets half of it in scheduler slices of several
milliseconds, and every operation waits for it: measured on 2 cores with one CPU-bound neighbour, the main job
took 6 to 14 times longer instead of 2 (issue 35, docs/decisions.md). One thread fewer than the busy cores keeps
every barrier on a core of its own.

Why the count is then fixed (issue 46): bf16 matrix products can round differently with another thread count (on
an Intel AMX CPU up to 0.25 in a probability), so a count that followed the load during a run made the evidence
depend on the load. `runners collect` measures once, before the first batch, and keeps that count for the run; a
resumed collection takes the count its first run recorded (`runners.runs.recorded_threads`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path


def allowed_cpus() -> int:
    """Number of CPUs this process may run on (`os.sched_getaffinity`; `os.cpu_count()` where that is missing)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def use_threads(threads: int | None = None) -> int:
    """Set torch's intra-op thread count to `threads` (default: `allowed_cpus()`) and return it.

    Parameters
    ----------
    threads : explicit count (e.g. `--threads`), or None for every allowed CPU.

    Returns
    -------
    The thread count torch now uses.
    """
    import torch

    wanted = threads if threads is not None else allowed_cpus()
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return torch.get_num_threads()


def _cpu_ticks(cpus: set[int]) -> int | None:
    """Busy clock ticks (user, nice, system, irq, softirq, steal) of `cpus` since boot, from /proc/stat; None where
    /proc/stat is not readable (not Linux)."""
    try:
        lines = Path("/proc/stat").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]] + [0] * (8 - len(fields[:8]))
            busy += values[0] + values[1] + values[2] + values[5] + values[6] + values[7]
    return busy


def _own_ticks() -> int | None:
    """Clock ticks this process (all its threads) has run, user + system, from /proc/self/stat."""
    try:
        fields = Path("/proc/self/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


class FreeCores:
    """The thread count for the cores other processes leave free: measured on the first call over the time since
    it was made (at least `first` seconds: the first call waits out the rest), then at most every `interval` seconds
    (`runners collect` asks once, for the run's fixed count).

    Over the last window: others = (busy ticks of the allowed cores - this process's ticks) / (seconds x ticks per
    second), in cores; threads = allowed - ceil(others - 0.3), at least 1 (a neighbour taking 0.3 of a core or more
    counts as a busy core; background noise does not).

    The first call measures before it answers because a run's first batch can be most of the run: scoring the 400
    RUFF sentences is three batches, and with the count left at every core until a later batch, the first batch
    shared its core with the neighbour and the whole run took 2.2 times its quiet time instead of 1.4
    (`bench_scoring.py --neighbour`, issue 35). `runners collect` makes one before it loads the model, so the
    window is usually long past when it asks.

    Parameters
    ----------
    allowed : the cores this process may use (default: its affinity).
    interval : seconds between measurements.
    first : the shortest window of the first measurement, in seconds (ticks are 1/100 s: 0.25 s of a busy core is
        25 ticks).
    clock, sleep, busy, own : the clock, how to wait, and the tick counters (tests give fakes).
    """

    def __init__(self, allowed: set[int] | None = None, interval: float = 2.0, first: float = 0.25,
                 clock: Callable[[], float] = time.monotonic, busy: Callable[[set[int]], int | None] = _cpu_ticks,
                 own: Callable[[], int | None] = _own_ticks, sleep: Callable[[float], None] = time.sleep):
        try:
            self.cpus = set(allowed) if allowed is not None else set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = set(range(os.cpu_count() or 1))
        self.interval, self.clock, self.busy, self.own, self.sleep = interval, clock, busy, own, sleep
        self.wait = first
        self.measured = False  # no measurement yet: the next call waits for a window of `first` seconds
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last = self._sample()
        self.current = len(self.cpus)
        self.others = 0.0

    def _sample(self):
        return self.clock(), self.busy(self.cpus), self.own()

    def threads(self) -> int:
        """The thread count to use now (the last one until `interval` has passed)."""
        return self._measure()

    def _measure(self) -> int:
        now = self.clock()
        if now - self.last[0] < self.wait:
            if self.measured or None in self.last:
                return self.current
            self.sleep(self.wait - (now - self.last[0]))
        self.wait, self.measured = self.interval, True
        sample = self._sample()
        (t0, b0, o0), (t1, b1, o1) = self.last, sample
        self.last = sample
        if None in (b0, b1, o0, o1) or t1 <= t0:
            return self.current
        self.others = max(0.0, ((b1 - b0) - (o1 - o0)) / ((t1 - t0) * self.hz))
        busy_cores = max(0, math.ceil(self.others - 0.3))
        self.current = max(1, min(len(self.cpus), len(self.cpus) - busy_cores))
        return self.current
