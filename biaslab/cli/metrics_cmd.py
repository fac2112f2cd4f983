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


_OUT = click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
                    help="Also write the tables to this JSON file (strict JSON: the metric tables, biaslab and "
                         "schema versions, the parameters, and the collections the evidence came from), like "
                         "lm-eval's --output_path.")


def _named(tables: dict, wh: Warehouse) -> dict:
    """The tables with model_name, dtype and backend before every `model_key` column (hashes stay)."""
    from ..warehouse.catalog import warehouse_models, with_model_names

    names = warehouse_models(wh)
    return {k: (v if k.startswith("_") else with_model_names(v, names)) for k, v in tables.items()}


def _model_table(wh: Warehouse):
    """The registered models (model_key, model_name, dtype, backend, ...), for naming models in reports."""
    from ..warehouse.catalog import warehouse_models

    return warehouse_models(wh)


def _results_artifact(wh: Warehouse, study: str, tables: dict, datasets, parameters: dict, out: str) -> None:
    """Write the per-collection results file of `--out` (see `biaslab.metrics.results`)."""
    from ..metrics.results import write_results

    write_results(wh, study, {k: v for k, v in tables.items() if not k.startswith("_")}, datasets, parameters,
                  Path(out))


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
            notes = _notes(frame)
            if notes is not None:  # in a table, a long `note` column would squeeze the others: one line each below
                frame = frame.drop(columns="note")
            emit(list(frame.columns), frame.itertuples(index=False, name=None), fmt, title=name)
            for note in notes or ():
                click.echo(f"note: {note}")


def _notes(frame) -> list[str] | None:
    """The distinct non-empty values of a table's `note` column (prefixed with the row's metric `name` where the
    table has one), or None when the table has no `note` column."""
    if "note" not in frame.columns:
        return None
    named = "name" in frame.columns
    notes = []
    for _, row in frame.iterrows():
        note = row["note"]
        if isinstance(note, str) and note:
            notes.append(f"{row['name']}: {note}" if named else note)
    return list(dict.fromkeys(notes))


@metrics_group.command("contextuality")
@db_option
@format_option
@click.option("--draws", type=int, default=20, show_default=True,
              help="Exact mode: measurements drawn per stimulus from its exact distribution for mutual information.")
@click.option("--bootstrap", type=int, default=30, show_default=True, help="Bootstrap resamples of templates (SE).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for draws and bootstrap.")
@_OUT
def contextuality_command(db: str, fmt: str, draws: int, bootstrap: int, seed: int, out: str | None) -> None:
    """Contextual invariance on WinoPron: valid answers, KL to unprimed, Spearman with Misersky ratings, mutual
    information with prompt features, Contextuality-by-Default fractions and model overlap."""
    from ..metrics.contextuality import contextuality_report

    with Warehouse.open(db, read_only=True) as wh:
        tables = _named(contextuality_report(wh, draws=draws, bootstrap=bootstrap, seed=seed), wh)
        if out:
            _results_artifact(wh, "contextuality", tables, ["winopron"],
                              {"draws": draws, "bootstrap": bootstrap, "seed": seed}, out)
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
        names = _model_table(wh)
    index = write_report(tables, Path(out), db, names)
    click.echo(f"wrote {index}")


@metrics_group.command("negation")
@db_option
@format_option
@click.option("--intercept-only-on-failure", is_flag=True,
              help="Also fit (clearly labelled) random-intercept-only models where the random-slope fit fails.")
@_OUT
def negation_command(db: str, fmt: str, intercept_only_on_failure: bool, out: str | None) -> None:
    """Negation bias: perplexity (causal) or pseudo-perplexity (masked) per sentence, and per model the linear mixed
    model PPL ~ context * form with a random intercept and a random slope for context by root item (statsmodels;
    stereotype-consistent = 1, affirmative = 1). Convergence problems are reported in the table, never hidden."""
    from ..metrics.negation import NEGATION_DATASETS, condition_means, fit_mixed_model, sentence_perplexities

    with Warehouse.open(db, read_only=True) as wh:
        ppl = sentence_perplexities(wh)
        if ppl.empty:
            raise click.ClickException("no negation-bias sentence scores in the warehouse "
                                       "(run `runners collect --dataset negation-examples` first)")
        tables = _named({"mixed_model": fit_mixed_model(ppl, intercept_only_on_failure=intercept_only_on_failure),
                         "condition_means": condition_means(ppl)}, wh)
        if out:
            _results_artifact(wh, "negation", tables, list(NEGATION_DATASETS),
                              {"intercept_only_on_failure": intercept_only_on_failure}, out)
    _emit_tables(tables, fmt)


@metrics_group.command("calibration")
@db_option
@format_option
@click.option("--dataset", default=None, help="Only this dataset (e.g. gece-winobias); default: every pair dataset.")
@click.option("--bins", type=int, default=10, show_default=True, help="Bins of the ECE family.")
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="Bootstrap resamples for 95% intervals.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap, split and ablation.")
@_OUT
def calibration_command(db: str, fmt: str, dataset: str | None, bins: int, bootstrap: int, seed: int,
                        out: str | None) -> None:
    """Calibration of pronoun-pair probabilities: ECE (equal width / equal mass; top-label and male-class), MacroCE,
    ICE, Brier (gold label; and, labelled brier_upstream_convention with a note, the GECE code's convention),
    Gender-ECE with its parts (ECE of the items predicted male / female) and their gap, cc-ECE with its parts (ECE by
    gold gender), human alignment, all with bootstrap intervals; post-hoc Beta / isotonic / Platt / temperature
    calibration on a seeded half split; sample-size ablation; GenderLex variants."""
    from ..metrics.calibration_study import calibration_report_tables

    with Warehouse.open(db, read_only=True) as wh:
        tables = calibration_report_tables(wh, dataset, n_bins=bins, n_boot=bootstrap, seed=seed)
        if tables["metrics"].empty:
            raise click.ClickException("no scored pronoun pairs with gold labels in the warehouse "
                                       "(run `runners collect --dataset gece-winobias` first)")
        tables.pop("reliability")
        tables = _named(tables, wh)
        if out:
            _results_artifact(wh, "calibration", tables, sorted(set(tables["metrics"]["dataset"])),
                              {"dataset": dataset, "bins": bins, "bootstrap": bootstrap, "seed": seed}, out)
    _emit_tables(tables, fmt)


@report_group.command("calibration")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@click.option("--dataset", default=None, help="Only this dataset.")
@click.option("--bootstrap", type=int, default=1000, show_default=True)
def calibration_report_command(db: str, out: str, dataset: str | None, bootstrap: int) -> None:
    """Write OUT/index.html: calibration metrics with intervals (Gender-ECE / cc-ECE parts by gender side by side,
    the upstream Brier convention labelled), reliability diagrams with per-bin counts, post-hoc calibration,
    sample-size ablation and GenderLex variants side by side."""
    from ..metrics.calibration_study import calibration_report_tables
    from ..metrics.report_calibration import write_report

    with Warehouse.open(db, read_only=True) as wh:
        tables = calibration_report_tables(wh, dataset, n_boot=bootstrap)
        names = _model_table(wh)
    click.echo(f"wrote {write_report(tables, Path(out), db, names)}")


@report_group.command("negation")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
def negation_report_command(db: str, out: str) -> None:
    """Write OUT/index.html: the mixed-model table and the interaction plot (mean PPL per condition, 95% intervals)."""
    from ..metrics.negation import sentence_perplexities
    from ..metrics.report_negation import write_report

    with Warehouse.open(db, read_only=True) as wh:
        ppl = sentence_perplexities(wh)
        names = _model_table(wh)
    click.echo(f"wrote {write_report(ppl, Path(out), db, names)}")


_NO_PRONOUN = click.option(
    "--no-pronoun", type=click.Choice(["correct", "exclude"]), default="correct", show_default=True,
    help="Binary correctness of a continuation without a pronoun: correct (the paper's automatic metric) or "
         "exclude it from agreement and Beta fits (outcome shares always show it separately).")


@metrics_group.command("misgendering")
@db_option
@format_option
@_NO_PRONOUN
@_OUT
def misgendering_command(db: str, fmt: str, no_pronoun: str, out: str | None) -> None:
    """Misgendering meta-evaluation (MISGENDERED, RUFF, TANGO): correctness per method, model, dataset, pronoun and
    context (pre / post / template); instance-level std; raw agreement, Cohen's kappa and MCC between the
    probability- and generation-based methods over all samples (NaN with a note when a method is constant); Beta
    method-of-moments fit of per-instance disagreement; repetition rate and no-pronoun rate; human annotation
    agreement when annotations were imported."""
    from ..metrics.misgendering import misgendering_report

    with Warehouse.open(db, read_only=True) as wh:
        tables = _named(misgendering_report(wh, no_pronoun=no_pronoun), wh)
        if out:
            _results_artifact(wh, "misgendering", tables, ["misgendered", "ruff", "tango"],
                              {"no_pronoun": no_pronoun}, out)
    _emit_tables(tables, fmt)


@report_group.command("misgendering")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@_NO_PRONOUN
def misgendering_report_command(db: str, out: str, no_pronoun: str) -> None:
    """Write OUT/index.html: correctness bars per pronoun with 95% intervals, agreement tables, Beta (alpha, beta)
    scatter of disagreement, instance spread, generation quality; one section per model."""
    from ..metrics.misgendering import misgendering_report
    from ..metrics.report_misgendering import write_report

    with Warehouse.open(db, read_only=True) as wh:
        tables = misgendering_report(wh, no_pronoun=no_pronoun)
        names = _model_table(wh)
    index = write_report(tables, Path(out), db, names)
    click.echo(f"wrote {index}")


@click.group("annotate", cls=Group)
def annotate_group() -> None:
    """Human labels of generated continuations (misgendering): export a sheet, import the labels."""


@annotate_group.command("export")
@db_option
@click.option("--out", "out", type=click.Path(dir_okay=False), required=True, help="CSV file to write.")
@click.option("--n", "n", type=int, default=100, show_default=True, help="Continuations to draw at random.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--dataset", default=None, help="Only this dataset (misgendered, ruff, tango).")
def annotate_export_command(db: str, out: str, n: int, seed: int, dataset: str | None) -> None:
    """Write a CSV (sample_id, dataset, declared, context, prompt_text, text, and empty label /
    extraneous_gendered / annotator columns) of N random continuations. The heuristic's outcome is not shown."""
    from ..metrics.annotations import export_sheet

    if n < 1:
        raise click.UsageError("--n must be at least 1")
    with Warehouse.open(db, read_only=True) as wh:
        written = export_sheet(wh, Path(out), n, seed, dataset)
    click.echo(f"wrote {written} continuations to {out}")


@annotate_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@db_option
def annotate_import_command(file: str, db: str) -> None:
    """Import FILE (CSV with sample_id, label = correct | misgendering | no_pronoun, extraneous_gendered =
    true | false, annotator) into the `annotations` table. The whole file is checked first: any bad row stops the
    import with file, line and field, and nothing is written. Re-importing adds nothing."""
    from ..metrics.annotations import import_annotations

    with Warehouse.open(db) as wh:
        read, added = import_annotations(wh, Path(file))
    click.echo(f"{file}: {read} annotations read, {added} new")
