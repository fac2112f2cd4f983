"""Spreadsheet-safe cells (OWASP CSV injection): what is neutralized, and that restore undoes it exactly."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from biaslab.loaders.errors import DataError
from biaslab.loaders.readers import read_table
from biaslab.loaders.sheet_cells import TRIGGERS, neutralize, restore


@pytest.mark.parametrize("text, safe", [
    ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"),
    ("+1", "'+1"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("'=1", "''=1"),  # an apostrophe the text had is kept on the way back
    ("she said", "she said"), ("", ""), ("'quoted'", "'quoted'"), ("a=b", "a=b"),
])
def test_neutralize_prefixes_formula_cells_only(text, safe):
    assert neutralize(text) == safe
    assert restore(safe) == text


def test_every_trigger_is_covered():
    assert TRIGGERS == "=+-@\t\r"
    assert all(neutralize(c + "x")[0] == "'" for c in TRIGGERS)


@given(st.text(alphabet=st.sampled_from(list("'=+-@\t\rab ")), max_size=8))
def test_restore_inverts_neutralize(text):
    assert restore(neutralize(text)) == text
    assert neutralize(text)[:1] not in set(TRIGGERS)  # never starts with a formula character


def test_duplicated_header_column_is_refused(tmp_path):
    path = tmp_path / "sheet.csv"
    path.write_text("sample_id,label,label\n1,correct,misgendering\n")
    with pytest.raises(DataError, match=r"sheet.csv:1.*'label' appears twice in the header \(columns 2 and 3\)"):
        read_table(path, ["sample_id", "label"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_fifo_and_directory_are_named_not_read(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"pipe.csv: not a regular file \(a FIFO\)"):
        read_table(fifo, ["a"])  # returns at once: a FIFO is never opened
    with pytest.raises(DataError, match=r"not a regular file \(a directory\)"):
        read_table(tmp_path, ["a"])
    with pytest.raises(DataError, match="file not found"):
        read_table(tmp_path / "absent.csv", ["a"])
