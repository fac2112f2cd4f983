"""Which items a limited run (`--limit N`) takes: a fair sample of the dataset, the same on every machine.

A limit counts **items** (the stimuli sharing an `item_id`: a CrowS-Pairs pair's two sentences, a WinoPron template's
5 contexts x 2 option orders, one BBQ example), never stimuli, so a limited run never holds half an item.

Two orders (`--limit-order`):

- ``spread`` (the default): a seeded, stratified order. The dataset declares its strata, outermost first
  (`loaders.DatasetInfo.strata`: BBQ category > template > context condition > polarity; CrowS-Pairs bias type;
  WinoPron grammatical case > answer). Within the innermost stratum the items are in a seeded random order; each
  level interleaves its strata *proportionally* by systematic sampling (Cochran 1977, ch. 8): the k-th item of a
  stratum holding n items gets the key (k + u) / n, u a seeded offset of the stratum in [0, 1), and the level
  lists its items by key. So the first N items hold about N * n / total of each stratum, at every level. At the
  outermost level each stratum's first item comes before any stratum's second (keys -1 + u), so that a limit of at
  least the number of outermost strata holds every one of them (every BBQ category, every CrowS-Pairs bias type).
- ``file``: the dataset's own order, item ids in natural order (``2`` before ``10``; ``Age.9`` before ``Age.10``),
  which is the order of the files for the built-in datasets: what another tool's ``--limit`` takes.

Either order depends only on the items, their strata and the seed (sha256, not Python's hash): a rerun, a resume, a
shard of the run (sharding applies after the limit) and a larger limit all extend the same sample, and the order and
seed are stored with the run (`runs.params`: ``limit_order``, ``limit_seed``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from ..errors import UsageError

ORDERS = ("spread", "file")
DEFAULT_ORDER = "spread"

T = TypeVar("T")
_DIGITS = re.compile(r"(\d+)")


def unit_interval(seed: int, *parts: str) -> float:
    """A number in [0, 1) fixed by `seed` and `parts`: the first 52 bits of sha256("seed\\x00part\\x00...")."""
    digest = hashlib.sha256("\x00".join([str(seed), *parts]).encode()).digest()
    return (int.from_bytes(digest[:7], "big") >> 4) / float(1 << 52)


def natural_key(text: str) -> tuple:
    """Sort key of a natural order: digit runs compare as numbers (``Age.9`` < ``Age.10``; ``2`` < ``10``)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(text) if part)


def spread_order(items: dict[str, tuple[str, ...]], seed: int = 0) -> list[str]:
    """The items in the seeded, stratified order of this module's docstring.

    Parameters
    ----------
    items : item id -> its strata, outermost first (every item the same depth; () for no strata).
    seed : the order's seed.

    Returns
    -------
    The item ids, a fair sample of any length as a prefix.
    """
    def order(ids: list[str], depth: int, path: tuple[str, ...]) -> list[str]:
        if not ids or depth == len(next(iter(items[i] for i in ids))):
            return sorted(ids, key=lambda i: (unit_interval(seed, "item", i), i))
        groups: dict[str, list[str]] = {}
        for i in ids:
            groups.setdefault(items[i][depth], []).append(i)
        keyed = []
        for name, members in groups.items():
            u = unit_interval(seed, "stratum", *path, name)
            inner = order(members, depth + 1, (*path, name))
            n = len(inner)
            for k, item in enumerate(inner):
                key = -1.0 + u if depth == 0 and k == 0 else (k + u) / n
                keyed.append((key, u, name, item))
        keyed.sort()
        return [item for *_, item in keyed]

    return order(sorted(items), 0, ())


def file_order(item_ids: Iterable[str]) -> list[str]:
    """The item ids in natural order (`natural_key`)."""
    return sorted(set(item_ids), key=lambda i: (natural_key(i), i))


def limited(stimuli: Sequence[T], limit: int, *, item: Callable[[T], str], strata: Callable[[T], tuple[str, ...]],
            order: str = DEFAULT_ORDER, seed: int = 0) -> list[T]:
    """The stimuli of the first `limit` items in `order` ("spread" or "file"), in their given order.

    Parameters
    ----------
    stimuli : the candidates (after --where), in canonical order.
    limit : how many items to keep.
    item : a stimulus's item id.
    strata : a stimulus's strata, outermost first (an item's are its first stimulus's).
    order, seed : the order (`ORDERS`) and its seed (spread only).

    Returns
    -------
    The kept stimuli, in the order given.
    """
    if order not in ORDERS:
        raise UsageError(f"--limit-order {order!r} is not one of {', '.join(ORDERS)}")
    first: dict[str, tuple[str, ...]] = {}
    for s in stimuli:
        first.setdefault(item(s), strata(s))
    ranked = spread_order(first, seed) if order == "spread" else file_order(first)
    kept = set(ranked[:limit])
    return [s for s in stimuli if item(s) in kept]
