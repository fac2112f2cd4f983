"""`biaslab metrics ...` and `biaslab report ...`: statistics and reports computed from stored evidence only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..warehouse import Warehouse
from .common import Group, db_option, emit, format_option


@click.group("metrics", cls=Group)
def metrics_group() -> None:
    """Study metrics computed from the warehouse (no model is loaded)."""


@click.group("report", cls=Group)
def report_group() -> None:
    """HTML reports with tables and figures, computed from the warehouse."""


def _emit_tables(tables: dict, fmt: str) -> None:
    public = {k: v for k, v in tables.items() if not k.startswith("_")}
    if fmt == "json":
        click.echo(json.dumps({k: json.loads(v.to_json(orient="records")) for k, v in public.items()}, indent=1))
        return
    for name, frame in public.items():
        if fmt == "csv":
            sys.stdout.write(f"# {name}\n")
            frame.to_csv(sys.stdout, index=False)
        else:
            emit(list(frame.columns), frame.itertuples(index=False, name=None), fmt, title=name)


@metrics_group.command("contextuality")
@db_option
@format_option
@click.option("--draws", type=int, default=20, show_default=True,
              help="Exact mode: measurements drawn per stimulus from its exact distribution for mutual information.")
@click.option("--bootstrap", type=int, default=30, show_default=True, help="Bootstrap resamples of templates (SE).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for draws and bootstrap.")
def contextuality_command(db: str, fmt: str, draws: int, bootstrap: int, seed: int) -> None:
    """Contextual invariance on WinoPron: valid answers, KL to unprimed, Spearman with Misersky ratings, mutual
    information with prompt features, Contextuality-by-Default fractions and model overlap."""
    from ..metrics.contextuality import contextuality_report

    with Warehouse.open(db, read_only=True) as wh:
        tables = contextuality_report(wh, draws=draws, bootstrap=bootstrap, seed=seed)
    _emit_tables(tables, fmt)


@report_group.command("contextuality")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@click.option("--seed", type=int, default=0, show_default=True)
def contextuality_report_command(db: str, out: str, seed: int) -> None:
    """Write OUT/index.html: p(f | c) distributions, mean KL, correlation bars with significance stars, mutual
    information with error bars, contextual fractions, model-overlap matrix; one section per model setting."""
    from ..metrics.contextuality import contextuality_report
    from ..metrics.report_contextuality import write_report

    with Warehouse.open(db, read_only=True) as wh:
        tables = contextuality_report(wh, seed=seed)
    index = write_report(tables, Path(out), db)
    click.echo(f"wrote {index}")
