"""Misersky norm matching: biaslab's rule (234 rated WinoPron templates) and the rule that reproduces the
contextual-invariance paper's 279 (substring matching after the inflections and overrides)."""

from __future__ import annotations

import csv

import pytest

from biaslab.loaders.misersky import RULES, match_noun
from biaslab.loaders.winopron import misersky_matches, rated_templates

#: nouns the paper's rule adds: the norm keys each occurs in, read off the norms by hand
PAPER_EXTRA = {
    "administrator": ["database administrators"],
    "advisor": ["tax advisors"],
    "educator": ["child educators"],
    "guest": ["hotel guests"],
    "inspector": ["customs inspectors", "police inspectors", "ticket inspectors"],
    "instructor": ["aerobics instructors", "dance instructors", "driving instructors", "exercise instructors"],
    "planner": ["wedding planners"],
    "psychologist": ["clinical psychologists", "counseling psychologists", "educational psychologists",
                     "forensic psychologists"],
    "resident": ["presidents"],  # an accident of spelling, needed for the paper's count
    "specialist": ["computer specialists"],
    "teacher": ["head teachers", "infant teachers", "kindergarten teachers", "nursery teachers",
                "primary school teachers"],
    "therapist": ["occupational therapists", "physiotherapists", "speech therapists"],
    "visitor": ["health visitors"],
}


@pytest.fixture(scope="module")
def english(data_dir):
    if not (data_dir / "winopron").is_dir() or not (data_dir / "misersky_norms").is_dir():
        pytest.skip(f"dataset folders winopron/ and misersky_norms/ are needed under {data_dir}")
    with open(data_dir / "misersky_norms" / "misersky_norms_clean.csv", encoding="utf-8", newline="") as f:
        return {r["occupation"]: float(r["mean_gender_rating"]) for r in csv.DictReader(f)
                if r["language"] == "english"}


def test_rated_template_counts_of_both_rules(data_dir, english):
    assert rated_templates(data_dir) == (234, 360)
    assert rated_templates(data_dir, "paper") == (279, 360)  # the paper's count


def test_paper_rule_adds_exactly_the_substring_matches_with_the_mean_rating(data_dir, english):
    ours, ours_unmatched = misersky_matches(data_dir)
    paper, paper_unmatched = misersky_matches(data_dir, "paper")
    assert {n: m for n, m in paper.items() if n in ours} == ours  # nothing the default rule matched changes
    added = {n: m for n, m in paper.items() if n not in ours}
    assert {n: m.key.split(" | ") for n, m in added.items()} == PAPER_EXTRA
    for noun, keys in PAPER_EXTRA.items():
        assert added[noun].rule == "substring"
        assert added[noun].rating == pytest.approx(sum(english[k] for k in keys) / len(keys), abs=1e-15)
    assert set(ours_unmatched) - set(paper_unmatched) == set(PAPER_EXTRA)


def test_rule_on_a_small_table():
    norms = {"head teachers": 0.6, "nursery teachers": 0.9, "nurses": 0.8}
    assert match_noun("teacher", norms) is None
    got = match_noun("teacher", norms, rule="paper")
    assert (got.key, got.rule) == ("head teachers | nursery teachers", "substring")
    assert got.rating == pytest.approx(0.75)
    assert match_noun("nurse", norms, rule="paper").rule == "inflection"  # the inflections come first
    assert RULES == ("biaslab", "paper")
    with pytest.raises(ValueError, match="norm matching rule must be one of biaslab, paper"):
        match_noun("nurse", norms, rule="loose")
