"""A delimited file read a block at a time (`readers.stream_table`, issue 45) gives exactly what reading it whole
(`readers.read_table`) gives: the same records with the same line numbers, and the same one-line refusals, whatever
the block size, also when a quoted field, a CRLF or a multi-byte character is cut by a block's end."""

from __future__ import annotations

import pytest

from biaslab.loaders import readers
from biaslab.loaders.errors import DataError
from biaslab.loaders.readers import LineStream, load_text, read_table, stream_table

GOOD = ('\ufeffitem_id,text,note\r\n'
        'i1,"A quoted, text","spans\nthree\nlines"\r\n'
        '\n'
        'i2,Ünïcödé text — with dashes,plain\n'
        'i3,"quote "" inside",\r\n'
        'i4,"last, ""one""","two\r\nlines"\n')

BAD = {
    "stray quote": 'item_id,text\ni1,ok\ni2,a "stray" quote\n',
    "unterminated": 'item_id,text\ni1,ok\ni2,"never closed\ni3,more\ni4,more\n',
    "after quote": 'item_id,text\ni1,"closed"x,\n',
    "short row": 'item_id,text,note\ni1,a,b\ni2,a\n',
    "duplicate": 'item_id,text\ni1,a\ni2,b\n\ni1,a\n',
    "cut at end": 'item_id,text\ni1,a\ni2,"b\nc"',
    "bare CR": 'item_id,text\ni1,a\ri2,b\n',
    "twice in header": 'item_id,text,item_id\ni1,a,b\n',
    "missing column": 'item_id,note\ni1,a\n',
    "empty": '  \n\n',
}


def _whole(path):
    try:
        return [(r.line, r.values) for r in read_table(path, ("item_id", "text"))]
    except DataError as exc:
        return str(exc)


def _streamed(path):
    try:
        return [(r.line, r.values) for r in stream_table(path, ("item_id", "text"))]
    except DataError as exc:
        return str(exc)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 7, 16, 1 << 22])
def test_streamed_records_equal_whole_file_records(tmp_path, monkeypatch, block):
    path = tmp_path / "t.csv"
    path.write_bytes(GOOD.encode("utf-8"))
    whole = _whole(path)
    assert [line for line, _ in whole] == [2, 6, 7, 8]  # rows start where their first line is
    assert whole[0][1] == {"item_id": "i1", "text": "A quoted, text", "note": "spans\nthree\nlines"}
    assert whole[3][1]["note"] == "two\nlines"  # CRLF is normalized, inside quoted fields too
    monkeypatch.setattr(readers, "BLOCK_BYTES", block)
    assert _streamed(path) == whole


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("block", [1, 4, 1 << 22])
def test_streamed_refusals_equal_whole_file_refusals(tmp_path, monkeypatch, case, block):
    path = tmp_path / "t.csv"
    path.write_bytes(BAD[case].encode("utf-8"))
    whole = _whole(path)
    assert isinstance(whole, str), whole
    monkeypatch.setattr(readers, "BLOCK_BYTES", block)
    assert _streamed(path) == whole or (case == "empty" and "file is empty" in _streamed(path)), case


@pytest.mark.parametrize("block", [1, 3, 1 << 22])
def test_invalid_utf8_is_named_at_its_line_and_offset(tmp_path, monkeypatch, block):
    path = tmp_path / "t.csv"
    path.write_bytes(b"item_id,text\ni1,ok\ni2,caf\xe9\n")
    with pytest.raises(DataError) as whole:
        load_text(path)
    monkeypatch.setattr(readers, "BLOCK_BYTES", block)
    with pytest.raises(DataError) as streamed:
        list(stream_table(path, ("item_id", "text")))
    assert str(streamed.value) == str(whole.value)
    assert ":3:" in str(whole.value) and "offset 25" in str(whole.value)


def test_line_stream_keeps_memory_to_its_blocks_and_refuses_a_line_without_end(tmp_path, monkeypatch):
    path = tmp_path / "one-line.csv"
    path.write_bytes(b"item_id,text\n" + b"x" * 300_000)  # no line break: never decoded whole
    monkeypatch.setattr(readers, "BLOCK_BYTES", 4096)
    stream = LineStream(path, max_line=50_000)
    with pytest.raises(DataError, match=r"one-line.csv:2: line longer than 50,000 characters"):
        for _ in stream.blocks():
            pass
    lines = [line for block in LineStream(path).blocks() for line in block]
    assert lines == ["item_id,text", "x" * 300_000]


def test_line_stream_gives_the_lines_and_sha_of_reading_whole(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_bytes(GOOD.encode("utf-8") + b"no final break")
    text = load_text(path)
    monkeypatch.setattr(readers, "BLOCK_BYTES", 5)
    stream = LineStream(path)
    lines = [line for block in stream.blocks() for line in block]
    assert (lines, stream.terminated) == text.lines()
    assert stream.sha256 == text.sha256
