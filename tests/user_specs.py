"""A user's template spec loaded into a fresh warehouse and collected with a given (tiny) model, as the option,
compare and view tests need it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.runners.collect import CollectConfig, collect


def spec_warehouse(folder: Path, spec_text: str, dataset: str, loaded, collections: Iterable[dict]) -> Path:
    """folder/w.duckdb holding the spec `spec_text` (loaded with `biaslab data load --spec`) and one collection per
    mapping of `collections` (the `runners collect` options, e.g. {"protocol": "choice", "mode": "sample"})."""
    spec, path = folder / "spec.yaml", folder / "w.duckdb"
    spec.write_text(spec_text)
    result = CliRunner().invoke(cli, ["data", "load", "--spec", str(spec), "--db", str(path)])
    assert result.exit_code == 0, result.output
    for options in collections:
        collect(CollectConfig(dataset=dataset, db=str(path), **options), loaded=loaded)
    return path
