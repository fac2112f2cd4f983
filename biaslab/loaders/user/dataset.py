"""A user dataset read from its file or spec: the stimuli and the declaration stored with them
(`biaslab.schema.user_dataset.DatasetDeclaration`), checked against the protocols it declares before anything is
stored (the forced-choice prompt's own fields are checked by the runner that shows it, `runners.user_datasets`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ... import errors
from ...lexicon.pronoun_detection import form_index
from ...schema import CHOICE_OPTIONS, DatasetDeclaration, Stimulus, stimulus_type
from ...schema.errors import first_error
from ...schema.user_dataset import USER_PROTOCOLS, check_name
from ..errors import DataError
from .bounded import MAX_PROMPT_BYTES, MAX_SPEC_BYTES, check_depth, guarded, inside, load_yaml, small_file
from ..registry import MODULES
from .expand import MAX_STIMULI, expand, spec_pronouns
from .files import check_size, iter_stimuli
from .spec import read_spec
from .staged import BATCH_ROWS, Staged


@dataclass(frozen=True)
class UserDataset:
    """What `biaslab data load --file / --spec` stores: the declaration and the stimuli, in file order: a spec's
    expansion as a list, a file's rows staged on disk (`staged.Staged`: a big file is never held in memory)."""

    declaration: DatasetDeclaration
    stimuli: Sequence[Stimulus] | Staged
    #: how many options the stimuli have (the distinct counts; empty without options)
    option_counts: frozenset[int] = frozenset()

    @property
    def ids(self) -> list[str]:
        """The stimulus ids, in file order."""
        return self.stimuli.ids if isinstance(self.stimuli, Staged) else [s.stimulus_id for s in self.stimuli]

    @property
    def version(self) -> str:
        return self.declaration.version(self.ids)

    def close(self) -> None:
        """Remove the staged file, if any."""
        if isinstance(self.stimuli, Staged):
            self.stimuli.close()

    def __enter__(self) -> UserDataset:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def row_batches(self) -> Iterator[Any]:
        """The `stimuli` table's rows to append: a staged file's as the path of its Parquet file (each stimulus
        once), a spec's as lists of row dicts, a batch at a time."""
        if isinstance(self.stimuli, Staged):
            yield self.stimuli.path
        else:
            for start in range(0, len(self.stimuli), BATCH_ROWS):
                yield [s.to_row() for s in self.stimuli[start:start + BATCH_ROWS]]


def user_name(name: str | None, where: Path) -> str:
    """A valid user dataset name that is not a built-in dataset's."""
    if not name:
        raise DataError(where, "no dataset name: give --name NAME (or `name:` in the spec)")
    try:
        check_name(name)
    except ValueError as exc:
        raise DataError(where, str(exc)) from None
    if name in MODULES:
        raise DataError(where, f"dataset name {name!r} is a built-in dataset's; choose another name")
    return name


def read_prompt(value: str | dict[str, Any] | None, base: Path, where: Path,
                confined: bool = False) -> dict[str, Any] | None:
    """The forced-choice prompt's fields: a JSON file (relative to `base`) or an inline mapping. `confined` (a
    spec's `prompt:`): the file must lie inside `base` (`bounded.inside`); any prompt file is at most
    `bounded.MAX_PROMPT_BYTES`."""
    if value is None or isinstance(value, dict):
        return check_depth(value, where, field="prompt") if value is not None else None
    if confined:
        path = inside(str(value), base, where, "prompt")
    else:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base / path
    if not path.is_file():
        raise DataError(where, f"no prompt file at {path}", field="prompt")
    if path.stat().st_size > MAX_PROMPT_BYTES:
        raise DataError(path, f"a prompt file is at most {MAX_PROMPT_BYTES:,} bytes; this one has "
                              f"{path.stat().st_size:,}")
    try:
        with guarded(path):
            data = check_depth(json.loads(path.read_text(encoding="utf-8")), path)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(path, f"not a JSON prompt file ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(path, f"a prompt file holds one JSON object, got {type(data).__name__}")
    return data


def check_pronouns(decl: DatasetDeclaration, where: Path) -> None:
    """What the declared protocols need of the declaration: gen a pronoun vocabulary the detector accepts."""
    if "gen" in decl.protocols and not decl.pronouns:
        raise DataError(where, "the gen protocol needs `pronouns` (family -> case -> forms)", field="pronouns")
    if decl.pronouns:
        try:
            form_index(decl.pronouns)
        except ValueError as exc:
            raise DataError(where, str(exc), field="pronouns") from None


class ProtocolCheck:
    """The check of each stimulus against the declared protocols (applied as the stimuli are read, before
    `check_pronouns`): choice shows 2 to 8 options (`schema.CHOICE_OPTIONS`); gen needs, for every stimulus with
    options, a gold option and its pronoun family among the declared vocabulary's. `option_counts`: the numbers of
    options seen (a declared prompt must show each, `runners.load`)."""

    def __init__(self, decl: DatasetDeclaration, where: Path):
        self.decl, self.where = decl, where
        self.option_counts: set[int] = set()

    def __call__(self, s: Stimulus) -> None:
        decl, where = self.decl, self.where
        low, high = CHOICE_OPTIONS
        n = 0 if s.options is None else len(s.options)
        if n:
            self.option_counts.add(n)
        if "choice" in decl.protocols and not low <= n <= high:
            raise DataError(where, f"item {s.item_id}: the choice protocol shows {low} to {high} options, this "
                                   f"stimulus has {n}", field="options")
        if "gen" in decl.protocols and s.options is not None:
            if s.gold is None or s.pronoun_set is None:
                raise DataError(where, f"item {s.item_id}: the gen protocol needs a gold option and its pronoun family "
                                       f"(pronoun_set)", field="gold")
            if s.pronoun_set not in (decl.pronouns or {}):
                raise DataError(where, f"item {s.item_id}: pronoun family {s.pronoun_set!r} is not among the declared "
                                       f"pronouns ({sorted(decl.pronouns or {})})", field="pronouns")


def _declaration(where: Path, **fields: Any) -> DatasetDeclaration:
    try:
        return DatasetDeclaration(**fields)
    except ValidationError as exc:
        error = first_error(exc)
        raise DataError(where, error.message, field=error.field or None) from None


def _protocols(value) -> tuple[str, ...]:
    items = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value)
    unknown = [p for p in items if p not in USER_PROTOCOLS]
    if unknown:
        raise errors.DataError(f"protocol(s) {unknown} unknown for user datasets; use {', '.join(USER_PROTOCOLS)}")
    return tuple(items)


def _seen(name: str) -> str:
    return "seen"


def from_file(path: Path, name: str | None, *, protocols=None, prompt: str | None = None,
              pronouns: dict | None = None, description: str = "", max_stimuli: int = MAX_STIMULI,
              progress: Callable[[int, int], Callable[[int], None]] | None = None,
              identity: Callable[[str], str] = _seen) -> UserDataset:
    """A user dataset from a table file (`files.iter_stimuli`), staged on disk; protocols default to prob. A file
    of more than `max_stimuli` rows is refused before any row is read (`files.check_size`). `progress(total, 0)`,
    when given, returns the callback told of every batch of rows read (a progress bar's factory). `identity(name)`
    gives the dataset's identity scheme (`DatasetDeclaration.identity`; default "seen": the attributes are not
    identity; a dataset stored before keeps its own, `runners.load.load_user`)."""
    path = Path(path)
    name = user_name(name, path)
    scheme = identity(name)
    try:
        declared = _protocols(protocols or ("prob",))
    except ValueError as exc:
        raise DataError(path, str(exc), field="protocols") from None
    rows = check_size(path, max_stimuli)
    decl = _declaration(path, name=name, source="file", path=str(path), file_sha256=_sha(path),
                        description=description, protocols=declared, pronouns=pronouns,
                        prompt=read_prompt(prompt, Path.cwd(), path), identity=scheme)
    check = ProtocolCheck(decl, path)
    kind = stimulus_type(scheme)
    staged = Staged(iter_stimuli(path, name, kind), check,
                    advance=progress(rows, 0) if progress is not None else None, kind=kind)
    try:
        check_pronouns(decl, path)
    except DataError:
        staged.close()
        raise
    return UserDataset(decl, staged, frozenset(check.option_counts))


def from_spec(path: Path, name: str | None = None, max_stimuli: int = MAX_STIMULI,
              identity: Callable[[str], str] = _seen) -> UserDataset:
    """A user dataset from a template spec (`spec.read_spec`, `expand.expand`); --name overrides `name:`; a spec
    that expands to more than `max_stimuli` stimuli is refused before anything is expanded. `identity`: as
    `from_file`'s."""
    path = Path(path)
    spec, raw = read_spec(path)
    name = user_name(name or spec.name, path)
    scheme = identity(name)
    try:
        declared = _protocols(spec.protocols)
    except ValueError as exc:
        raise DataError(path, str(exc), field="protocols") from None
    decl = _declaration(path, name=name, source="spec", path=str(path), file_sha256=hashlib.sha256(raw).hexdigest(),
                        description=spec.description, protocols=declared, pronouns=spec_pronouns(spec),
                        prompt=read_prompt(spec.prompt, path.parent, path, confined=True), unit=spec.unit,
                        identity=scheme)
    check = ProtocolCheck(decl, path)
    stimuli = expand(spec, name, path, max_stimuli=max_stimuli, kind=stimulus_type(scheme))
    for stimulus in stimuli:
        check(stimulus)
    check_pronouns(decl, path)
    return UserDataset(decl, stimuli, frozenset(check.option_counts))


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_families(path: str | Path) -> dict[str, dict[str, tuple[str, ...]]]:
    """The gen protocol's pronoun families from a JSON or YAML file: family -> case -> forms (a list, or one
    string); checked by the detector's own rules (`lexicon.pronoun_detection.form_index`)."""
    import yaml

    path = Path(path)
    raw = small_file(path, MAX_SPEC_BYTES, "a families file")
    try:
        data = load_yaml(raw.decode("utf-8"), path)  # JSON is YAML
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DataError(path, f"not a JSON or YAML mapping ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise DataError(path, "expected a mapping family -> case -> forms")
    families = {str(f): {str(c): (forms,) if isinstance(forms, str) else tuple(forms) for c, forms in cases.items()}
                for f, cases in data.items()}
    try:
        form_index(families)
    except ValueError as exc:
        raise DataError(path, str(exc)) from None
    return families
