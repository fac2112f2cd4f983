"""`biaslab models` and `biaslab collections`: what a warehouse holds, by model name (read-only)."""

from __future__ import annotations

import click

from ..warehouse.handle import open_warehouse
from .common import db_option, emit, format_option

MODEL_COLUMNS = ["model_name", "dtype", "quantization", "converted_from", "backend", "kind", "model_key"]
BRIEF_COLLECTION_COLUMNS = ["model_name", "dtype", "backend", "dataset", "protocol", "settings", "stimuli",
                            "requests", "stored", "pending", "last_run", "last_status", "model_key"]


def model_rows(handle):
    """(columns, rows) of the registered models of a `biaslab.open` handle."""
    frame = handle.models()[MODEL_COLUMNS]
    frame = frame.astype(object).where(frame.notna(), None)  # an unrecorded converted_from shows empty, not "nan"
    return MODEL_COLUMNS, list(frame.itertuples(index=False, name=None))


def collection_rows(handle, columns=BRIEF_COLLECTION_COLUMNS):
    """(columns, rows) of the collections (see `biaslab.warehouse.catalog.collections`)."""
    frame = handle.collections()[list(columns)]
    frame = frame.astype(object).where(frame.notna(), None)
    return list(columns), list(frame.itertuples(index=False, name=None))


@click.command("models")
@db_option
@format_option
def models_command(db: str, fmt: str) -> None:
    """List the registered models: name, dtype, quantization, converted_from (the quantized file the weights were
    de-quantized from, e.g. "gguf Q4_K_M"), backend ('hf' where the record names none), kind and model_key (the
    hash that identifies the model in every result table). Read-only."""
    with open_warehouse(db) as handle:
        columns, rows = model_rows(handle)
    emit(columns, rows, fmt, title=f"models ({db})")


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
    from ..warehouse.catalog import COLLECTION_COLUMNS

    with open_warehouse(db) as handle:
        columns, rows = collection_rows(handle, COLLECTION_COLUMNS if all_columns else BRIEF_COLLECTION_COLUMNS)
    emit(columns, rows, fmt, title=f"collections ({db})")
