"""The `biaslab` command: datasets, SQL over the warehouse, metrics and reports."""

from __future__ import annotations

import click

from .. import __version__
from ..warehouse import Warehouse
from .common import Group, db_option
from .data_cmd import data_group
from .metrics_cmd import metrics_group, report_group
from .sql_cmd import info_command, sql_command


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="biaslab")
def biaslab() -> None:
    """biaslab: measure gender and social bias in language models from stored evidence.

    Typical session: `biaslab data load winopron`, `runners collect --dataset winopron`,
    then `biaslab sql "..."` and `biaslab metrics ...` over the DuckDB warehouse.
    """


@click.group("warehouse", cls=Group)
def warehouse_group() -> None:
    """Warehouse maintenance: schema migration."""


@warehouse_group.command("migrate")
@db_option
def migrate_command(db: str) -> None:
    """Create the warehouse, or migrate an older one to this biaslab's schema version."""
    with Warehouse.open(db) as wh:
        version = wh.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    click.echo(f"{db}: schema version {version}")


biaslab.add_command(sql_command)
biaslab.add_command(info_command)
biaslab.add_command(data_group)
biaslab.add_command(warehouse_group)
biaslab.add_command(metrics_group)
biaslab.add_command(report_group)
