"""`biaslab compare`: paired comparisons between collection settings or conditions (`core`), with the statistics in
`paired`. Each study says what it compares through its registry entry's `compare` function."""

from .core import COLUMNS, DEFAULT_MIN_COVERAGE, Measure, Observations, compare_observations

__all__ = ["COLUMNS", "DEFAULT_MIN_COVERAGE", "Measure", "Observations", "compare_observations"]
