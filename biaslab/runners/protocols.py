"""Which runner protocols each dataset supports: declared by the dataset (`DatasetInfo.protocols`, the first is its
default)."""

from __future__ import annotations

from .. import loaders


def protocols_for(dataset: str) -> tuple[str, ...]:
    """Protocols available for a dataset (the first is its default); () for an unknown dataset."""
    try:
        return loaders.get(dataset).protocols
    except ValueError:
        return ()


def datasets_with(protocol: str) -> tuple[str, ...]:
    """The built-in datasets that support `protocol`, in registry order."""
    return tuple(name for name, info in loaders.datasets().items() if protocol in info.protocols)
