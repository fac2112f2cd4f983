"""Issue 45, item 7: `biaslab sql --memory-limit` bounds the whole command, not only DuckDB's buffers. DuckDB does
not count the strings a query builds against its memory_limit (20 values of 10^9 characters were built under a
2 GB limit), nor does it count Python's copies of what is fetched and printed; `readonly.memory_cap` caps the
process's writable memory at the limit plus `PRINT_MARGIN`, so such a query ends in one line, in every format."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from biaslab.warehouse import Warehouse
from biaslab.warehouse.readonly import PRINT_MARGIN, memory_cap, size_bytes

OUTER_LIMIT = 3 * 2**30  # a guard for the machine, should the command not bound itself (address space, hard)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("sqlmem") / "w.duckdb"
    with Warehouse.open(path):
        pass
    return path


def _run(db, query: str, *args: str) -> tuple[int, str, str, float]:
    """Exit status, stdout, stderr and peak resident MiB of `biaslab sql` in a child process."""
    script = ("import resource, subprocess, sys\n"
              f"limit = {OUTER_LIMIT}\n"
              "p = subprocess.run(sys.argv[1:], capture_output=True, text=True, preexec_fn=lambda: "
              "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))\n"
              "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
              "sys.stdout.write(p.stdout[:2000] + '\\x00' + p.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script, sys.executable, "-m", "biaslab.cli.biaslab_entry", "sql",
                           query, "--db", str(db), *args], capture_output=True, text=True, check=True, timeout=300)
    status, rest = done.stdout.split("\n", 1)
    code, peak = map(int, status.split())
    out, err = rest.split("\x00", 1)
    return code, out, err, peak / 1024


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_values_beyond_the_limit_end_in_one_line_within_it(db, fmt):
    code, out, err, peak = _run(db, "select repeat('x', 100000000) as v from range(20)", "--memory-limit", "300MB",
                                "--format", fmt)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("Error: out of memory"), (code, err)
    assert "--memory-limit" in lines[0] and "Traceback" not in err
    assert peak < (300e6 + PRINT_MARGIN) / 2**20 + 300, peak  # the limit, the margin, and Python's own start
    assert out == ""  # 2 GB of values: not one was printed


def test_a_result_within_the_limit_prints_whole(db):
    code, out, err, _ = _run(db, "select i, repeat('y', 1000000) as v from range(60) t(i) order by i",
                             "--memory-limit", "300MB", "--format", "json")
    assert code == 0, err
    assert out.startswith('[\n{"i": 0, "v": "yyy')


def test_the_cap_is_lifted_after_and_counts_writable_memory_only():
    soft_before = resource.getrlimit(resource.RLIMIT_DATA)
    with memory_cap(64 * 2**20) as cap:
        if cap is None:
            pytest.skip("no RLIMIT_DATA cap outside Linux")
        with pytest.raises(MemoryError):
            bytearray(128 * 2**20)
        kept = bytearray(16 * 2**20)  # within the cap
    assert resource.getrlimit(resource.RLIMIT_DATA) == soft_before
    assert len(kept) == 16 * 2**20 and len(bytearray(128 * 2**20)) == 128 * 2**20


@pytest.mark.parametrize("text, expected", [("4GB", 4 * 10**9), ("512 MiB", 512 * 2**20), ("1.8 GiB", int(1.8 * 2**30)),
                                            ("300MB", 300 * 10**6), ("abc", None), ("", None)])
def test_sizes_as_duckdb_says_them(text, expected):
    assert size_bytes(text) == expected


def test_json_written_record_by_record_is_one_valid_document(db):
    code, out, err, _ = _run(db, "select 1 as a union all select 2 order by a", "--format", "json")
    assert code == 0 and json.loads(out) == [{"a": 1}, {"a": 2}], err
