"""What biaslab knows about a dataset: where its files live, their pinned checksums, its licence, its loader and the
protocols its stimuli are asked with (`DatasetInfo`), and where `biaslab data fetch` gets each file (`Upstream`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import UsageError
from ..schema import Stimulus
from .errors import DataError
from .options import parse_bool
from .verify import FileCheck, Verification, hash_prefix, modified_version, pin_matches, verifying

Loader = Callable[..., list[Stimulus]]


def github_raw(repo: str, commit: str, path: str) -> str:
    """Commit-pinned raw URL of `path` in the GitHub repository `repo` ("owner/name"), the path percent-encoded
    (BBQ's template files have spaces in their names)."""
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{quote(path, safe='/')}"


def github_blob(repo: str, commit: str, path: str) -> str:
    """Commit-pinned page of `path` in the GitHub repository `repo` (what people open in a browser)."""
    return f"https://github.com/{repo}/blob/{commit}/{path}"


def file_loader(load_file: Callable[..., list[Stimulus]], dataset: str, file: str, shown: str | None = None) -> Loader:
    """`load(folder)` = `load_file(folder, dataset=dataset, file=file)`, named after the dataset.

    For modules that register several datasets of one format, one file each; `shown` is the file as the docstring
    names it (default: `file`).
    """
    def load(folder: Path) -> list[Stimulus]:
        return load_file(folder, dataset=dataset, file=file)

    load.__name__ = f"load_{dataset.replace('-', '_')}"
    load.__module__ = load_file.__module__  # "the module docstring" is that of the module defining `load_file`
    load.__doc__ = f"Stimuli of {dataset} from {shown or file} (see the module docstring)."
    return load


@dataclass(frozen=True)
class Upstream:
    """Where one local file of a dataset comes from, for `biaslab data fetch`.

    `url` is commit-pinned. With `member`, the URL is a zip archive (pinned by `archive_sha256`) and the file is that
    member, decrypted with `password` when the archive is encrypted (WinoPron and RUFF publish theirs). `sha256`
    pins files the loader does not read (files it reads are pinned in `DatasetInfo.files`).
    """

    url: str
    member: str | None = None
    password: str | None = None
    archive_sha256: str | None = None
    sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class DatasetInfo:
    """A dataset biaslab knows how to load from its upstream layout under `<data-dir>/<folder>/` (the folder is the
    dataset's name unless given)."""

    name: str
    loader: Loader
    licence: str
    description: str
    files: Mapping[str, str | None] = field(default_factory=dict)  # relative path -> pinned sha256 (None: unpinned)
    options: Mapping[str, Any] = field(default_factory=dict)       # accepted options and their defaults
    url: str | None = None
    #: relative path (as in `files`; may reach a sibling folder with "../") -> where `biaslab data fetch` gets it
    sources: Mapping[str, Upstream] = field(default_factory=dict)
    #: why the dataset cannot be fetched (no public, commit-pinned source); shown by `biaslab data fetch`
    no_source: str | None = None
    #: the runner protocols this dataset's stimuli are asked with, the default first (docs/design.md section 11):
    #: prob (score each option in the slot, or the sentence), choice (forced-choice prompt), meta (comprehension
    #: questions about a forced-choice passage), gen (continuations). Names only: the protocols are the runners'.
    protocols: tuple[str, ...] = ("prob",)
    folder: str = ""
    #: where the prob protocol's stimuli come from: None (the loaded stimuli) or "gen" (templates built from the
    #: model's own stored generations of this dataset, TANGO's probability version, `biaslab.runners.tango`)
    prob_from: str | None = None
    #: the studies that read this dataset (`biaslab.metrics.registry`: a study's datasets are those naming it)
    studies: tuple[str, ...] = ()
    #: the first-pronoun detector's vocabulary for the gen protocol (`lexicon.pronoun_detection.vocabulary`; None:
    #: the dataset has no gen protocol, or a user dataset declares its own families)
    pronoun_vocabulary: str | None = None
    #: files of `files` that may be absent: the loader reads those present (BBQ's categories beyond the ones a copy
    #: holds, its metadata file); `present` does not need them and a load names the absent ones (`Loaded.notes`)
    optional: frozenset[str] = frozenset()
    #: the packaged forced-choice prompt its stimuli are asked with (`runners/prompts/NAME.json`; None: the
    #: built-in forced-choice prompt)
    prompt: str | None = None
    #: protocol -> its settings' defaults for this dataset, where `runners collect` is not given them (BBQ's answers
    #: need up to 14 tokens, more than the forced choice's 6)
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: the strata a limited run spreads its items over, outermost first (`runners.sampling`): stimulus fields or
    #: attrs.NAME, e.g. BBQ's category > template > context condition > polarity; () for a plain seeded sample
    strata: tuple[str, ...] = ()
    #: what a limited run counts as one item, taken whole (a stimulus field or attrs.NAME): the item id, or a coarser
    #: unit (negation's root item, whose four conditions have item ids of their own)
    sample_item: str = "item_id"
    #: how the gen protocol prompts: "continuation" (the text continued, no chat template: misgendering) or
    #: "dialogue" (the text before the slot as the user message under the stimulus' attrs.system_prompt, rendered
    #: with the model's chat template: DecodingTrust)
    gen_prompt: str = "continuation"

    def __post_init__(self) -> None:
        if not self.folder:
            object.__setattr__(self, "folder", self.name)

    def pinned_sha256(self, rel: str) -> str | None:
        """The pinned sha256 of a fetchable file: from `files`, else from its `Upstream`."""
        pinned = self.files.get(rel)
        source = self.sources.get(rel)
        return pinned if pinned is not None else (source.sha256 if source is not None else None)

    def path(self, data_dir: Path) -> Path:
        return Path(data_dir) / self.folder

    def present(self, data_dir: Path) -> bool:
        """Whether every file the dataset needs (all of `files` but the `optional` ones) is there."""
        return (all((self.path(data_dir) / rel).is_file() for rel in self.files if rel not in self.optional)
                and self.path(data_dir).is_dir())

    def absent_optional(self, data_dir: Path) -> tuple[str, ...]:
        """The `optional` files that are not there."""
        return tuple(rel for rel in self.files if rel in self.optional and not (self.path(data_dir) / rel).is_file())

    def verify(self, data_dir: Path) -> dict[str, str]:
        """Per file: 'ok', 'missing', 'mismatch' or 'unpinned'."""
        status = {}
        for rel, pinned in self.files.items():
            p = self.path(data_dir) / rel
            if not p.is_file():
                status[rel] = "missing"
            elif pinned is None:
                status[rel] = "unpinned"
            else:
                status[rel] = "ok" if pin_matches(pinned, p.read_bytes()) else "mismatch"
        return status

    def load(self, data_dir: Path, *, accept_modified: Any = False, **options: Any) -> list[Stimulus]:
        """The dataset's stimuli; every pinned file the loader reads is checked against its sha256 first.

        A file that differs from its pin is a `DataError` naming it, unless `accept_modified` (then its stimuli
        carry the file's own sha256 as `upstream_version`; `load_verified` also says which files differed).
        """
        return self.load_verified(data_dir, accept_modified=accept_modified, **options).stimuli

    def load_verified(self, data_dir: Path, *, accept_modified: Any = False, **options: Any) -> Loaded:
        """`load`, with the checksum outcome of every file read (see `biaslab.loaders.verify`)."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise UsageError(f"dataset {self.name}: unknown option(s) {unknown}; accepted: {sorted(self.options)}")
        accept = parse_bool(accept_modified, "accept_modified") if accept_modified is not None else False
        folder = self.path(data_dir)
        if not folder.is_dir():
            raise DataError(folder, f"dataset folder not found (dataset {self.name}; set --data-dir or BIASLAB_DATA)")
        merged = {**self.options, **{k: v for k, v in options.items() if v is not None}}
        upstream = {s for s in self.files.values() if s} | {src.sha256 for src in self.sources.values() if src.sha256}
        verification = Verification.for_files(self.name, folder, self.files, accept_modified=accept,
                                              fetchable=bool(self.sources) and not self.no_source,
                                              upstream=frozenset(upstream))
        with verifying(verification) as checked:
            stimuli = self.loader(folder, **merged)
        modified = tuple(checked.modified)
        version = None
        if modified:  # the pinned digest no longer names these data: stamp the modified files' own hashes
            version = modified_version(list(modified))
            stimuli = [s.model_copy(update={"upstream_version": version}) for s in stimuli]
        return Loaded(self.name, stimuli, tuple(checked.checks.values()), modified, version,
                      self.absent_optional(data_dir))


@dataclass(frozen=True)
class Loaded:
    """What `DatasetInfo.load_verified` read: the stimuli and the checksum outcome of each file."""

    dataset: str
    stimuli: list[Stimulus]
    files: tuple[FileCheck, ...]          # every file read, in reading order ("ok", "modified", "unpinned")
    modified: tuple[FileCheck, ...]       # accepted pinned files whose bytes differ from the pin
    upstream_version: str | None          # stamped on every stimulus when `modified`, else None (as loaded)
    absent: tuple[str, ...] = ()          # optional files that were not there (`DatasetInfo.optional`)

    def notes(self) -> list[str]:
        """One line per accepted modified file, and one naming the absent optional files, for the command output."""
        lines = [f"{self.dataset}: {c.rel} differs from the pinned upstream file (sha256 {hash_prefix(c.sha256)}, "
                 f"pinned {hash_prefix(c.pinned or '')}); stimuli record upstream_version {self.upstream_version}"
                 for c in self.modified]
        if self.absent:
            named = ", ".join(self.absent[:3]) + (f" and {len(self.absent) - 3} more" if len(self.absent) > 3 else "")
            lines.append(f"{self.dataset}: {len(self.absent)} optional file{'s' if len(self.absent) != 1 else ''} "
                         f"not in this copy ({named}); `biaslab data fetch {self.dataset}` gets them")
        return lines
