"""The public API is what `__all__` declares (issue 40, item 6): the package root and the modules the docs name.
Every `biaslab.<name>(...)` of the README and docs/ is in `biaslab.__all__`, every name of an `__all__` exists, and
the internal modules are reached through these, never named by the docs."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import biaslab

ROOT = Path(__file__).resolve().parents[1]
#: the modules whose names the docs use besides the package root (docs/python-api.md: `biaslab.views`)
PUBLIC_MODULES = ("biaslab", "biaslab.views", "biaslab.warehouse", "biaslab.warehouse.handle", "biaslab.errors",
                  "biaslab.metrics.studies", "biaslab.metrics.registry", "biaslab.runners.collect",
                  "biaslab.runners.load")


def _documented_calls() -> set[str]:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {m for path in texts for m in re.findall(r"\bbiaslab\.([a-z_]+)\(", path.read_text(encoding="utf-8"))}


def test_every_documented_call_is_in_the_package_all():
    calls = _documented_calls()
    assert {"open", "contextuality", "load", "collect"} <= calls
    assert calls <= set(biaslab.__all__), sorted(calls - set(biaslab.__all__))


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_each_public_module_declares_all_and_every_name_exists(module):
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    assert names, f"{module} has no __all__"
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(mod, name) is not None, (module, name)


def test_the_facade_load_and_collect_are_the_library_functions_the_cli_calls():
    from biaslab.runners import collect, load

    assert biaslab.load is load.load and biaslab.load_user is load.load_user
    assert biaslab.collect is collect.collect_dataset
    source = (ROOT / "biaslab" / "cli" / "data_cmd.py").read_text(encoding="utf-8")
    assert "transaction()" not in source and "from ..runners.load import load" in source
