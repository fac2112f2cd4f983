"""Merging shard warehouses (one per cluster job) into one warehouse, idempotently.

Each shard is an ordinary warehouse file written by `runners collect --shard i/n --out-shard DIR`, stamped in its
`meta` table with what it holds (dataset, protocol, protocol version, model key, shard count). A merge folder must
hold shards of ONE collection: mixing models, protocols or protocol versions is refused before anything is written.
Every shard is first checked read-only against the value and key rules of stored evidence (`rules`: probabilities in
[0, 1], finite log-probabilities, unique keys, references, rows of the stamp's model only); then all rows are
inserted with the same identity-key anti-join as every append, all shards in one transaction, so merging twice
changes nothing and a merge that fails leaves the target as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import migrations, rules
from .errors import WarehouseError
from ..schema import evidence
from ..sql.quoting import identifier, identifiers, literal
from .store import TABLE_KEYS, Warehouse

#: Parents before children, so a partially merged shard never shows children without parents (`evidence.ROLES`).
MERGE_ORDER = evidence.MERGE_ORDER


@dataclass(frozen=True)
class Shard:
    path: Path
    identity: dict


#: stamp field -> (type, what it holds)
STAMP = {"dataset": (str, "dataset name"), "protocol": (str, "protocol"), "model_key": (str, "model key"),
         "protocol_version": ((str, type(None)), "protocol version"), "count": (int, "shard count"),
         "index": (int, "shard index"), "limit": ((int, type(None)), "--limit of the collection")}


def _stamp(path: Path, text: str) -> dict:
    """A shard's stamp, checked field by field (one line naming the file and the field otherwise)."""
    try:
        stamp = json.loads(text)
    except ValueError:
        raise WarehouseError(f"{path}: the shard stamp is not JSON") from None
    if not isinstance(stamp, dict):
        raise WarehouseError(f"{path}: the shard stamp is not a JSON object")
    for field, (kind, what) in STAMP.items():
        value = stamp.get(field)
        if field not in stamp or isinstance(value, bool) or not isinstance(value, kind):
            raise WarehouseError(f"{path}: shard stamp field {field!r} ({what}) is missing or not a "
                                 f"{getattr(kind, '__name__', 'valid value')}: {value!r}")
    if not 0 <= stamp["index"] < stamp["count"]:
        raise WarehouseError(f"{path}: shard stamp index {stamp['index']} is not in 0..{stamp['count'] - 1}")
    return stamp


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
        shards.append(Shard(path, _stamp(path, stamp)))
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


def _own_model(con, alias_sql: str, shard: Shard) -> list[rules.Violation]:
    """Evidence rows of another model than the shard's stamp names."""
    out = []
    for table in rules.RESULT_TABLES:
        count, other = con.execute(f"SELECT count(*), any_value(model_key) FROM {alias_sql}.{identifier(table)} "
                                   f"WHERE model_key <> ?", [shard.identity["model_key"]]).fetchone()
        if count:
            out.append(rules.Violation(table, "model_key", f"the shard's model {shard.identity['model_key']}",
                                       count, f"row model_key={other!r}"))
    return out


def _same_columns(con, alias: str, shard: Shard, tables: set[str]) -> None:
    """Refuse (one line naming the file and the table) a shard table whose columns are not the schema's: an extra
    or a missing column would otherwise stop the merge inside DuckDB with a binder error."""
    for table in MERGE_ORDER:
        if table not in tables or table not in evidence.SCHEMAS:
            continue
        found = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_catalog = ? "
                                           "AND table_name = ? ORDER BY ordinal_position", [alias, table]).fetchall()]
        expected = evidence.column_names(table)
        if set(found) != set(expected):
            extra, missing = sorted(set(found) - set(expected)), sorted(set(expected) - set(found))
            said = "; ".join(part for part in (f"extra column(s) {', '.join(extra)}" if extra else "",
                                               f"missing column(s) {', '.join(missing)}" if missing else "") if part)
            raise WarehouseError(f"{shard.path}: table {table}: {said[:300]}: not a shard of this schema; nothing was "
                                 f"merged")


def check_shards(shards: list[Shard], db: Path) -> None:
    """Every rule of `rules` on every shard (references may point into `db` when it exists), and every evidence row
    of the stamp's model, read-only; the first problem as one line naming the shard file."""
    import duckdb

    con = duckdb.connect()
    try:
        known_sql = None
        if Path(db).exists():
            con.execute(f"ATTACH {literal(str(db))} AS target (READ_ONLY)")
            known_sql = lambda table: f"target.{identifier(table)}"  # noqa: E731
        for number, shard in enumerate(shards):
            alias = f"shard_{number}"
            con.execute(f"ATTACH {literal(str(shard.path))} AS {identifier(alias)} (READ_ONLY)")
            tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                                "WHERE table_catalog = ?", [alias]).fetchall()}
            _same_columns(con, alias, shard, tables)
            problems = [*rules.violations(con, lambda t, a=alias: f"{identifier(a)}.{identifier(t)}", tables,
                                          known_sql),
                        *_own_model(con, identifier(alias), shard)]
            if problems:
                more = f"; and {len(problems) - 1} more rule(s) broken" if len(problems) > 1 else ""
                raise WarehouseError(problems[0].line(str(shard.path)) + more + "; nothing was merged")
            con.execute(f"DETACH {identifier(alias)}")
    finally:
        con.close()


def merge_shards(folder: Path, db: Path) -> dict[str, int]:
    """Insert every shard's rows not yet in `db`, all shards in ONE transaction (a problem in any shard leaves `db`
    as it was); returns rows added per table. Every shard is checked first (`check_shards`)."""
    shards = read_shards(folder)
    check_shards(shards, db)
    added = {t: 0 for t in MERGE_ORDER}
    with Warehouse.open(db) as wh:
        if migrations.current_version() != int(wh.get_meta("schema_version")):
            raise WarehouseError(f"{db} is not at schema version {migrations.current_version()}")
        aliases = [f"shard_{n}" for n in range(len(shards))]
        for alias, shard in zip(aliases, shards):
            wh.con.execute(f"ATTACH {literal(str(shard.path))} AS {identifier(alias)} (READ_ONLY)")
        try:
            with wh.transaction():
                for alias in aliases:
                    for table in MERGE_ORDER:
                        before = wh.count(table)
                        wh.con.execute(f"INSERT INTO {identifier(table)} BY NAME SELECT * FROM "
                                       f"{identifier(alias)}.{identifier(table)} ANTI JOIN {identifier(table)} "
                                       f"USING ({identifiers(TABLE_KEYS[table])})")
                        added[table] += wh.count(table) - before
        finally:
            for alias in aliases:
                wh.con.execute(f"DETACH {identifier(alias)}")
    return added
