"""`biaslab data ...`: list and fetch datasets, and load them into the stimuli table."""

from __future__ import annotations

import click

from .. import loaders
from ..loaders.fetch import DEFAULT_TIMEOUT, FetchError, fetch
from ..loaders.options import pop_flag
from ..loaders.registry import default_data_dir
from ..warehouse import Warehouse
from .common import Group, data_dir_option, db_option, emit, format_option


@click.group("data", cls=Group)
def data_group() -> None:
    """Datasets: which are known and present, and loading them into the stimuli table."""


def parse_options(pairs: tuple[str, ...]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--option")
        options[key.replace("-", "_")] = value
    return options


@data_group.command("load")
@click.argument("dataset")
@db_option
@data_dir_option
@click.option("--subset", default=None, help="Dataset subset, e.g. 'type2' for winobias.")
@click.option("--pronouns", default=None, help="Pronoun families, e.g. 'all' for tango.")
@click.option("--seed", type=int, default=None, help="Seed for datasets that draw a sample (misgendered names).")
@click.option("--option", "-o", "extra", multiple=True, metavar="KEY=VALUE", help="Other loader option (repeatable).")
@click.option("--accept-modified", is_flag=True,
              help="Load files that differ from their pinned upstream sha256 (edited or re-saved copies) instead of "
                   "refusing them; their stimuli record the file's own sha256 as upstream_version, so they never mix "
                   "with stimuli of the upstream file. Malformed rows are refused all the same.")
def load_command(dataset: str, db: str, data_dir: str | None, subset, pronouns, seed, extra,
                 accept_modified: bool) -> None:
    """Load DATASET's stimuli into the warehouse's stimuli table.

    Every file the loader reads is first checked against the sha256 pinned for the dataset (the checksums that
    `biaslab data list` shows): a modified, truncated or re-encoded file is refused, naming it, unless
    --accept-modified is given. Files are also checked row by row: a row cut short, a repeated row, an unterminated
    quote or a file that ends mid-row is refused with file and line. Datasets you supply yourself (no pinned
    checksum, e.g. negation, winoqueer) get the row checks only.

    The whole dataset is read and validated first, then appended in one transaction: bad input leaves the
    warehouse unchanged, and loading twice adds nothing (stimuli are keyed by a hash of their content).
    `biaslab data list` shows the known dataset names.
    """
    info = loaders.get(dataset)
    options = {"subset": subset, "pronouns": pronouns, "seed": seed, **parse_options(extra)}
    options = {k: v for k, v in options.items() if v is not None}
    accept_modified, options = pop_flag(options, "accept_modified", accept_modified)  # or -o accept_modified=true
    loaded = info.load_verified(default_data_dir(data_dir), accept_modified=accept_modified, **options)
    stimuli = loaded.stimuli
    if not stimuli:
        raise click.ClickException(f"dataset {dataset}: no stimuli produced")
    rows = [s.to_row() for s in stimuli]
    params = {"dataset": info.name, **options}
    if accept_modified:
        params["accept_modified"] = True
        params["modified_files"] = {c.rel: c.sha256 for c in loaded.modified}
    with Warehouse.open(db) as wh, wh.transaction():  # the run row and the stimuli: both stored or neither
        run_id = wh.start_run(f"biaslab data load {dataset}", params)
        added = wh.append("stimuli", rows)
        wh.finish_run(run_id, rows_added=added)
        total = wh.count("stimuli", "dataset = ?", [info.name])
    for note in loaded.notes():
        click.echo(note)
    click.echo(f"{dataset}: {len(stimuli)} stimuli read, {added} new; {total} {info.name} stimuli in {db}")


@data_group.command("list")
@data_dir_option
@format_option
@click.option("--count/--no-count", default=True, show_default=True, help="Load present datasets to count stimuli.")
def list_command(data_dir: str | None, fmt: str, count: bool) -> None:
    """Every known dataset: folder, whether its files are present, checksum status, licence, stimulus count."""
    root = default_data_dir(data_dir)
    rows = []
    for name, info in sorted(loaders.datasets().items()):
        status = info.verify(root)
        if all(v == "missing" for v in status.values()) and status:
            files = "absent"
        else:
            bad = {k: v for k, v in status.items() if v not in ("ok", "unpinned")}
            files = "ok" if not bad else ", ".join(f"{k}: {v}" for k, v in bad.items())
        n = None
        if count and info.present(root):
            try:
                n = len(info.load(root, accept_modified=True))  # a mismatch shows in the files column
            except Exception as exc:  # a broken dataset must not hide the others; show why
                n = f"error: {str(exc).splitlines()[0][:80]}"
        rows.append((name, info.folder, files, info.licence, n))
    emit(["dataset", "folder", "files", "licence", "stimuli"], rows, fmt, title=f"datasets in {root}")


@data_group.command("fetch")
@click.argument("dataset")
@data_dir_option
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT, show_default=True,
              envvar="BIASLAB_FETCH_TIMEOUT", help="Network timeout per connection / read, in seconds.")
@click.option("--force", is_flag=True, help="Replace files that are present but do not match the pinned sha256.")
def fetch_command(dataset: str, data_dir: str | None, timeout: float, force: bool) -> None:
    """Download DATASET's pinned upstream files into <data-dir>/<folder>/ (needs internet access).

    Files come from commit-pinned URLs and are checked against the pinned sha256 (WinoPron and RUFF ship as
    password zips; the published passwords are used). All files are downloaded and verified in a temporary folder
    first: on any failure nothing is written. The data are not redistributed by biaslab: check each dataset's
    licence (`biaslab data list`).
    """
    info = loaders.get(dataset)
    root = default_data_dir(data_dir)
    try:
        result = fetch(info, root, timeout=timeout, force=force)
    except FetchError as exc:
        raise click.ClickException(f"fetch {dataset}: {exc}") from None
    if not result.fetched:
        click.echo(f"{dataset}: all {len(result.present)} files already present and verified in {root}")
        return
    folders = ", ".join(str(f) for f in result.folders)
    click.echo(f"{dataset}: fetched {len(result.fetched)} files ({len(result.present)} already present) into "
               f"{folders}; licence: {info.licence}")


@data_group.command("expand-negation")
@click.option("--in", "in_path", type=click.Path(dir_okay=False, exists=True), required=True,
              help="Root items in the negation loader's CSV format.")
@click.option("--synonyms", "synonyms_path", type=click.Path(dir_okay=False, exists=True), required=True,
              help="CSV with columns noun,synonym (one row per synonym of a category noun).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, help="Expanded CSV to write.")
@click.option("--keep-roots", is_flag=True, help="Also copy the root rows unchanged.")
def expand_negation_command(in_path: str, synonyms_path: str, out_path: str, keep_roots: bool) -> None:
    """The negation-bias paper's expansion of root items: each category noun replaced by each listed synonym, and
    context + description rephrased as "X because Y", "X, who Y", "X, which means Y", "Y, that's why X". The output
    is in the loader's format (put it at <data-dir>/negation/negation_bias.csv to load it as `negation`)."""
    from ..loaders.negation_expand import expand_files

    summary = expand_files(in_path, synonyms_path, out_path, keep_roots=keep_roots)
    click.echo(f"{summary['rows_in']} rows ({summary['roots']} roots) -> {summary['rows_out']} rows, "
               f"{summary['items_out']} items in {out_path}")
