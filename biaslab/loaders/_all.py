"""Imports every loader module so that each registers its datasets."""

from . import winogender  # noqa: F401
