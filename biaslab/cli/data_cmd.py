"""`biaslab data ...`: list and fetch datasets, and load them into the stimuli table."""

from __future__ import annotations

import click

from .. import loaders
from ..loaders.fetch import DEFAULT_TIMEOUT, FetchError, fetch
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
@click.argument("dataset", required=False)
@db_option
@data_dir_option
@click.option("--file", "user_file", type=click.Path(dir_okay=False), default=None,
              help="Your own stimuli: a .csv, .tsv, .jsonl or .parquet file whose columns are stimulus fields "
                   "(text, item_id, slot, options, option_labels, gold, context, ...; other columns go to attrs). "
                   "Needs --name.")
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False), default=None,
              help="Your own stimuli from a template spec (.yaml or .toml): templates, fillers, options, contexts, "
                   "orders, protocols (docs/your-own-study.md). `biaslab data expand` shows its rows.")
@click.option("--name", default=None, help="The name of your dataset (--file; with --spec it overrides `name:`).")
@click.option("--protocols", default=None, metavar="LIST",
              help="--file: the protocols it is asked with, comma-separated, the default first (prob, choice, gen; "
                   "default prob).")
@click.option("--prompt", "prompt_file", type=click.Path(dir_okay=False), default=None,
              help="--file: your forced-choice prompt (JSON with the fields of the built-in forced_choice_v1).")
@click.option("--families", "families_file", type=click.Path(dir_okay=False), default=None,
              help="--file: the gen protocol's pronoun families, a JSON or YAML mapping family -> case -> forms.")
@click.option("--kind", type=click.Choice(["stimuli", "counterfactual"]), default="stimuli", show_default=True,
              help="--file: a file of stimuli, or of prompts (a `prompt` column, optional `id`) whose words of each "
                   "attribute are swapped into every group: a counterfactual audit (docs/your-own-study.md).")
@click.option("--attributes", default=None, metavar="LIST",
              help="--kind counterfactual: the attributes to vary, e.g. gender,race (default: gender, race, "
                   "religion, age and any given as ATTRIBUTE:GROUP columns).")
@click.option("--system", default=None, metavar="TEXT",
              help="--kind counterfactual: a system prompt sent before every variant (default: none).")
@click.option("--subset", default=None, help="Dataset subset, e.g. 'type2' for winobias.")
@click.option("--pronouns", default=None, help="Pronoun families, e.g. 'all' for tango.")
@click.option("--seed", type=int, default=None, help="Seed for datasets that draw a sample (misgendered names).")
@click.option("--option", "-o", "extra", multiple=True, metavar="KEY=VALUE", help="Other loader option (repeatable).")
@click.option("--accept-modified", is_flag=True,
              help="Load files that differ from their pinned upstream sha256 (edited or re-saved copies) instead of "
                   "refusing them; their stimuli record the file's own sha256 as upstream_version, so they never mix "
                   "with stimuli of the upstream file. Malformed rows are refused all the same.")
@click.option("--max-stimuli", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="--spec / --file: refuse a spec that expands to more stimuli than this, or a file of more rows "
                   "(counted before anything is expanded or read). A file is read and stored a block at a time, "
                   "in bounded memory.")
def load_command(dataset: str | None, db: str, data_dir: str | None, user_file, spec_file, name, protocols,
                 prompt_file, families_file, kind, attributes, system, subset, pronouns, seed, extra,
                 accept_modified: bool, max_stimuli: int) -> None:
    """Load DATASET's stimuli into the warehouse's stimuli table, or your own with --file or --spec.

    Built-in datasets: every file the loader reads is first checked against the sha256 pinned for the dataset (the
    checksums that `biaslab data list` shows): a modified, truncated or re-encoded file is refused, naming it,
    unless --accept-modified is given. Files are also checked row by row: a row cut short, a repeated row, an
    unterminated quote or a file that ends mid-row is refused with file and line. Datasets you supply yourself (no
    pinned checksum, e.g. negation, winoqueer) get the row checks only.

    Your own dataset (--file FILE --name NAME, or --spec SPEC): every row is validated with the stimulus schema
    (a bad row: one line naming file, line or row, field and reason); the dataset's protocols, prompt and pronoun
    families are stored with it, so `runners collect --dataset NAME` and `biaslab metrics options --dataset NAME`
    need nothing else. Loading an edited file adds new stimuli for the changed rows only and makes that version
    current; the old rows keep their evidence.

    A counterfactual audit (--file PROMPTS --kind counterfactual --name NAME): each prompt's words of gender, race,
    religion and age are swapped into every group (or the variants are given as ATTRIBUTE:GROUP columns); the
    variants of one prompt form one item, asked with the gen protocol and read by `biaslab metrics
    counterfactual`. Prompts without a word of an attribute are counted and listed, never dropped silently.

    The whole dataset is read and validated first, then appended in one transaction: bad input leaves the
    warehouse unchanged, and loading twice adds nothing (stimuli are keyed by a hash of their content).
    `biaslab data list` shows the known dataset names.
    """
    given = [x for x in (dataset, user_file, spec_file) if x]
    if len(given) != 1:
        raise click.UsageError("give one of: a built-in DATASET, --file FILE --name NAME, or --spec SPEC")
    if dataset is None:
        _load_user(db, user_file, spec_file, name, protocols, prompt_file, families_file, max_stimuli,
                   kind=kind, attributes=attributes, system=system)
        return
    for flag, value in (("--name", name), ("--protocols", protocols), ("--prompt", prompt_file),
                        ("--families", families_file), ("--attributes", attributes), ("--system", system),
                        ("--kind", None if kind == "stimuli" else kind)):
        if value is not None:
            raise click.UsageError(f"{flag} belongs to --file (your own dataset), not to built-in {dataset}")
    _load_builtin(dataset, db, data_dir, subset, pronouns, seed, extra, accept_modified)


def _load_builtin(dataset, db, data_dir, subset, pronouns, seed, extra, accept_modified) -> None:
    from ..runners.load import load

    done = load(dataset, db, data_dir=data_dir, accept_modified=accept_modified,
                **{"subset": subset, "pronouns": pronouns, "seed": seed, **parse_options(extra)})
    for note in done.notes:
        click.echo(note)
    click.echo(f"{dataset}: {done.read} stimuli read, {done.added} new; {done.total} {done.dataset} stimuli in {db}")


#: rows of a --file from which `data load` shows a progress bar (about 10,000 rows are read a second)
PROGRESS_ROWS = 20_000


def _load_user(db, user_file, spec_file, name, protocols, prompt_file, families_file, max_stimuli, *,
               kind: str = "stimuli", attributes: str | None = None, system: str | None = None) -> None:
    from ..runners.load import load_user
    from .progress import progress_bar

    bar, factory = progress_bar(f"reading {user_file}")

    def progress(total: int, done: int):  # a file of a few seconds' reading shows no bar
        return factory(total, done) if total >= PROGRESS_ROWS else (lambda n: None)

    with bar:
        done = load_user(db, file=user_file, spec=spec_file, name=name, protocols=protocols, prompt=prompt_file,
                         families=families_file, max_stimuli=max_stimuli,
                         progress=progress if user_file and kind == "stimuli" else None, kind=kind,
                         attributes=attributes, system=system)
    state = "now its current version" if done.changed else "already its current version"
    edited = (f", {done.edited} with edited attributes (same stimuli: evidence kept; `biaslab data history "
              f"{done.dataset}`)" if done.edited else "")
    click.echo(f"{done.dataset}: {done.read} stimuli read, {done.added} new{edited}; version {done.version} "
               f"({state}); protocols {', '.join(done.protocols)}; in {db}")
    for note in done.notes:
        click.echo(note)


_MAX_STIMULI = click.option(
    "--max-stimuli", type=click.IntRange(min=1), default=1_000_000, show_default=True,
    help="Refuse a spec that expands to more stimuli than this (counted before anything is expanded).")


@data_group.command("expand")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the rows here (.jsonl or .csv; default: print them as JSON lines).")
@click.option("--name", default=None, help="Dataset name (default: the spec's `name:`).")
@_MAX_STIMULI
def expand_command(spec: str, out: str | None, name: str | None, max_stimuli: int) -> None:
    """Show the stimuli a template spec expands to, one JSON object per line (the fields `--file` reads back), with
    a summary line on stderr. Nothing is written to any warehouse."""
    from ..loaders.user.dataset import from_spec
    from ..loaders.user.files import write_rows

    dataset = from_spec(spec, name, max_stimuli)
    count = write_rows(dataset.stimuli, out)
    labels = sorted({lab for s in dataset.stimuli for lab in (s.option_labels or ())})
    items = len({s.item_id for s in dataset.stimuli})
    click.echo(f"{dataset.declaration.name}: {count} stimuli, {items} items, options {labels}, protocols "
               f"{', '.join(dataset.declaration.protocols)}" + (f"; written to {out}" if out else ""), err=True)


@data_group.command("list")
@data_dir_option
@db_option
@format_option
@click.option("--count/--no-count", default=True, show_default=True, help="Load present datasets to count stimuli.")
def list_command(data_dir: str | None, db: str, fmt: str, count: bool) -> None:
    """Every known dataset: the built-in ones (folder, whether their files are present, checksum status, licence,
    stimulus count) and your own loaded into --db (source file, protocols, stimuli of the current version)."""
    root = loaders.default_data_dir(data_dir)
    rows = []
    for name, info in sorted(loaders.datasets().items()):
        status = info.verify(root)
        if all(v == "missing" for v in status.values()) and status:
            files = "absent"
        else:
            optional = [k for k, v in status.items() if v == "missing" and k in info.optional]
            bad = {k: v for k, v in status.items() if v not in ("ok", "unpinned") and k not in optional}
            files = "ok" if not bad else ", ".join(f"{k}: {v}" for k, v in bad.items())
            if optional:
                files += f" ({len(optional)} optional absent: `biaslab data fetch {name}`)"
        n = None
        if count and info.present(root):
            try:
                n = len(info.load(root, accept_modified=True))  # a mismatch shows in the files column
            except Exception as exc:  # a broken dataset must not hide the others; show why
                n = f"error: {str(exc).splitlines()[0][:80]}"
        rows.append((name, "built-in", info.folder, files, info.licence, ", ".join(info.protocols), n))
    rows += _user_rows(db)
    emit(["dataset", "source", "folder", "files", "licence", "protocols", "stimuli"], rows, fmt,
         title=f"datasets in {root} and {db}")


def _user_rows(db: str) -> list[tuple]:
    """One row per user dataset of the warehouse `db` (none when it does not exist)."""
    from pathlib import Path

    from ..warehouse.user_datasets import names

    if not Path(db).is_file():
        return []
    with Warehouse.open(db, read_only=True) as wh:
        found = names(wh)
    return [(name, f"your {d.declaration.source}", d.declaration.path, f"sha256 {d.declaration.file_sha256[:12]}",
             "-", ", ".join(d.declaration.protocols), len(d.stimulus_ids)) for name, d in found]


@data_group.command("history")
@click.argument("name")
@db_option
@format_option
@click.option("--edits", is_flag=True, help="List every attribute edit (stimulus, item, attribute, before, after) "
                                            "instead of the versions.")
def history_command(name: str, db: str, fmt: str, edits: bool) -> None:
    """The version history of your dataset NAME in --db: each version loaded (when, key, file and its sha256,
    stimuli, how many new and how many gone against the version before, stimuli whose attributes it edited). An
    edited attribute (a rating, a filler attribute, any extra column) keeps the stimulus and its evidence; --edits
    shows each change. Reads the warehouse, writes nothing."""
    from pathlib import Path

    from ..errors import UsageError
    from ..warehouse.user_datasets import attribute_changes, history

    if not Path(db).is_file():
        raise UsageError(f"no warehouse at {db} (load your dataset with `biaslab data load --file/--spec`)")
    with Warehouse.open(db, read_only=True) as wh:
        versions = history(wh, name)
        changes = attribute_changes(wh, name) if edits else []
    if not versions:
        raise UsageError(f"{db} holds no dataset of yours named {name!r} (`biaslab data list` shows those it holds)")
    if edits:
        emit(["loaded_at", "version", "stimulus_id", "item_id", "attribute", "before", "after"],
             [(str(r[0]), r[1][:12], *r[2:]) for r in changes], fmt,
             title=f"{name}: {_count(len(changes), 'attribute edit')} over {_count(len(versions), 'version')}")
        return
    emit(["loaded_at", "version", "file", "sha256", "stimuli", "new", "gone", "attributes edited"],
         [(str(v["loaded_at"]), v["version"][:12], v["path"], v["file_sha256"][:12], v["stimuli"], v["new"],
           v["gone"], v["attributes_edited"]) for v in versions], fmt,
         title=f"{name}: {_count(len(versions), 'version')} (the last is current)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


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
    root = loaders.default_data_dir(data_dir)
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
