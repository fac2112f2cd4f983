"""Loading stimuli into a warehouse, as library functions (`biaslab.load`, `biaslab.load_user`): a built-in dataset
from the data directory, or the user's own dataset from a file or a spec. `biaslab data load` is a thin shell over
these two.

Both read and validate everything first and then write in one transaction (the run row and the stimuli: both
stored or neither), so bad input leaves the warehouse as it was and loading twice adds nothing (stimuli are keyed by
a hash of their content, docs/design.md section 3).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .. import loaders
from ..errors import DataError, UsageError
from ..loaders.options import pop_flag
from ..warehouse import Rollback, Warehouse

PathLike = str | os.PathLike

__all__ = ["LoadResult", "load", "load_user", "read_user"]


@dataclass(frozen=True)
class LoadResult:
    """What a load did.

    Attributes
    ----------
    dataset : the dataset's name.
    read : stimuli read (and validated) from the files.
    added : stimuli new to the warehouse.
    total : the dataset's stimuli in the warehouse after the load (a user dataset: its current version's).
    db : the warehouse written.
    notes : lines to show (e.g. the modified files accepted with accept_modified).
    version : a user dataset's version (the sha256 of what was loaded), None for a built-in one.
    changed : a user dataset: whether this load made a new version current.
    protocols : a user dataset's declared protocols.
    edited : a user dataset: stored stimuli whose attributes alone changed (their rows updated, their evidence kept,
        the change recorded in `attribute_edits`).
    """

    dataset: str
    read: int
    added: int
    total: int
    db: str
    notes: tuple[str, ...] = ()
    version: str | None = None
    changed: bool = False
    protocols: tuple[str, ...] = field(default_factory=tuple)
    edited: int = 0


def load(dataset: str, db: PathLike = "warehouse/biaslab.duckdb", *, data_dir: PathLike | None = None,
         accept_modified: bool = False, **options: Any) -> LoadResult:
    """Load a built-in dataset's stimuli into the warehouse's `stimuli` table.

    Every file the loader reads is checked against the sha256 pinned for the dataset (a modified file is refused,
    naming it, unless `accept_modified`), then row by row; the stimuli and a `runs` row are appended in one
    transaction.

    Parameters
    ----------
    dataset : a built-in dataset name (`biaslab data list`).
    db : the warehouse (created and migrated when absent).
    data_dir : the folder holding the upstream datasets (default: BIASLAB_DATA, else ./data).
    accept_modified : load files that differ from the pinned sha256 (their stimuli record the file's own sha256).
    options : loader options, e.g. subset="type2" (winobias), pronouns="all" (tango), seed=0 (misgendered).

    Returns
    -------
    LoadResult with read, added and total.
    """
    info = loaders.get(dataset)
    options = {k: v for k, v in options.items() if v is not None}
    accept_modified, options = pop_flag(options, "accept_modified", accept_modified)
    loaded = info.load_verified(loaders.default_data_dir(data_dir), accept_modified=accept_modified, **options)
    if not loaded.stimuli:
        raise DataError(f"dataset {dataset}: no stimuli produced")
    rows = [s.to_row() for s in loaded.stimuli]
    params = {"dataset": info.name, **options}
    if accept_modified:
        params["accept_modified"] = True
        params["modified_files"] = {c.rel: c.sha256 for c in loaded.modified}
    added = 0
    with Warehouse.open(db) as wh:
        with wh.transaction():  # the run row and the stimuli: both stored or neither
            run_id = wh.start_run(f"biaslab data load {dataset}", params)
            added = wh.append("stimuli", rows)
            if not added:
                raise Rollback  # nothing new: nothing recorded, the file's bytes unchanged (issue 56, item 13)
            wh.finish_run(run_id, rows_added=added)
        total = wh.count("stimuli", "dataset = ?", [info.name])
    return LoadResult(info.name, len(rows), added, total, str(db), tuple(loaded.notes()))


def read_user(*, file: PathLike | None = None, spec: PathLike | None = None, name: str | None = None,
              protocols: str | None = None, prompt: PathLike | None = None, families: PathLike | None = None,
              max_stimuli: int | None = None, progress=None, db: PathLike | None = None,
              kind: str = "stimuli", attributes: str | None = None, system: str | None = None):
    """The user dataset of `file` or `spec` (`loaders.user.dataset.UserDataset`), validated, its prompt too, before
    anything is written. `protocols`, `prompt`, `families` and `progress` belong to `file`; a spec declares the
    first three itself. `db`: the warehouse it is for, whose stored version of the dataset (if any) says what its
    stimulus ids hash (`stored_identity`). `kind` "counterfactual": `file` holds prompts whose variants are the
    stimuli (`loaders.user.counterfactual`; `attributes` and `system` belong to it)."""
    from ..loaders.user.dataset import from_file, from_spec, read_families
    from .prompting import PromptSpec

    if (file is None) == (spec is None):
        raise UsageError("give one of: file (with name) or spec")
    if kind == "counterfactual":
        return _read_counterfactual(file, name, protocols, prompt, families, max_stimuli, attributes, system)
    if attributes is not None or system is not None:
        raise UsageError("--attributes and --system belong to --kind counterfactual (a file of prompts)")
    keyed = {} if db is None else {"identity": partial(stored_identity, db)}
    if spec is not None:
        for flag, value in (("--protocols", protocols), ("--prompt", prompt), ("--families", families)):
            if value is not None:
                raise UsageError(f"{flag} belongs to --file; a spec declares it (`{flag[2:]}:`)")
        dataset = from_spec(spec, name, **keyed, **({"max_stimuli": max_stimuli} if max_stimuli else {}))
    else:
        declared = read_families(families) if families else None
        dataset = from_file(file, name, protocols=protocols, prompt=prompt, pronouns=declared, progress=progress,
                            **keyed, **({"max_stimuli": max_stimuli} if max_stimuli else {}))
    if dataset.declaration.prompt is not None:
        where = str(prompt or f"{spec}: prompt")
        try:
            shown = PromptSpec.from_mapping(dataset.declaration.prompt, where)
            for n in sorted(dataset.option_counts):  # the prompt can show every stimulus's options
                shown.user_text("", [f"option {i}" for i in range(n)], f"{where} (stimuli with {n} options)")
        except BaseException:
            dataset.close()  # nothing half-written: the staged rows go too
            raise
    return dataset


def _read_counterfactual(file, name, protocols, prompt, families, max_stimuli, attributes, system):
    """`read_user` of a counterfactual prompt file (`loaders.user.counterfactual.from_prompts`)."""
    from ..loaders.user.counterfactual import from_prompts, parse_attributes

    if file is None:
        raise UsageError("--kind counterfactual reads a prompt file: give --file FILE --name NAME")
    for flag, value in (("--protocols", protocols), ("--prompt", prompt), ("--families", families)):
        if value is not None:
            raise UsageError(f"{flag} does not apply to --kind counterfactual (its protocol is gen)")
    return from_prompts(Path(file), name, attributes=parse_attributes(attributes), system=system,
                        **({"max_stimuli": max_stimuli} if max_stimuli else {}))


def load_user(db: PathLike = "warehouse/biaslab.duckdb", *, file: PathLike | None = None,
              spec: PathLike | None = None, name: str | None = None, protocols: str | None = None,
              prompt: PathLike | None = None, families: PathLike | None = None,
              max_stimuli: int | None = None, progress=None, kind: str = "stimuli", attributes: str | None = None,
              system: str | None = None) -> LoadResult:
    """Load your own dataset (docs/own-study.md) into the warehouse: its stimuli and its declaration (protocols,
    prompt, pronoun families), so collecting and the options metrics need nothing else.

    Every row is validated with the stimulus schema (a bad row: one line naming file, row and field). Loading an
    edited file adds the changed rows as new stimuli and makes that version current; old rows keep their evidence.

    Parameters
    ----------
    db : the warehouse (created and migrated when absent).
    file, name : a stimulus file (CSV, JSONL, Parquet) and the dataset's name; or
    spec : a spec file (YAML, TOML or JSON) that expands templates x fillers (its `name:` unless `name` is given).
    protocols : with `file`: the protocols, e.g. "choice,prob" (default from the columns).
    prompt : with `file`: a forced-choice prompt file.
    families : with `file`: a pronoun-families file for the gen protocol.
    max_stimuli : refuse a spec expanding to more stimuli, or a file of more rows (default 1,000,000), before
        expanding or reading any. A file is read, checked and stored a block at a time, in bounded memory.
    progress : with `file`: `progress(total rows, 0)` returns the callback told of every batch of rows read
        (`biaslab.cli.progress.progress_bar`'s factory).
    kind : "stimuli" (default), or "counterfactual": `file` holds prompts, one a row, whose variants per attribute
        are the stimuli (`biaslab.loaders.user.counterfactual`).
    attributes : with kind "counterfactual": the attributes to vary, e.g. "gender,race" (default: all).
    system : with kind "counterfactual": a system prompt sent before every variant.

    Returns
    -------
    LoadResult with read, added, total (the current version's stimuli), version, changed and protocols.
    """
    from ..warehouse.user_datasets import store

    dataset = read_user(file=file, spec=spec, name=name, protocols=protocols, prompt=prompt, families=families,
                        max_stimuli=max_stimuli, progress=progress, db=db, kind=kind, attributes=attributes,
                        system=system)
    decl = dataset.declaration
    command = (f"biaslab data load --spec {spec}" if spec is not None else
               f"biaslab data load --file {file} --name {decl.name}" + (f" --kind {kind}" if kind != "stimuli" else ""))
    try:
        with Warehouse.open(db) as wh:
            done = store(wh, decl, dataset.ids, dataset.row_batches(), command)
    finally:
        dataset.close()
    notes = ()
    if decl.counterfactual is not None:
        from ..loaders.user.counterfactual import audit_lines

        notes = tuple(audit_lines(decl.counterfactual))
    return LoadResult(decl.name, len(dataset.stimuli), done.added, len(dataset.stimuli), str(db), notes=notes,
                      version=done.version, changed=done.changed, protocols=tuple(decl.protocols), edited=done.edited)


def stored_identity(db: PathLike, name: str) -> str:
    """What the stimulus ids of the user dataset `name` hash in the warehouse `db` (`DatasetDeclaration.identity`):
    its stored declaration's, so a dataset first loaded before issue 44 ("all": every field) keeps its ids and its
    evidence; "seen" (attributes left out) for a dataset the warehouse does not hold, or no warehouse (none is
    created here: a refused load leaves nothing behind)."""
    from ..warehouse.user_datasets import current

    if not Path(db).is_file():
        return "seen"
    with Warehouse.open(db) as wh:  # a writer: an older warehouse is migrated, as the load's store would
        stored = current(wh, name)
    return stored.declaration.identity if stored is not None else "seen"

