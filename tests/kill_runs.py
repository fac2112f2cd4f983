"""Crash-safety support: run a collection command and SIGKILL it at random moments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Sequence


def kill_at_random_moments(cmd: Sequence[str], wall: float, times: int, seed: int, between: tuple[float, float],
                           stored: Callable[[], int]) -> list[int]:
    """Start `cmd` `times` times, each SIGKILLed (its whole process group) after a random share `between` of
    `wall` seconds unless it finished first; returns `stored()` before the first start and after each kill."""
    rng = random.Random(seed)
    counts = [stored()]
    for _ in range(times):
        proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(*between) * wall)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        counts.append(stored())
    return counts
