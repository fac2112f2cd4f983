"""Input checks shared by the metric modules: probability arrays and binary label arrays."""

from __future__ import annotations

import numpy as np

from ..errors import DataError


def as_probabilities(x, name: str = "p") -> np.ndarray:
    """1-D float array of finite values in [0, 1]; ValueError otherwise."""
    arr = np.asarray(x, dtype=float).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise DataError(f"{name} contains NaN or infinite values")
    if arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
        raise DataError(f"{name} must lie in [0, 1]")
    return arr


def as_binary(x, name: str = "y") -> np.ndarray:
    """1-D int array of 0/1 values (bools accepted); ValueError for NaN or any other value."""
    arr = np.asarray(x).reshape(-1)
    if arr.dtype == bool:
        return arr.astype(int)
    try:
        arr = arr.astype(float)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name} must contain only 0 and 1 (or bools)") from exc
    if np.isnan(arr).any():
        raise DataError(f"{name} contains NaN")
    if not np.all((arr == 0) | (arr == 1)):
        raise DataError(f"{name} must contain only 0 and 1 (or bools)")
    return arr.astype(int)
