"""The misgendering views read the stimuli that declare a pronoun set, of the built-in datasets, without naming the
datasets (issue 40, item 3): on every built-in dataset here, those stimuli are exactly the misgendering study's."""

from __future__ import annotations

import pytest

from biaslab.errors import BiaslabError
from biaslab.loaders import registry
from biaslab.metrics.registry import get_study


def test_only_the_misgendering_datasets_declare_a_pronoun_set(data_dir):
    declaring, loaded = set(), set()
    for name, info in registry.datasets().items():
        try:
            stimuli = info.load(data_dir)
        except BiaslabError:  # a folder absent here (negation, winoqueer): nothing to check
            continue
        loaded.add(name)
        if any(s.pronoun_set is not None for s in stimuli):
            declaring.add(name)
    if not {"misgendered", "ruff", "winopron"} <= loaded:
        pytest.skip("the misgendering and WinoPron folders are needed")
    assert declaring == set(get_study("misgendering").dataset_names) & loaded
    assert declaring >= {"misgendered", "ruff"}
