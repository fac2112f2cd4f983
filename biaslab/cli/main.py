"""The `biaslab` command: datasets, SQL over the warehouse, metrics and reports."""

from __future__ import annotations

import click

from .common import Group, LazyGroup, db_option, debug_option, version_option

#: the subcommands, imported when used (`LazyGroup`): name -> module:attribute
COMMANDS = {"sql": ".sql_cmd:sql_command", "info": ".sql_cmd:info_command", "models": ".catalog_cmd:models_command",
            "collections": ".catalog_cmd:collections_command", "data": ".data_cmd:data_group",
            "metrics": ".metrics_cmd:metrics_group", "report": ".metrics_cmd:report_group",
            "compare": ".compare_cmd:compare_command", "view": ".view_cmd:view_command",
            "annotate": ".metrics_cmd:annotate_group", "audit": ".audit_cmd:audit_group",
            "import": ".import_cmd:import_command"}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@version_option("biaslab")
@debug_option
def biaslab() -> None:
    """biaslab: measure gender and social bias in language models from stored evidence.

    Typical session: `biaslab data load winopron`, `runners collect --dataset winopron`,
    then `biaslab sql "..."` and `biaslab metrics ...` over the DuckDB warehouse.
    """


@click.group("warehouse", cls=Group)
def warehouse_group() -> None:
    """Warehouse maintenance: schema migration, shard merging, integrity checks, Parquet export and import."""


@warehouse_group.command("merge")
@click.argument("folder", type=click.Path(file_okay=False, exists=True))
@db_option
def merge_command(folder: str, db: str) -> None:
    """Merge the shard warehouses in FOLDER (from `runners collect --shard i/n --out-shard FOLDER`) into --db.

    Idempotent: merging again adds nothing. Shards of different models, protocols or protocol versions are refused.
    On a cluster: run one job per shard (e.g. a job array with --shard $TASK_ID/N and a shared --out-shard folder),
    then merge once, from one process.
    """
    from pathlib import Path

    from ..warehouse.merge import merge_shards, read_shards

    shards = read_shards(Path(folder))
    count = shards[0].identity["count"]
    missing = sorted(set(range(count)) - {s.identity["index"] for s in shards})
    added = merge_shards(Path(folder), Path(db))
    click.echo(", ".join(f"{t} +{n}" for t, n in added.items() if n) or "nothing new")
    if missing:
        click.echo(f"note: {len(shards)} of {count} shards merged; missing shard(s) {missing} (merge again later)")


@warehouse_group.command("check")
@db_option
@click.option("--verbose", "-v", is_flag=True, help="Also list the checks that passed.")
@click.option("--repair", is_flag=True,
              help="Mark runs left 'running' by a process of this machine that no longer exists as 'interrupted' "
                   "(their stored chunks stay; rerunning the collection completes it). Opens the warehouse for "
                   "writing.")
def check_command(db: str, verbose: bool, repair: bool) -> None:
    """Check a warehouse: every block of every table read (DuckDB verifies each block's checksum: a damaged or
    truncated file is named, where a query reads only the blocks it needs), schema version, duplicate identity keys,
    orphan rows (children without parents, results without stimuli or models), runs left 'running' by a process
    that is gone. Exit status 1 when a problem is found (after --repair, when one remains)."""
    from ..warehouse import Warehouse
    from ..warehouse.check import check_warehouse, format_findings, ok, repair_stale_runs

    if repair:
        with Warehouse.open(db) as wh:
            repaired = repair_stale_runs(wh)
        click.echo(f"marked {len(repaired)} run(s) of dead processes 'interrupted'"
                   + (f": {', '.join(r[:8] for r in repaired)}" if repaired else ""))
    with Warehouse.open(db, read_only=True) as wh:
        findings = check_warehouse(wh)
    click.echo(format_findings(findings, verbose=verbose))
    if not ok(findings):
        raise SystemExit(1)


@warehouse_group.command("export")
@click.argument("folder", type=click.Path(file_okay=False))
@db_option
@click.option("--force", is_flag=True, help="Write into a non-empty FOLDER, overwriting the export files there.")
def export_command(folder: str, db: str, force: bool) -> None:
    """Export the warehouse into FOLDER: every table as Parquet, views.sql (biaslab's views and macros over those
    Parquet files, so a plain DuckDB sees them: duckdb -c ".read FOLDER/views.sql") and manifest.json (export format,
    schema version, biaslab version, row counts). Opens the warehouse read-only and writes only into FOLDER; a
    non-empty FOLDER is refused unless --force. Read it back with `biaslab.open(FOLDER)` (engine duckdb or
    datafusion) or `biaslab warehouse import FOLDER --db NEW`."""
    from ..warehouse.handle import open_warehouse

    with open_warehouse(db) as handle:
        manifest = handle.export(folder, force=force)
    rows = sum(t["rows"] for t in manifest["tables"].values())
    click.echo(f"wrote {len(manifest['tables'])} tables ({rows:,} rows) and {len(manifest['views'])} views / macros "
               f"to {folder} (schema version {manifest['schema_version']}, biaslab {manifest['biaslab_version']})")


@warehouse_group.command("import")
@click.argument("folder", type=click.Path(file_okay=False, exists=True))
@db_option
def import_command(folder: str, db: str) -> None:
    """Create the warehouse --db (a new file) from an export FOLDER of `biaslab warehouse export`; an export of an
    older schema version is migrated."""
    from pathlib import Path

    from ..warehouse.export import import_export

    counts = import_export(Path(folder), Path(db))
    click.echo(f"imported {sum(counts.values()):,} rows in {len(counts)} tables into {db}")


@warehouse_group.command("migrate")
@db_option
def migrate_command(db: str) -> None:
    """Create the warehouse, or migrate an older one to this biaslab's schema version."""
    from ..warehouse import Warehouse

    with Warehouse.open(db) as wh:
        version = wh.get_meta("schema_version")
    click.echo(f"{db}: schema version {version}")


biaslab.add_command(warehouse_group)
