"""Users' own datasets in the warehouse (the `user_datasets` table, `biaslab.schema.user_dataset`): store a loaded
version with its stimuli, and read a dataset's current version (its latest row) without the file it came from."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..schema import DatasetDeclaration, evidence


@dataclass(frozen=True)
class StoredDataset:
    """The current version of a user dataset: its declaration, version key and stimulus ids (file order)."""

    declaration: DatasetDeclaration
    version: str
    stimulus_ids: tuple[str, ...]
    loaded_at: datetime


def current(wh, name: str) -> StoredDataset | None:
    """The latest loaded version of the user dataset `name` in the open warehouse `wh`, or None (also for a
    warehouse older than schema version 7)."""
    if "user_datasets" not in wh.tables():
        return None
    rows = wh.rows("SELECT declaration, version, stimulus_ids, loaded_at FROM user_datasets WHERE dataset = ? "
                   "ORDER BY loaded_at DESC LIMIT 1", [name])
    if not rows:
        return None
    declaration, version, ids, loaded_at = rows[0]
    return StoredDataset(DatasetDeclaration.model_validate(json.loads(declaration)), version, tuple(ids), loaded_at)


def names(wh) -> list[tuple[str, StoredDataset]]:
    """(name, current version) of every user dataset of `wh`, by name."""
    if "user_datasets" not in wh.tables():
        return []
    found = [r[0] for r in wh.rows("SELECT DISTINCT dataset FROM user_datasets ORDER BY dataset")]
    return [(n, current(wh, n)) for n in found]


#: DuckDB's memory limit while a user dataset is stored: a million rows go in within it (issue 45)
LOAD_MEMORY = "256MB"


def _row(declaration: DatasetDeclaration, version: str, ids: list[str], loaded_at: datetime, run_id: str | None):
    return evidence.arrow("user_datasets", {
        "dataset": [declaration.name], "version": [version], "loaded_at": [loaded_at],
        "source": [declaration.source], "path": [declaration.path], "file_sha256": [declaration.file_sha256],
        "declaration": [json.dumps(declaration.model_dump(mode="json"), sort_keys=True)], "stimulus_ids": [ids],
        "run_id": [run_id]})


def copy(wh, stored: StoredDataset, stimuli: list) -> None:
    """Write a stored version (its row as it is, same `loaded_at`) and its stimuli into another warehouse, e.g.
    a shard file, so that merging the shard back adds nothing twice."""
    with wh.transaction():
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append("user_datasets", _row(stored.declaration, stored.version, list(stored.stimulus_ids),
                                        stored.loaded_at, None))


def store(wh, declaration: DatasetDeclaration, ids: list[str], batches: Iterable,
          command: str) -> tuple[int, str, bool]:
    """Store a loaded user dataset in one transaction: a `runs` row, the stimuli (new ones only) and, when the
    dataset's current version is another, a `user_datasets` row.

    Parameters
    ----------
    wh : the open warehouse.
    declaration : the dataset's declaration.
    ids : its stimulus ids, in file order (the version hashes them).
    batches : its `stimuli` rows, a batch at a time (Arrow tables or lists of row dicts), or the path of a Parquet
        file of them, each stimulus once (a big file's staged rows, read by DuckDB as it appends them); appended
        inside the one transaction with DuckDB's memory held to LOAD_MEMORY.
    command : the command line recorded in the `runs` row.

    Returns
    -------
    (stimuli added, version, whether the version became current now).
    """
    version = declaration.version(ids)
    with wh.memory_limit(LOAD_MEMORY), wh.transaction():
        run_id = wh.start_run(command, {"dataset": declaration.name, "source": declaration.source,
                                        "path": declaration.path, "file_sha256": declaration.file_sha256,
                                        "version": version})
        added = sum(wh.append_file("stimuli", batch) if isinstance(batch, Path) else wh.append("stimuli", batch)
                    for batch in batches)
        before = current(wh, declaration.name)
        changed = before is None or before.version != version
        if changed:
            wh.append("user_datasets", _row(declaration, version, ids,
                                            datetime.now(timezone.utc).replace(tzinfo=None), run_id))
        wh.finish_run(run_id, rows_added=added)
    return added, version, changed
