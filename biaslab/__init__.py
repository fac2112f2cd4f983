"""biaslab: controlled-stimulus bias measurement for language models, with a DuckDB evidence warehouse.

Python API (docs/python-api.md): ``wh = biaslab.open("warehouse/biaslab.duckdb")``; ``wh.tables()``,
``wh.table(name)`` and ``wh.sql(query)`` give Ibis expressions; ``biaslab.contextuality(wh)``,
``biaslab.misgendering(wh)``, ``biaslab.negation(wh)``, ``biaslab.calibration(wh)``, ``biaslab.metaprompt(wh)`` and
``biaslab.options(wh, "my-study", by=["context"])`` return a study's tables (the same functions the `biaslab metrics` commands call).
Imported on first use, so ``import biaslab`` stays light.
"""

__version__ = "0.1.0"

_LAZY = {
    "open": ("biaslab.warehouse.handle", "open_warehouse"),
    "WarehouseHandle": ("biaslab.warehouse.handle", "WarehouseHandle"),
    "contextuality": ("biaslab.metrics.studies", "contextuality"),
    "misgendering": ("biaslab.metrics.studies", "misgendering"),
    "negation": ("biaslab.metrics.studies", "negation"),
    "calibration": ("biaslab.metrics.studies", "calibration"),
    "metaprompt": ("biaslab.metrics.studies", "metaprompt"),
    "options": ("biaslab.metrics.studies", "options"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'biaslab' has no attribute {name!r}")
