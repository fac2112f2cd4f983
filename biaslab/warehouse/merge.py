"""Merging shard warehouses (one per cluster job) into one warehouse, idempotently.

Each shard is an ordinary warehouse file written by `runners collect --shard i/n --out-shard DIR`, stamped in its
`meta` table with what it holds (dataset, protocol, protocol version, model key, shard count). A merge folder must
hold shards of ONE collection: mixing models, protocols or protocol versions is refused before anything is written.
Rows are inserted with the same identity-key anti-join as every append, one transaction per shard, so merging twice
changes nothing and an interrupted merge can simply be run again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import migrations
from .errors import WarehouseError
from .store import TABLE_KEYS, Warehouse

#: Parents before children, so a partially merged shard never shows children without parents.
MERGE_ORDER = ("stimuli", "models", "runs", "sequence_scores", "token_scores", "choice_requests", "choice_nodes",
               "choice_edges", "choice_probs", "gen_requests", "samples")


@dataclass(frozen=True)
class Shard:
    path: Path
    identity: dict


def read_shards(folder: Path) -> list[Shard]:
    """The shard files of a folder with their stamps; refuses unstamped, mixed or wrongly versioned shards."""
    files = sorted(Path(folder).glob("*.duckdb"))
    if not files:
        raise WarehouseError(f"no shard files (*.duckdb) in {folder}")
    shards = []
    for path in files:
        with Warehouse.open(path, read_only=True) as wh:  # refuses newer / unmigrated schema versions
            stamp = wh.get_meta("shard")
        if stamp is None:
            raise WarehouseError(f"{path} is not a shard (no shard stamp in its meta table)")
        shards.append(Shard(path, json.loads(stamp)))
    collection = {k: v for k, v in shards[0].identity.items() if k != "index"}
    for shard in shards[1:]:
        other = {k: v for k, v in shard.identity.items() if k != "index"}
        if other != collection:
            diff = {k: (collection.get(k), other.get(k)) for k in collection.keys() | other.keys()
                    if collection.get(k) != other.get(k)}
            raise WarehouseError(f"{shard.path} belongs to a different collection than {shards[0].path}: {diff}")
    indices = [s.identity["index"] for s in shards]
    if len(set(indices)) != len(indices):
        raise WarehouseError(f"shard index repeated in {folder}: {sorted(indices)}")
    return shards


def merge_shards(folder: Path, db: Path) -> dict[str, int]:
    """Insert every shard's rows not yet in `db`; returns rows added per table."""
    shards = read_shards(folder)
    added = {t: 0 for t in MERGE_ORDER}
    with Warehouse.open(db) as wh:
        if migrations.current_version() != int(wh.get_meta("schema_version")):
            raise WarehouseError(f"{db} is not at schema version {migrations.current_version()}")
        for shard in shards:
            wh.con.execute(f"ATTACH '{shard.path}' AS shard (READ_ONLY)")
            try:
                with wh.transaction():
                    for table in MERGE_ORDER:
                        keys = ", ".join(TABLE_KEYS[table])
                        before = wh.count(table)
                        wh.con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM shard.{table} "
                                       f"ANTI JOIN {table} USING ({keys})")
                        added[table] += wh.count(table) - before
            finally:
                wh.con.execute("DETACH shard")
    return added
