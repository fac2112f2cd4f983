"""CPU threads for torch: every core this process is allowed to run on (its CPU affinity), not the machine's count.

A job started with `taskset -c 0-3` or under a cgroup-limited scheduler slot sees all the machine's cores in
`os.cpu_count()`; oversubscribing them slows every matrix product. The count used is recorded in each run's
parameters (`runs.params.threads`).
"""

from __future__ import annotations

import os


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
