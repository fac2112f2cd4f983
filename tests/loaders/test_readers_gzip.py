"""`load_text` reads a .gz file by the same rules as the plain file (the one decoder of the loaders and imports)."""

from __future__ import annotations

import gzip
import hashlib

import pytest

from biaslab.loaders.errors import DataError
from biaslab.loaders.readers import load_text, read_text


def test_a_gzip_file_reads_as_its_plain_text(tmp_path):
    raw = "\ufeffid,text\r\n1,caf\u00e9\r\n2,two\n".encode()
    packed = gzip.compress(raw)
    (tmp_path / "a.csv").write_bytes(raw)
    (tmp_path / "a.csv.gz").write_bytes(packed)
    text = load_text(tmp_path / "a.csv.gz")
    assert text.text == read_text(tmp_path / "a.csv") == "id,text\n1,caf\u00e9\n2,two\n"
    assert text.sha256 == hashlib.sha256(packed).hexdigest()  # the bytes as stored


@pytest.mark.parametrize("content, message", [
    (b"not gzip at all", "cannot be read as gzip (Not a gzipped file"),
    (gzip.compress(b"id\n1\n")[:-6], "cannot be read as gzip (Compressed file ended before the end-of-stream"),
    (gzip.compress(b"  \n"), "file is empty"),
    (gzip.compress(b"id\n\xff\n"), "not valid UTF-8 (byte 0xff at offset 3)"),
])
def test_a_damaged_or_empty_gzip_file_is_named(tmp_path, content, message):
    path = tmp_path / "b.jsonl.gz"
    path.write_bytes(content)
    with pytest.raises(DataError) as info:
        read_text(path)
    assert str(path) in str(info.value) and message in str(info.value)
