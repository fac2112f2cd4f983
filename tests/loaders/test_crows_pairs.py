"""CrowS-Pairs, both versions (issue 54, item 2): two stimuli per pair, the upstream quirks kept, and bad pairs refused
in one line naming file, line and field, with nothing stored."""

from __future__ import annotations

import csv
import shutil

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.loaders import get
from biaslab.loaders.crows_pairs import ORIGINAL, REVISED


@pytest.mark.parametrize("name,file,pairs,delimiter,types", [
    ("crows-pairs", ORIGINAL, 1508, ",", 9), ("crows-pairs-revised", REVISED, 1677, "\t", 10)])
def test_two_stimuli_per_pair_as_upstream_has_them(dataset_folder, data_dir, name, file, pairs, delimiter, types):
    folder = dataset_folder("crows_pairs")
    stimuli = get(name).load(data_dir)
    assert len(stimuli) == 2 * pairs and len({s.stimulus_id for s in stimuli}) == 2 * pairs
    with open(folder / file, encoding="utf-8", newline="") as f:  # independent reading: the csv module
        rows = list(csv.DictReader(f, delimiter=delimiter))
    assert len(rows) == pairs
    by_pair = {}
    for s in stimuli:
        by_pair.setdefault(s.item_id, {})[s.attrs["sentence"]] = s
    for row in rows:
        pair = by_pair[row[""]]
        assert pair["more"].text == row["sent_more"] and pair["less"].text == row["sent_less"]
        assert pair["more"].attrs["direction"] == row["stereo_antistereo"]
        assert pair["less"].attrs["bias_type"] == row["bias_type"]
    assert len({s.attrs["bias_type"] for s in stimuli}) == types
    flagged = sorted(s.item_id for s in stimuli if s.attrs.get("shares_no_word"))
    # the revised set's pair 1310 pairs an English sentence with a French one (upstream, kept and flagged)
    assert flagged == ([] if name == "crows-pairs" else ["1310", "1310"])
    if name == "crows-pairs":  # a line break inside a quoted sentence, upstream
        assert by_pair["1293"]["less"].text == "Bob was denied because he was white\n."


@pytest.mark.parametrize("edit,field,message", [
    (lambda r: r.update(sent_less="Completely different words here"), "sent_less", "shares no word"),
    (lambda r: r.update(sent_less=r["sent_more"]), "sent_less", "the two sentences are the same"),
    (lambda r: r.update(stereo_antistereo="pro"), "stereo_antistereo", "must be stereo or antistereo"),
])
def test_bad_pair_is_one_line_and_nothing_is_stored(dataset_folder, tmp_path, edit, field, message):
    folder = dataset_folder("crows_pairs")
    copy = tmp_path / "data" / "crows_pairs"
    copy.mkdir(parents=True)
    with open(folder / ORIGINAL, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        rows, header = list(reader)[:20], reader.fieldnames
    edit(rows[6])
    with open(copy / ORIGINAL, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    shutil.copytree(folder / "reference", copy / "reference")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(biaslab, ["data", "load", "crows-pairs", "--db", str(db), "--data-dir",
                                          str(tmp_path / "data"), "--accept-modified"])
    output = result.output.strip()
    assert result.exit_code == 1 and len(output.splitlines()) == 1, output
    assert output.startswith(f"Error: {copy / ORIGINAL}:8: field '{field}': ") and message in output, output
    assert not db.exists()


def test_a_nul_in_a_sentence_is_refused_naming_the_line(dataset_folder, tmp_path):
    """The CrowS-Pairs loader stored a NUL inside a sentence (issue 67, item 9): refused as every loader refuses it."""
    folder = dataset_folder("crows_pairs")
    copy = tmp_path / "data" / "crows_pairs"
    copy.mkdir(parents=True)
    lines = (folder / ORIGINAL).read_text(encoding="utf-8").splitlines(keepends=True)[:20]
    lines[5] = lines[5].replace(" ", " \x00", 1)
    (copy / ORIGINAL).write_text("".join(lines), encoding="utf-8")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(biaslab, ["data", "load", "crows-pairs", "--db", str(db), "--data-dir",
                                          str(copy.parent), "--accept-modified"])
    assert result.exit_code == 1 and f"{copy / ORIGINAL}:6: a NUL character" in result.output, result.output
    assert "Traceback" not in result.output and not db.exists()


def test_an_empty_pair_id_names_its_column(dataset_folder, tmp_path):
    """Issue 67, item 11: "empty value" did not say which column (the pair id's has no name in the file)."""
    folder = dataset_folder("crows_pairs")
    copy = tmp_path / "data" / "crows_pairs"
    copy.mkdir(parents=True)
    lines = (folder / ORIGINAL).read_text(encoding="utf-8").splitlines(keepends=True)[:20]
    lines[4] = "," + lines[4].split(",", 1)[1]
    (copy / ORIGINAL).write_text("".join(lines), encoding="utf-8")
    result = CliRunner().invoke(biaslab, ["data", "load", "crows-pairs", "--db", str(tmp_path / "w.duckdb"),
                                          "--data-dir", str(copy.parent), "--accept-modified"])
    assert result.exit_code == 1 and f"{copy / ORIGINAL}:5" in result.output
    assert "the first, unnamed column: the pair id" in result.output and "empty pair id" in result.output
