"""Imports every loader module so that each registers its datasets."""

from . import winogender  # noqa: F401
from . import winopron  # noqa: F401
from . import misgendered  # noqa: F401
from . import tango  # noqa: F401
from . import ruff  # noqa: F401
from . import winobias  # noqa: F401
from . import gece  # noqa: F401
from . import negation  # noqa: F401
from . import winoqueer  # noqa: F401
