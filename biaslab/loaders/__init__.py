"""Dataset loaders: read upstream files, validate, emit `Stimulus` objects. No model or warehouse code here.

The names below are imported on first use, so that a command which only needs, say, the fetcher's defaults does
not import the stimulus schema (pydantic) at start-up."""

_LAZY = {"DatasetInfo": ".dataset", "DataError": ".errors", "MODULES": ".registry", "datasets": ".registry",
         "default_data_dir": ".registry", "get": ".registry"}

__all__ = ["DataError", "DatasetInfo", "MODULES", "datasets", "default_data_dir", "get"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
