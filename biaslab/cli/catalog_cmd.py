"""`biaslab models` and `biaslab collections`: what a warehouse holds, by model name (read-only)."""

from __future__ import annotations

import click

from .common import db_option, emit, format_option

MODEL_COLUMNS = ["model_name", "dtype", "quantization", "converted_from", "backend", "kind", "model_key"]
BRIEF_COLLECTION_COLUMNS = ["model_name", "dtype", "backend", "dataset", "protocol", "settings", "stimuli",
                            "requests", "stored", "pending", "last_run", "last_status", "model_key"]


@click.command("models")
@db_option
@format_option
def models_command(db: str, fmt: str) -> None:
    """List the registered models: name, dtype, quantization, converted_from (the quantized file the weights were
    de-quantized from, e.g. "gguf Q4_K_M"), backend ('hf' where the record names none), kind and model_key (the
    hash that identifies the model in every result table). Read-only."""
    from ..warehouse import Warehouse
    from ..warehouse.catalog import model_records

    with Warehouse.open(db, read_only=True, views=False) as wh:
        columns, rows = model_records(wh, MODEL_COLUMNS)
    emit(columns, rows, fmt, title=f"models ({db})")


#: what each count of `collections` counts, under its table (a row mixes two units)
UNITS = ("stimuli, stored and pending count stimuli of the dataset (stored: with evidence in this collection; "
         "pending: without); requests counts the distinct requests stored, in the protocol's unit (a stimulus may "
         "give several: a prompt per context, an option per sentence).")


@click.command("collections")
@db_option
@format_option
@click.option("--all-columns", is_flag=True, help="Also show evidence rows and the last run's start time.")
def collections_command(db: str, fmt: str, all_columns: bool) -> None:
    """List the collections: one row per model x dataset x protocol x settings (choice: mode, T, top_k, top_p,
    tokens, prompt version; gen: sampling settings; prob: scoring scheme). stimuli = the dataset's stimuli in the
    warehouse, requests = distinct requests stored, stored = stimuli with evidence, pending = stimuli without (a
    --limit run leaves the rest pending), last run = the latest run of that model, dataset and protocol whose
    recorded settings equal the collection's (mode, T, top_k, top_p, tokens, prompt version; sample mode and gen also
    the seed; prob the scheme), with its status. Read-only."""
    from ..warehouse import Warehouse
    from ..warehouse.catalog import COLLECTION_COLUMNS, collection_records

    with Warehouse.open(db, read_only=True, views=False) as wh:
        columns, rows = collection_records(wh, COLLECTION_COLUMNS if all_columns else BRIEF_COLLECTION_COLUMNS)
    emit(columns, rows, fmt, title=f"collections ({db})")
    if fmt == "table" and rows:
        import shutil
        import textwrap

        click.echo(textwrap.fill(UNITS, width=min(100, shutil.get_terminal_size((100, 24)).columns)))
