"""`biaslab import`: another tool's answers or scores (lm-evaluation-harness, inspect_ai, BBQ's results files, a plain
CSV) stored as evidence of their own kind (`biaslab.runners.imports`)."""

from __future__ import annotations

import click

from .common import data_dir_option, db_option


@click.command("import")
@click.argument("path", type=click.Path(exists=True))
@click.option("--from", "kind", type=click.Choice(["lm-eval", "inspect", "bbq-results", "csv"]), default=None,
              help="The file's format (default: from its name and content; a folder: lm-eval's output folder).")
@click.option("--model", default=None,
              help="The model's name (default: as the tool recorded it; needed for a CSV). With several prediction "
                   "columns of a BBQ results file, each model is named NAME COLUMN.")
@click.option("--column", default=None,
              help="--from bbq-results: the one prediction column to import (default: every column whose name holds "
                   "'pred', each a model).")
@click.option("--dataset", type=click.Choice(["bbq", "crows-pairs", "crows-pairs-revised"]), default=None,
              help="--from csv: the dataset whose ids the file names (a CrowS-Pairs CSV needs it).")
@db_option
@data_dir_option
def import_command(path: str, kind: str | None, model: str | None, column: str | None, dataset: str | None, db: str,
                   data_dir: str | None) -> None:
    """Import answers or scores another tool computed on BBQ or CrowS-Pairs from PATH, so that `biaslab metrics
    bbq` / `crows-pairs`, `compare`, `report`, the leaderboard and `view` give them intervals, coverage and paired
    tests beside biaslab's own collections, without running the model again.

    \b
    Formats:
      lm-eval      lm-evaluation-harness --log_samples output (a samples_<task>_<date>.jsonl file, or the folder it
                   wrote with its results_*.json): the bbq task (multiple choice) and crows_pairs_english tasks
      inspect      an inspect_ai eval log (.eval or .json) of inspect_evals' bbq task
      bbq-results  BBQ's own results JSONL (dataset rows plus prediction columns, e.g. the authors' UnifiedQA
                   predictions in the data folder's bbq/results/UnifiedQA)
      csv          BBQ: example_id (Category.N) and answer (0-2, A-C or its text);
                   CrowS-Pairs: pair_id, score_more, score_less (log-likelihoods), with --dataset

    Each import is stored as a model of its own, named by tool, version, task and model (the tool is its backend):
    never mixed with biaslab's collections, and importing the same file again adds nothing. Every row is checked
    against the dataset's own stimuli (ids, answers, sentences); bad input is one line naming file and line, and
    nothing is stored.
    """
    from ..runners.imports import import_answers

    done = import_answers(path, db, kind=kind, model=model, column=column, dataset=dataset, data_dir=data_dir)
    for entry in done.imported:
        version = f" {entry['version']}" if entry["version"] else ""
        unit = "examples" if entry["dataset"] == "bbq" else "pairs"
        click.echo(f"{entry['model']} ({entry['tool']}{version}, task {entry['task']}): {entry['answers']} "
                   f"{entry['dataset']} {unit} read, {entry['added']} of {entry['rows']} rows new")
    studies = sorted({"bbq" if e["dataset"] == "bbq" else "crows-pairs" for e in done.imported})
    shown = " / ".join(f"biaslab metrics {study} --db {done.db}" for study in studies)
    click.echo(f"stored in {done.db}; see them with: {shown}")
