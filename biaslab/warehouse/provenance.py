"""Versions of the libraries that can change results, recorded with every run."""

from __future__ import annotations

import platform
from importlib import metadata

_TRACKED = ("biaslab", "torch", "transformers", "tokenizers", "accelerate", "gguf", "duckdb", "numpy", "bitsandbytes")


def library_versions() -> dict[str, str]:
    """Installed versions of the tracked libraries (missing ones omitted) plus the Python version."""
    versions = {"python": platform.python_version()}
    for name in _TRACKED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions
