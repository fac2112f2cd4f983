"""Checksum verification of the files a loader reads, against the sha256 values pinned in the registry.

`DatasetInfo.load` opens a `Verification` for the dataset's pinned files (`DatasetInfo.files`, paths resolved under
the data directory) and runs the loader inside it. Every file the loader then reads through `readers.read_text`
(directly, or via `read_table` / `read_lines`) is hashed from the very bytes that are parsed and compared with its
pin, before anything is parsed:

* pinned and equal: "ok";
* pinned and different: refused with a one-line `DataError` naming the file and both hash prefixes, unless the load
  was asked to `accept_modified`; then the file is recorded as "modified" and `DatasetInfo.load` stamps the file's
  own sha256 on the stimuli as their `upstream_version` (see `modified_version`);
* not pinned (user-supplied datasets such as `negation` and `winoqueer`, or a file chosen by an option, e.g. another
  norms file for WinoPron): "unpinned", loaded as before.

Files a loader does not read (e.g. Winogender's `all_sentences.tsv`) are not checked by `load`; `biaslab data list`
still shows their status. Outside a `Verification` (a loader function called directly) nothing is checked.

A pin is a sha256 in hex, or, for an upstream file whose bytes were never seen here (BBQ's five largest category
files), its git blob id at the pinned commit, written "git-blob:<40 hex digits>" (`GIT_BLOB`): the sha1 of
"blob <size>\\0" followed by the bytes, which names exactly the bytes git holds at that commit (`pin_matches`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DataError

#: how many hex digits of a hash the messages show
PREFIX = 12


def hash_prefix(sha: str) -> str:
    return sha[:PREFIX] + "..."


#: the prefix of a pin that is a git blob id rather than a sha256
GIT_BLOB = "git-blob:"


def git_blob_id(raw: bytes) -> str:
    """The git blob id of `raw`: sha1 over b"blob <len>\\0" + raw (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(raw) + raw, usedforsecurity=False).hexdigest()


def pin_matches(pin: str, raw: bytes, sha256: str | None = None) -> bool:
    """Whether the bytes `raw` (whose sha256 is `sha256`, computed when not given) are the pinned file: a sha256
    pin compares the sha256, a "git-blob:" pin the git blob id."""
    if pin.startswith(GIT_BLOB):
        return git_blob_id(raw) == pin[len(GIT_BLOB):]
    return (sha256 if sha256 is not None else hashlib.sha256(raw).hexdigest()) == pin


def _key(path: str | os.PathLike) -> str:
    return os.path.realpath(os.path.normpath(os.fspath(path)))


@dataclass(frozen=True)
class FileCheck:
    """The outcome for one file read during a load."""

    path: Path
    rel: str | None          # as in DatasetInfo.files; None for an unpinned file outside them
    sha256: str              # of the bytes read
    pinned: str | None
    status: str              # "ok", "modified" or "unpinned"


@dataclass
class Verification:
    """The pinned files of one dataset load and what was found when each was read."""

    dataset: str
    pins: Mapping[str, tuple[str, str | None]]   # resolved path -> (rel, pinned sha256 or None)
    accept_modified: bool = False
    fetchable: bool = False      # `biaslab data fetch` can restore the files (named in the refusal)
    upstream: frozenset[str] = frozenset()  # every pinned sha256 of the dataset (its files and fetch sources)
    checks: dict[str, FileCheck] = field(default_factory=dict)  # resolved path -> check, in reading order

    @classmethod
    def for_files(cls, dataset: str, folder: Path, files: Mapping[str, str | None], *,
                  accept_modified: bool = False, fetchable: bool = False,
                  upstream: frozenset[str] = frozenset()) -> Verification:
        pins = {_key(Path(folder) / rel): (rel, sha) for rel, sha in files.items()}
        return cls(dataset, pins, accept_modified, fetchable, upstream)

    def observe(self, path: Path, sha: str, raw: bytes | None = None) -> FileCheck:
        """Record the sha256 of a file just read (`raw`, its bytes, for a git blob pin); a pinned file that differs
        is refused unless accepted."""
        key = _key(path)
        rel, pinned = self.pins.get(key, (None, None))
        if pinned is None:
            status = "unpinned"
        elif sha == pinned or (raw is not None and pinned.startswith(GIT_BLOB) and pin_matches(pinned, raw, sha)):
            status = "ok"
        elif self.accept_modified:
            status = "modified"
        else:
            restore = (f"restore it (biaslab data fetch {self.dataset} --force)" if self.fetchable
                       else "restore the original")
            kind = "git blob" if pinned.startswith(GIT_BLOB) else "sha256"
            pinned_hex = pinned.removeprefix(GIT_BLOB)
            found = git_blob_id(raw) if kind == "git blob" and raw is not None else sha
            raise DataError(path, f"differs from the pinned upstream file (expected {kind} {hash_prefix(pinned_hex)}, "
                                  f"found {hash_prefix(found)}): modified or damaged; {restore}, or pass "
                                  f"--accept-modified to load it as a modified copy")
        check = FileCheck(Path(path), rel, sha, pinned, status)
        self.checks[key] = check
        return check

    @property
    def modified(self) -> list[FileCheck]:
        """Pinned files read with other bytes than pinned (only when accepted), in reading order."""
        return [c for c in self.checks.values() if c.status == "modified"]


def modified_version(modified: list[FileCheck]) -> str:
    """The `upstream_version` of stimuli read from accepted modified files: each such file's own full sha256,
    "sha256:<hex>" (several files: joined with "+", in reading order). The other files read matched their pins,
    so this names the data exactly."""
    return "+".join(f"sha256:{c.sha256}" for c in modified)


_CURRENT: ContextVar[Verification | None] = ContextVar("biaslab_loader_verification", default=None)


@contextlib.contextmanager
def verifying(verification: Verification) -> Iterator[Verification]:
    """Check every file read inside the block against `verification`'s pins."""
    token = _CURRENT.set(verification)
    try:
        yield verification
    finally:
        _CURRENT.reset(token)


def observe(path: Path, raw: bytes) -> tuple[str, FileCheck | None]:
    """(sha256 of `raw`, the check of the current verification or None outside one). Raises on a refused file."""
    sha = hashlib.sha256(raw).hexdigest()
    current = _CURRENT.get()
    return sha, (current.observe(path, sha, raw) if current is not None else None)


#: every pinned upstream sha256 of the built-in datasets, provided by the registry (`use_pins`), which imports
#: the loaders; this module stays below them
_PINS: Callable[[], frozenset[str]] = frozenset


def use_pins(source: Callable[[], frozenset[str]]) -> None:
    """Set where `pinned_upstream` finds the pins of every built-in dataset (the registry calls this)."""
    global _PINS
    _PINS = source


def pinned_upstream(sha: str) -> bool:
    """Is `sha` the pinned sha256 of an upstream file (of the dataset being loaded, or of any built-in dataset)?
    Such a file is upstream's exact bytes, so the readers accept its known layout quirks (no line break after the
    last line) instead of treating them as damage."""
    current = _CURRENT.get()
    return (current is not None and sha in current.upstream) or sha in _PINS()
