"""Every present dataset, loaded into one warehouse with `biaslab data load`, twice: the issue's counts per dataset,
and the second pass adds nothing."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.loaders import datasets
from biaslab.warehouse import Warehouse

#: Issue 3 stimulus counts with default options (negation: 300 x 4 when a user supplies it; winoqueer: none fixed).
COUNTS = {"winopron": 3600, "winogender": 240, "winobias": 1584, "gece-winobias": 771, "gece-winogender": 178,
          "genderlex": 837, "genderlex-person": 837, "genderlex-someone": 837, "misgendered": 3000, "tango": 1920,
          "ruff": 7200, "negation-examples": 24, "negation": 1200, "winoqueer": None,
          "crows-pairs": 2 * 1508, "crows-pairs-revised": 2 * 1677, "bbq": "the dataset card's per category",
          "decodingtrust": 3 * 1152, "holistic-bias": 8 * 26 * 32}
#: loader options of this test: HolisticBias's 549,120 sentences (counted in tests/loaders/test_holistic_bias.py)
#: loaded here one axis, nonce's 8 descriptors, so that loading every dataset twice stays quick
OPTIONS = {"holistic-bias": ["--option", "axes=nonce"]}


def expected(name: str, data_dir) -> int | None:
    """The count of `name` in this copy: BBQ's is the dataset card's count of each category file present (6 of 11
    here; `biaslab data fetch bbq` gets the others)."""
    if name != "bbq":
        return COUNTS[name]
    from biaslab.loaders.bbq import CATEGORIES, data_file

    folder = datasets()["bbq"].path(data_dir)
    return sum(n for category, (_, n) in CATEGORIES.items() if (folder / data_file(category)).is_file())


def load(name: str, db: str, data_dir) -> tuple[int, int, int]:
    """(read, new, total in warehouse) from the command's one-line report."""
    result = CliRunner().invoke(biaslab, ["data", "load", name, "--db", db, "--data-dir", str(data_dir),
                                          *OPTIONS.get(name, [])])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()  # a dataset missing optional files says so first (BBQ)
    m = re.fullmatch(rf"{re.escape(name)}: (\d+) stimuli read, (\d+) new; (\d+) {re.escape(name)} stimuli in .*",
                     lines[-1])
    assert m, result.output
    return int(m[1]), int(m[2]), int(m[3])


def counts(db: str) -> dict[str, tuple[int, int]]:
    with Warehouse.open(db) as wh:
        rows = wh.con.execute("SELECT dataset, count(*), count(DISTINCT stimulus_id) FROM stimuli "
                              "WHERE upstream_version IS NOT NULL AND upstream_version <> '' GROUP BY 1").fetchall()
    return {d: (n, distinct) for d, n, distinct in rows}


def test_all_present_datasets_twice_into_one_warehouse(data_dir, tmp_path):
    known = datasets()
    assert set(COUNTS) == set(known), "a dataset was added or renamed: give its count here"
    present = sorted(n for n, info in known.items() if info.present(data_dir))
    if not present:
        pytest.skip(f"no dataset present in {data_dir}")
    db = str(tmp_path / "all.duckdb")

    first = {name: load(name, db, data_dir) for name in present}
    for name, (read, new, total) in first.items():
        if expected(name, data_dir) is not None:
            assert read == expected(name, data_dir), name
        assert new == read == total, name  # datasets never share stimuli
    after_first = counts(db)
    assert after_first == {name: (read, read) for name, (read, _, _) in first.items()}  # ids unique, versions set

    second = {name: load(name, db, data_dir) for name in present}
    assert {n: (r, new, t) for n, (r, new, t) in second.items()} == {n: (r, 0, t) for n, (r, _, t) in first.items()}
    assert counts(db) == after_first
    with Warehouse.open(db) as wh:
        assert wh.count("stimuli") == sum(read for read, _, _ in first.values())
