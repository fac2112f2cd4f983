"""The runner protocols by name, each a plug-in of the one collect loop (`base.Protocol`):

- `prob`: score each option filled into the slot, or the whole sentence (causal log-likelihood; masked LMs:
  pseudo-log-likelihood);
- `choice`: a forced-choice chat prompt answered in exact mode (the answer trie's top-K logits) or sample mode;
- `meta`: comprehension questions about the forced-choice passages (metaprompting), built on `choice`;
- `gen`: sampled continuations of a prompt.

A dataset declares the protocols it is asked with (`DatasetInfo.protocols`).
"""

from __future__ import annotations

import importlib

from ...errors import UsageError
from .base import Protocol, Settings, Work

#: protocol name -> module of this package defining it (its `PROTOCOL` class)
MODULES = {"prob": "prob", "choice": "choice", "meta": "meta", "gen": "gen"}
NAMES = tuple(MODULES)


def get(name: str) -> type[Protocol]:
    """The protocol class `name`; ValueError naming the known ones otherwise."""
    if name not in MODULES:
        raise UsageError(f"unknown protocol {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{MODULES[name]}").PROTOCOL


__all__ = ["NAMES", "Protocol", "Settings", "Work", "get"]
