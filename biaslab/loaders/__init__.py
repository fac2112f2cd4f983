"""Dataset loaders: read upstream files, validate, emit `Stimulus` objects. No model or warehouse code here."""

from .dataset import DatasetInfo
from .errors import DataError
from .registry import MODULES, datasets, default_data_dir, get

__all__ = ["DataError", "DatasetInfo", "MODULES", "datasets", "default_data_dir", "get"]
