"""biaslab: controlled-stimulus bias measurement for language models, with a DuckDB evidence warehouse."""

__version__ = "0.1.0"
