"""`biaslab data fetch`: download a dataset's pinned upstream files into `<data-dir>/<folder>/`.

Each `DatasetInfo.sources` maps a local relative path (as in `DatasetInfo.files`; "../other/x" reaches a sibling
folder, e.g. WinoPron's Misersky norms) to an `Upstream`: a commit-pinned raw GitHub URL, optionally a member of a
(password-protected) zip at that URL. Every file is checked against its pinned sha256 (or its git blob id at the
pinned commit where only that is known: `verify.pin_matches`), and a zip against the pinned sha256 of the archive,
before anything is put in place.

All or nothing: everything is downloaded into a temporary folder next to each target folder
(`<data-dir>/.<folder>.fetch-XXXX/`), verified, then moved into place: a target folder that does not exist yet is
created by one rename; into an existing folder each file is moved with `os.replace`. On any failure the temporary
folders are removed and a `FetchError` names the URL and the reason; no partial folder or file is left behind.
Files already present with the pinned checksum are not downloaded again; a present file with a different checksum
is only replaced with `force=True`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..errors import BiaslabError
from .verify import GIT_BLOB, git_blob_id, pin_matches

if TYPE_CHECKING:  # annotations only: the fetcher's defaults are read by `biaslab --help` without the schema
    from .dataset import DatasetInfo, Upstream

DEFAULT_TIMEOUT = 30.0
CHUNK = 1 << 16


class FetchError(BiaslabError):
    """A dataset could not be fetched; the message is one line naming the URL (or file) and the reason."""


@dataclass(frozen=True)
class Planned:
    """One local file to fetch: where it goes (root folder under the data dir + path inside it) and its source."""

    rel: str            # as in DatasetInfo.files / sources
    root: str           # first path component under the data dir, e.g. "winopron" or "misersky_norms"
    inner: str          # path inside `root`, POSIX style
    source: Upstream
    sha256: str


@dataclass(frozen=True)
class FetchResult:
    dataset: str
    fetched: tuple[str, ...]     # relative paths written
    present: tuple[str, ...]     # relative paths already there with the pinned checksum
    folders: tuple[Path, ...]    # target folders touched


def download(url: str, out: BinaryIO, *, timeout: float) -> None:
    """Stream `url` into `out` (tests replace this function to serve local bytes)."""
    request = urllib.request.Request(url, headers={"User-Agent": "biaslab-data-fetch"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (https URLs from the registry)
        while chunk := response.read(CHUNK):
            out.write(chunk)


def reason(exc: BaseException, timeout: float) -> str:
    """A one-line reason for a failed download."""
    if isinstance(exc, urllib.error.HTTPError):
        text = f"HTTP {exc.code} {exc.reason}"
    elif isinstance(exc, urllib.error.URLError):
        inner = exc.reason
        if isinstance(inner, (socket.timeout, TimeoutError)):
            text = f"timed out after {timeout:g} s"
        else:
            text = f"cannot connect ({inner})"
    elif isinstance(exc, (socket.timeout, TimeoutError)):
        text = f"timed out after {timeout:g} s"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())


def plan(info: DatasetInfo, data_dir: Path) -> list[Planned]:
    """The files `fetch` would write, with their destination and pinned checksum; unfetchable datasets raise."""
    if info.no_source or not info.sources:
        why = info.no_source or "no upstream source is registered"
        raise FetchError(f"dataset {info.name} cannot be fetched: {why}")
    missing = sorted(set(info.files) - set(info.sources))
    if missing:
        raise FetchError(f"dataset {info.name}: no upstream source for {', '.join(missing)}")
    planned = []
    for rel, source in info.sources.items():
        sha = info.pinned_sha256(rel)
        if sha is None:
            raise FetchError(f"dataset {info.name}: {rel} has no pinned sha256, refusing to fetch it")
        target = os.path.normpath(os.path.join(info.folder, rel))
        parts = Path(target).parts
        if len(parts) < 2 or parts[0] in ("..", ".") or os.path.isabs(target):
            raise FetchError(f"dataset {info.name}: {rel} resolves outside the data directory ({target})")
        planned.append(Planned(rel, parts[0], Path(*parts[1:]).as_posix(), source, sha))
    return planned


def _fetch_url(url: str, dest: Path, timeout: float, downloader: Callable[..., None]) -> None:
    """Download `url` to `dest`. Failures become a one-line FetchError."""
    try:
        with open(dest, "wb") as out:
            downloader(url, out, timeout=timeout)
    except FetchError:
        raise
    except Exception as exc:  # network, HTTP, timeout, disk: all end the fetch
        raise FetchError(f"{url}: {reason(exc, timeout)}") from exc


def _extract(url: str, archive: Path, member: str, password: str | None) -> bytes:
    try:
        with zipfile.ZipFile(archive) as zf:
            return zf.read(member, pwd=password.encode() if password else None)
    except KeyError:
        raise FetchError(f"{url}: zip has no member {member!r}") from None
    except (zipfile.BadZipFile, RuntimeError, OSError, ValueError, zipfile.LargeZipFile) as exc:
        raise FetchError(f"{url}: cannot extract {member!r} ({' '.join(str(exc).split())})") from None


def _check(url: str, what: str, raw: bytes, pinned: str) -> None:
    """Refuse bytes that are not the pinned file (a sha256 pin, or a "git-blob:" one: `verify.pin_matches`)."""
    if not pin_matches(pinned, raw):
        if pinned.startswith(GIT_BLOB):
            got, kind, pinned = git_blob_id(raw), "git blob id", pinned[len(GIT_BLOB):]
        else:
            got, kind = hashlib.sha256(raw).hexdigest(), "sha256"
        raise FetchError(f"{url}: {kind} mismatch for {what} (got {got[:16]}..., pinned {pinned[:16]}...)")


def _stage(items: list[Planned], staging: dict[str, Path], timeout: float,
           downloader: Callable[..., None]) -> None:
    """Download and verify every item into its root's staging folder."""
    by_url: dict[str, list[Planned]] = {}
    for item in items:
        by_url.setdefault(item.source.url, []).append(item)
    for n, (url, group) in enumerate(by_url.items()):
        download_path = staging[group[0].root] / f".download-{n}"
        _fetch_url(url, download_path, timeout, downloader)
        raw = download_path.read_bytes()
        for item in group:
            dest = staging[item.root] / item.inner
            dest.parent.mkdir(parents=True, exist_ok=True)
            if item.source.member is None:
                _check(url, item.rel, raw, item.sha256)
                shutil.copyfile(download_path, dest)
            else:
                if item.source.archive_sha256 is not None:
                    _check(url, "the zip archive", raw, item.source.archive_sha256)
                data = _extract(url, download_path, item.source.member, item.source.password)
                _check(url, f"{item.rel} (zip member {item.source.member})", data, item.sha256)
                dest.write_bytes(data)
        download_path.unlink()


def _install(root: Path, staged: Path, inners: list[str]) -> None:
    """Move a verified staging folder into place: one rename if `root` is new, else per-file `os.replace`."""
    if not root.exists():
        try:
            os.rename(staged, root)
            return
        except OSError:
            if not root.is_dir():  # not the "someone created it meanwhile" case
                raise
    for inner in inners:
        dest = root / inner
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged / inner, dest)


def fetch(info: DatasetInfo, data_dir: Path, *, timeout: float = DEFAULT_TIMEOUT, force: bool = False,
          downloader: Callable[..., None] | None = None) -> FetchResult:
    """Download, verify and install `info`'s upstream files under `data_dir` (see the module docstring)."""
    data_dir = Path(data_dir)
    if timeout <= 0:
        raise FetchError(f"timeout must be positive, got {timeout:g}")
    planned = plan(info, data_dir)
    todo, present = [], []
    for item in planned:
        dest = data_dir / item.root / item.inner
        if dest.is_file() and pin_matches(item.sha256, dest.read_bytes()):
            present.append(item.rel)
        elif dest.exists() and not force:
            raise FetchError(f"{dest}: exists but does not match the pinned sha256 (or git blob id); move it away or "
                             "use --force")
        else:
            todo.append(item)
    if not todo:
        return FetchResult(info.name, (), tuple(present), ())

    downloader = downloader or download
    created = [d for d in (data_dir, *data_dir.parents) if not d.exists()]  # removed again on failure
    staging: dict[str, Path] = {}
    ok = False
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        for item in todo:
            if item.root not in staging:
                staging[item.root] = Path(tempfile.mkdtemp(prefix=f".{item.root}.fetch-", dir=data_dir))
        try:
            _stage(todo, staging, timeout, downloader)
        except FetchError as exc:
            raise FetchError(f"{exc}; nothing was written") from exc.__cause__
        for root, staged in staging.items():
            _install(data_dir / root, staged, [i.inner for i in todo if i.root == root])
        ok = True
    except OSError as exc:  # local disk problems (network ones are FetchError already)
        raise FetchError(f"cannot write under {data_dir}: {' '.join(str(exc).split())}") from exc
    finally:
        for staged in staging.values():
            shutil.rmtree(staged, ignore_errors=True)
        for d in created if not ok else ():
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    return FetchResult(info.name, tuple(i.rel for i in todo), tuple(present),
                       tuple(sorted({data_dir / i.root for i in todo})))


__all__ = ["DEFAULT_TIMEOUT", "FetchError", "FetchResult", "download", "fetch", "plan"]
