"""Length-sorted batches filled to a token budget, and out-of-memory retry by halving (docs/design.md section 5)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


def token_budget_batches(lengths: Sequence[int], max_tokens: int, max_batch: int = 512) -> Iterator[list[int]]:
    """Indices grouped longest first so that len(batch) * longest <= max_tokens (padded area of the batch).

    A sequence longer than the budget gets a batch of its own. Sorting by length keeps padding small.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    longest = 0
    for i in order:
        longest_if_added = max(longest, lengths[i])
        if batch and (longest_if_added * (len(batch) + 1) > max_tokens or len(batch) >= max_batch):
            yield batch
            batch, longest_if_added = [], lengths[i]
        batch.append(i)
        longest = longest_if_added
    if batch:
        yield batch


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def run_halving_on_oom(items: list[T], fn: Callable[[list[T]], list[R]]) -> list[R]:
    """fn(items); on out-of-memory split the batch in two and retry each half (down to single items)."""
    try:
        return fn(items)
    except Exception as exc:  # noqa: BLE001 - only OOM is handled, everything else re-raised
        if not is_oom(exc) or len(items) == 1:
            raise
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = len(items) // 2
    return run_halving_on_oom(items[:half], fn) + run_halving_on_oom(items[half:], fn)
