"""Users' own datasets in the warehouse (the `user_datasets` table, `biaslab.schema.user_dataset`): store a loaded
version with its stimuli, and read a dataset's current version (its latest row) without the file it came from."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..schema import DatasetDeclaration, evidence
from .errors import WarehouseError
from .store import Rollback


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


@dataclass(frozen=True)
class Stored:
    """What `store` did: stimuli added, the version key, whether that version became current now, and how many
    stored stimuli had their attributes edited (rows updated, evidence kept: `attribute_edits`)."""

    added: int
    version: str
    changed: bool
    edited: int = 0


def store(wh, declaration: DatasetDeclaration, ids: list[str], batches: Iterable, command: str) -> Stored:
    """Store a loaded user dataset in one transaction: a `runs` row, the stimuli (new ones only), the attributes of
    stored ones that changed (`edit_attributes`) and, when the dataset's current version is another, a
    `user_datasets` row.

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
    `Stored` (stimuli added, version, whether the version became current now, attributes edited).
    """
    version = declaration.version(ids)
    with wh.memory_limit(LOAD_MEMORY), wh.transaction():
        before = current(wh, declaration.name)
        if before is not None and before.declaration.identity != declaration.identity:
            raise WarehouseError(f"dataset {declaration.name}: stored with identity {before.declaration.identity!r} "
                                 f"meanwhile; load it again")
        run_id = wh.start_run(command, {"dataset": declaration.name, "source": declaration.source,
                                        "path": declaration.path, "file_sha256": declaration.file_sha256,
                                        "version": version})
        changed = before is None or before.version != version
        loaded_at = datetime.now(timezone.utc).replace(tzinfo=None) if changed else before.loaded_at
        added = edited = 0
        for batch in batches:
            if declaration.identity == "seen":  # "all": a changed attribute is a new stimulus
                edited += edit_attributes(wh, declaration.name, (version, loaded_at, run_id), batch)
            added += wh.append_file("stimuli", batch) if isinstance(batch, Path) else wh.append("stimuli", batch)
        if not (added or edited or changed):
            raise Rollback  # the current version again: nothing recorded, the file's bytes unchanged
        if changed:
            wh.append("user_datasets", _row(declaration, version, ids, loaded_at, run_id))
        wh.finish_run(run_id, rows_added=added)
    return Stored(added, version, changed, edited)


#: the stored rows of a dataset whose attributes differ from the incoming ones (the temporary view
#: `incoming_stimuli`: a Parquet file or an Arrow table of `stimuli` rows)
_EDITED = """
    SELECT s.stimulus_id, s.attrs AS attrs_before, i.attrs AS attrs_after, s.stereotype_rating AS rating_before,
           i.stereotype_rating AS rating_after
    FROM incoming_stimuli i JOIN stimuli s USING (stimulus_id)
    WHERE s.dataset = ? AND (s.attrs::VARCHAR IS DISTINCT FROM i.attrs::VARCHAR
                             OR s.stereotype_rating IS DISTINCT FROM i.stereotype_rating)"""
_RECORD = ("INSERT INTO attribute_edits BY NAME SELECT * FROM (SELECT ? AS dataset, ? AS version, ? AS loaded_at, "
           "e.*, ? AS run_id FROM (" + _EDITED + ") e) ANTI JOIN attribute_edits USING (dataset, version, loaded_at, "
           "stimulus_id)")
_UPDATE = ("UPDATE stimuli SET attrs = e.attrs_after, stereotype_rating = e.rating_after FROM (" + _EDITED + ") e "
           "WHERE stimuli.stimulus_id = e.stimulus_id")


def edit_attributes(wh, dataset: str, made_by: tuple[str, datetime, str], batch) -> int:
    """Give stored stimuli of `dataset` the attributes (`schema.ATTRIBUTES`) of `batch`'s rows with the same id, and
    record each change in `attribute_edits` (before, after, and `made_by`: the version, its `loaded_at` and the
    load's run id). A user stimulus's id leaves its attributes out (`schema.SeenStimulus`), so an edited rating
    keeps the stimulus and its evidence. Returns the stimuli edited.

    `batch`: the path of a Parquet file of `stimuli` rows, or a list of row dicts / an Arrow table of them."""
    import pyarrow as pa

    version, loaded_at, run_id = made_by
    if isinstance(batch, Path):
        incoming = wh.con.read_parquet(str(batch))
    else:
        incoming = wh.con.from_arrow(batch if isinstance(batch, pa.Table) else evidence.arrow(
            "stimuli", {c: [r.get(c) for r in batch] for c in evidence.SCHEMAS["stimuli"].names}))
    incoming.create_view("incoming_stimuli", replace=True)
    try:
        n = wh.con.execute(_RECORD, [dataset, version, loaded_at, run_id, dataset]).fetchone()[0]
        wh.con.execute(_UPDATE, [dataset])
    finally:
        wh.con.execute("DROP VIEW IF EXISTS incoming_stimuli")
    return n


def history(wh, name: str) -> list[dict]:
    """The versions of the user dataset `name`, oldest first: when each was loaded, its key, source path and
    sha256, its stimuli, how many were new and how many gone against the version before, and how many stored
    stimuli it edited the attributes of (`attribute_edits`). Empty for a dataset the warehouse does not hold."""
    if "user_datasets" not in wh.tables():
        return []
    rows = wh.rows("SELECT loaded_at, version, path, file_sha256, stimulus_ids FROM user_datasets WHERE dataset = ? "
                   "ORDER BY loaded_at", [name])
    edits = dict(wh.rows("SELECT loaded_at, count(*) FROM attribute_edits WHERE dataset = ? GROUP BY loaded_at",
                         [name])) if "attribute_edits" in wh.tables() else {}
    out, before = [], set()
    for loaded_at, version, path, sha, ids in rows:
        now = set(ids)
        out.append({"loaded_at": loaded_at, "version": version, "path": path, "file_sha256": sha,
                    "stimuli": len(now), "new": len(now - before), "gone": len(before - now),
                    "attributes_edited": edits.get(loaded_at, 0)})
        before = now
    return out


def attribute_changes(wh, name: str) -> list[tuple]:
    """Every attribute edit of the user dataset `name`, oldest first, one row per changed attribute: (loaded_at,
    version, stimulus_id, item_id, attribute, before, after); `stereotype_rating` and each key of `attrs`."""
    if "attribute_edits" not in wh.tables():
        return []
    rows = wh.rows("SELECT e.loaded_at, e.version, e.stimulus_id, s.item_id, e.attrs_before, e.attrs_after, "
                   "e.rating_before, e.rating_after FROM attribute_edits e LEFT JOIN stimuli s USING (stimulus_id) "
                   "WHERE e.dataset = ? ORDER BY e.loaded_at, s.item_id, e.stimulus_id", [name])
    out = []
    for loaded_at, version, sid, item, attrs_before, attrs_after, rating_before, rating_after in rows:
        head = (loaded_at, version, sid, item)
        if rating_before != rating_after:
            out.append((*head, "stereotype_rating", rating_before, rating_after))
        old, new = json.loads(attrs_before or "{}"), json.loads(attrs_after or "{}")
        out += [(*head, key, old.get(key), new.get(key)) for key in sorted(old.keys() | new.keys())
                if old.get(key) != new.get(key)]
    return out
