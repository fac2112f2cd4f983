"""biaslab: controlled-stimulus bias measurement for language models, with a DuckDB evidence warehouse.

Python API (docs/python-api.md): ``wh = biaslab.open("warehouse/biaslab.duckdb")``; ``wh.tables()``,
``wh.table(name)`` and ``wh.sql(query)`` give Ibis expressions; ``biaslab.contextuality(wh)``,
``biaslab.misgendering(wh)``, ``biaslab.negation(wh)``, ``biaslab.calibration(wh)``, ``biaslab.metaprompt(wh)``,
``biaslab.bbq(wh)``, ``biaslab.crows_pairs(wh)``, ``biaslab.decodingtrust(wh)``, ``biaslab.holistic_bias(wh)``,
``biaslab.counterfactual(wh)`` and
``biaslab.options(wh, "my-study", by=["context"])`` return a study's tables (the same functions the `biaslab metrics`
commands call); ``biaslab.compare(wh, "contextuality", between=["model-a", "model-b"])`` tests the
differences between two settings (`biaslab compare`). ``biaslab.load("winopron", db)``,
``biaslab.load_user(db, spec="study.yaml")`` and
``biaslab.collect("winopron", model="smollm2-135m", db=db, limit=40)`` are `biaslab data load` and
`runners collect` as functions (the commands are thin shells over them).
Imported on first use, so ``import biaslab`` stays light.
"""


def _installed_version() -> str:
    """One place for the version: pyproject.toml, read from the installed metadata on first use (reading it costs
    tens of milliseconds that `biaslab --help` does not need)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("biaslab")
    except PackageNotFoundError:  # a source tree on sys.path without an install (e.g. the GPU kit's PYTHONPATH copy)
        return "0+unknown"


_LAZY = {
    "open": ("biaslab.warehouse.handle", "open_warehouse"),
    "WarehouseHandle": ("biaslab.warehouse.handle", "WarehouseHandle"),
    "contextuality": ("biaslab.metrics.studies", "contextuality"),
    "misgendering": ("biaslab.metrics.studies", "misgendering"),
    "negation": ("biaslab.metrics.studies", "negation"),
    "calibration": ("biaslab.metrics.studies", "calibration"),
    "metaprompt": ("biaslab.metrics.studies", "metaprompt"),
    "options": ("biaslab.metrics.studies", "options"),
    "bbq": ("biaslab.metrics.studies", "bbq"),
    "crows_pairs": ("biaslab.metrics.studies", "crows_pairs"),
    "decodingtrust": ("biaslab.metrics.studies", "decodingtrust"),
    "holistic_bias": ("biaslab.metrics.studies", "holistic_bias"),
    "counterfactual": ("biaslab.metrics.studies", "counterfactual"),
    "compare": ("biaslab.metrics.studies", "compare"),
    "load": ("biaslab.runners.load", "load"),
    "load_user": ("biaslab.runners.load", "load_user"),
    "collect": ("biaslab.runners.collect", "collect_dataset"),
}
# the study functions above are the built-in studies of `biaslab.metrics.registry` (checked by
# tests/metrics/test_study_registry.py); a registered study is `biaslab.<name>` too (`__getattr__`)

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name == "__version__":
        globals()["__version__"] = found = _installed_version()
        return found
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if not name.startswith("_"):  # a study added with `biaslab.metrics.registry.register_study`
        from .metrics.registry import studies

        found = studies().get(name)
        if found is not None:
            return found.function
    raise AttributeError(f"module 'biaslab' has no attribute {name!r}")
