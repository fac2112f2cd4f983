"""`biaslab data fetch`: commit-pinned sources, sha256 checks, all-or-nothing installation, offline failure.

The network is replaced by a downloader that serves the bytes of the local copies in the data dir (the upstream
files themselves, or the upstream zip for WinoPron / RUFF), so the whole path (download, zip decryption, checksum,
move into place) runs offline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import re
import time
import urllib.error
from pathlib import Path

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.loaders import datasets, get
from biaslab.loaders.fetch import FetchError, fetch
from biaslab.loaders.readers import sha256_file

#: Issue 3 counts for the fetchable datasets (default options).
COUNTS = {"winopron": 3600, "winogender": 240, "winobias": 1584, "gece-winobias": 771, "gece-winogender": 178,
          "genderlex": 837, "genderlex-person": 837, "genderlex-someone": 837, "misgendered": 3000, "tango": 1920,
          "ruff": 7200, "crows-pairs": 3016, "crows-pairs-revised": 3354, "bbq": 58492, "decodingtrust": 3456,
          "holistic-bias": 549_120}
FETCHABLE = sorted(COUNTS)
RAW_URL = re.compile(r"^https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+$")


def local_sources(name: str, data_dir: Path) -> dict[str, Path]:
    """URL -> the local copy holding the same bytes (a zip member's URL is the zip: `<folder>/data.zip`)."""
    info = get(name)
    folder = data_dir / info.folder
    return {src.url: (folder / "data.zip" if src.member else (folder / rel).resolve())
            for rel, src in info.sources.items()}


class FakeNet:
    """A downloader serving local bytes by URL; records the URLs asked for; can fail or tamper on demand."""

    def __init__(self, sources: dict[str, Path], fail_at: int | None = None, tamper: str | None = None):
        self.sources, self.fail_at, self.tamper, self.calls = sources, fail_at, tamper, []

    def __call__(self, url: str, out, *, timeout: float) -> None:
        self.calls.append(url)
        data = self.sources[url].read_bytes()
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            out.write(data[: len(data) // 2])  # half a file, then the connection drops
            raise urllib.error.URLError(ConnectionResetError("connection reset by peer"))
        if url == self.tamper:
            data = data[:-1] + bytes([data[-1] ^ 1])
        out.write(data)


def tree(root: Path) -> dict[str, str]:
    """Every file under root (relative path -> sha256), dot-folders included."""
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def need_local(name: str, data_dir: Path) -> dict[str, Path]:
    sources = local_sources(name, data_dir)
    absent = [str(p) for p in sources.values() if not p.is_file()]
    if absent:
        pytest.skip(f"local copy absent: {absent[0]}")
    return sources


def test_every_fetchable_file_has_a_pinned_commit_url_and_checksum():
    known = datasets()
    assert {n for n, i in known.items() if i.sources} == set(FETCHABLE)
    for name, info in known.items():
        if not info.sources:
            assert info.no_source, f"{name}: neither sources nor a no_source reason"
            continue
        assert set(info.files) <= set(info.sources), name
        for rel, src in info.sources.items():
            assert RAW_URL.match(src.url), (name, src.url)
            assert re.fullmatch(r"[0-9a-f]{64}|git-blob:[0-9a-f]{40}", info.pinned_sha256(rel) or ""), (name, rel)
            if src.member:
                assert src.password and re.fullmatch(r"[0-9a-f]{64}", src.archive_sha256 or ""), (name, rel)
    assert {n for n, i in known.items() if i.no_source} == {"negation", "negation-examples", "winoqueer"}


@pytest.mark.parametrize("name", FETCHABLE)
def test_fetch_from_local_copies_loads_and_verifies(name, data_dir, tmp_path):
    net = FakeNet(need_local(name, data_dir))
    target = tmp_path / "data"
    info = get(name)
    result = fetch(info, target, downloader=net)
    assert all(RAW_URL.match(u) for u in net.calls)
    assert len(net.calls) == len(set(net.calls)) == len({s.url for s in info.sources.values()})  # a zip once
    assert set(info.verify(target).values()) == {"ok"}
    assert sorted(result.fetched) == sorted(info.sources)
    # byte-identical to the local copies (zip members included), nothing else written, no temp folder left
    written = tree(target)
    expected = {posixpath.normpath(f"{info.folder}/{rel}"): sha256_file((data_dir / info.folder / rel).resolve())
                for rel in info.sources}
    assert written == expected
    assert len(info.load(target)) == COUNTS[name]
    # a second fetch downloads nothing
    again = fetch(info, target, downloader=FakeNet({}))
    assert again.fetched == () and sorted(again.present) == sorted(info.sources)


def test_bbq_files_pinned_by_git_blob_id_are_fetched_and_checked(data_dir, tmp_path):
    """BBQ's five large category files are pinned by their git blob ids at the commit (their sha256 was never seen
    here): a file served with those bytes is installed and loads, one byte changed is refused, and nothing is
    written. Shown on the present files, with Age.jsonl pinned by its blob id as the large ones are."""
    from biaslab.loaders.verify import git_blob_id

    info = get("bbq")
    folder = data_dir / info.folder
    present = {rel: pin for rel, pin in info.files.items() if (folder / rel).is_file()}
    if "data/Age.jsonl" not in present:
        pytest.skip(f"local copy absent: {folder / 'data/Age.jsonl'}")
    age = "data/Age.jsonl"
    present[age] = "git-blob:" + git_blob_id((folder / age).read_bytes())
    assert present[age] == "git-blob:5c5e7586163b869fe029e77e63716f2026e4ae08"  # `git hash-object` of upstream's
    subset = dataclasses.replace(info, files=present, sources={rel: info.sources[rel] for rel in present})
    sources = {subset.sources[rel].url: (folder / rel).resolve() for rel in present}
    with pytest.raises(FetchError, match=r"git blob id mismatch for data/Age.jsonl.*nothing was written"):
        fetch(subset, tmp_path / "bad", downloader=FakeNet(sources, tamper=subset.sources[age].url))
    assert not (tmp_path / "bad").exists()
    result = fetch(subset, tmp_path / "data", downloader=FakeNet(sources))
    assert sorted(result.fetched) == sorted(present)
    assert set(subset.verify(tmp_path / "data").values()) == {"ok"}
    loaded = subset.load_verified(tmp_path / "data")
    assert len(loaded.stimuli) == 11956 and {c.status for c in loaded.files} == {"ok"}
    # a copy whose bytes differ from the blob id is refused when loaded, naming both ids
    edited = (folder / age).read_bytes().replace(b"grandfather", b"grandmother", 1)
    (tmp_path / "data" / "bbq" / age).write_bytes(edited)
    with pytest.raises(ValueError, match=r"Age.jsonl: differs from the pinned upstream file \(expected git blob "
                                         r"5c5e7586163b"):
        subset.load(tmp_path / "data")


def test_failure_midway_leaves_nothing_behind(data_dir, tmp_path):
    net = FakeNet(need_local("winobias", data_dir), fail_at=5)
    target = tmp_path / "deep" / "data"
    with pytest.raises(FetchError) as err:
        fetch(get("winobias"), target, downloader=net)
    message = str(err.value)
    assert "\n" not in message and net.calls[4] in message and "connection reset" in message
    assert "nothing was written" in message
    assert not (tmp_path / "deep").exists()  # the folders it created are gone too

    # into an existing data dir with a partly filled dataset folder: existing files untouched, nothing added
    target.mkdir(parents=True)
    (target / "other.txt").write_text("keep me")
    before = tree(target)
    with pytest.raises(FetchError):
        fetch(get("winobias"), target, downloader=FakeNet(net.sources, fail_at=3))
    assert tree(target) == before


def test_failure_with_an_existing_shared_folder_keeps_it_unchanged(data_dir, tmp_path):
    sources = need_local("gece-winobias", data_dir) | need_local("genderlex", data_dir)
    target = tmp_path / "data"
    fetch(get("gece-winobias"), target, downloader=FakeNet(sources))
    before = tree(target)
    with pytest.raises(FetchError):
        fetch(get("genderlex"), target, downloader=FakeNet(sources, fail_at=1))
    assert tree(target) == before
    fetch(get("genderlex"), target, downloader=FakeNet(sources))  # into the existing folder, file by file
    assert set(tree(target)) == {"genderlex_gece/gece_data/winobias.csv", "genderlex_gece/gece_data/genderLex.csv"}
    assert len(get("genderlex").load(target)) == 837 and len(get("gece-winobias").load(target)) == 771


def test_wrong_checksum_is_refused(data_dir, tmp_path):
    sources = need_local("winogender", data_dir)
    info = get("winogender")
    bad_url = info.sources["occupations-stats.tsv"].url
    target = tmp_path / "data"
    with pytest.raises(FetchError, match=r"sha256 mismatch.*nothing was written") as err:
        fetch(info, target, downloader=FakeNet(sources, tamper=bad_url))
    assert bad_url in str(err.value) and "occupations-stats.tsv" in str(err.value)
    assert not target.exists()

    # a pinned value that does not match the (real) upstream bytes is refused the same way
    wrong_pin = dataclasses.replace(info, files={**info.files, "templates.tsv": "0" * 64})
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch(wrong_pin, target, downloader=FakeNet(sources))
    assert not target.exists()


def test_zip_archive_checksum_and_password_are_checked(data_dir, tmp_path):
    sources = need_local("winopron", data_dir)
    info = get("winopron")
    member = info.sources["new_templates.tsv"]
    for broken, pattern in ((dataclasses.replace(member, password="wrong"), "cannot extract"),
                            (dataclasses.replace(member, archive_sha256="f" * 64), "sha256 mismatch for the zip"),
                            (dataclasses.replace(member, member="nope.tsv"), "no member 'nope.tsv'")):
        changed = dataclasses.replace(info, sources={**info.sources, "new_templates.tsv": broken})
        with pytest.raises(FetchError, match=pattern):
            fetch(changed, tmp_path / "data", downloader=FakeNet(sources))
        assert not (tmp_path / "data").exists()


def test_present_file_with_other_content_needs_force(data_dir, tmp_path):
    sources = need_local("tango", data_dir)
    info = get("tango")
    target = tmp_path / "data"
    (target / "tango").mkdir(parents=True)
    (target / "tango" / "misgendering_prompts.csv").write_text("edited locally\n")
    with pytest.raises(FetchError, match="does not match the pinned sha256.*--force"):
        fetch(info, target, downloader=FakeNet(sources))
    assert (target / "tango" / "misgendering_prompts.csv").read_text() == "edited locally\n"
    fetch(info, target, downloader=FakeNet(sources), force=True)
    assert info.verify(target) == {"misgendering_prompts.csv": "ok"}
    assert sorted(p.name for p in target.iterdir()) == ["tango"]


def test_datasets_without_a_public_source_say_so(tmp_path):
    for name, words in (("negation", "no public copy"), ("winoqueer", "no pinned upstream commit"),
                        ("negation-examples", "typed in")):
        result = CliRunner().invoke(biaslab, ["data", "fetch", name, "--data-dir", str(tmp_path / "d")])
        assert result.exit_code != 0
        assert len(result.output.strip().splitlines()) == 1 and words in result.output, result.output
    assert not (tmp_path / "d").exists()


def test_cli_offline_fails_fast_with_one_line_naming_the_url(tmp_path):
    """Real network: on this machine (no internet) DNS fails at once; an online machine really fetches."""
    target = tmp_path / "data"
    start = time.monotonic()
    result = CliRunner().invoke(biaslab, ["data", "fetch", "winogender", "--data-dir", str(target), "--timeout", "5"])
    elapsed = time.monotonic() - start
    if result.exit_code == 0:  # online: the real upstream files must verify
        assert set(get("winogender").verify(target).values()) == {"ok"}
        return
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    url = get("winogender").sources["templates.tsv"].url
    assert lines[0].startswith("Error: fetch winogender: ") and url in lines[0] and "nothing was written" in lines[0]
    assert elapsed < 15
    assert not target.exists()


def test_timeout_is_configurable_and_validated(tmp_path, monkeypatch):
    seen = []

    def fake(url, out, *, timeout):
        seen.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr("biaslab.loaders.fetch.download", fake)
    result = CliRunner().invoke(biaslab, ["data", "fetch", "tango", "--data-dir", str(tmp_path), "--timeout", "0.5"])
    assert result.exit_code == 1 and seen == [0.5] and "timed out after 0.5 s" in result.output
    monkeypatch.setenv("BIASLAB_FETCH_TIMEOUT", "7")
    CliRunner().invoke(biaslab, ["data", "fetch", "tango", "--data-dir", str(tmp_path)])
    assert seen[-1] == 7.0
    bad = CliRunner().invoke(biaslab, ["data", "fetch", "tango", "--data-dir", str(tmp_path), "--timeout", "0"])
    assert bad.exit_code == 2
    assert list(tmp_path.iterdir()) == []
