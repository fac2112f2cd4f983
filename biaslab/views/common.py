"""Shared pieces of the view expressions: the table source, JSON fields read portably, options and labels, model
labels."""

from __future__ import annotations

from collections.abc import Callable

import ibis
import ibis.expr.types as ir

#: base table name -> Ibis table (on whatever backend holds the warehouse or its export)
Source = Callable[[str], ir.Table]

#: The backend of a model whose record names none (the `models` table has no backend column before schema version
#: 6). The only place this default lives.
DEFAULT_BACKEND = "hf"


def json_field(column: ir.Value, key: str) -> ir.StringValue:
    """The value of `key` in a JSON object column, as text (NULL when absent or JSON null).

    Portable across Ibis backends (DuckDB JSON, DataFusion / Polars strings): read from the JSON text with a regular
    expression, so `key` must be unique in the document (it may be nested) and its value a string without escaped
    quotes, a number or a boolean. Equal to DuckDB's ``->>`` / ``json_extract_string`` on biaslab's stimulus
    attributes.

    Parameters
    ----------
    column : a JSON (or JSON text) column.
    key : the object key.

    Returns
    -------
    A string expression.
    """
    text = column.cast("string")
    quoted = text.re_extract(rf'"{key}"\s*:\s*"([^"]*)"', 1)
    bare = text.re_extract(rf'"{key}"\s*:\s*(-?[0-9][0-9.eE+-]*|true|false)', 1)
    return ibis.coalesce(quoted.nullif(""), bare.nullif(""))


def option_with_label(stimuli: ir.Table, label: str, name: str) -> ir.Table:
    """(stimulus_id, `name`): the option whose label is `label`, per stimulus that has one.

    Parameters
    ----------
    stimuli : a table with stimulus_id, options and option_labels.
    label : e.g. 'female'.
    name : the output column's name.
    """
    pairs = option_labels(stimuli)
    return pairs.filter(pairs.option_label == label).select("stimulus_id", **{name: pairs.option})


def option_labels(stimuli: ir.Table) -> ir.Table:
    """(stimulus_id, option, option_label): one row per option of each stimulus (options zipped with labels)."""
    return stimuli.select("stimulus_id", option=stimuli.options.unnest(), option_label=stimuli.option_labels.unnest())


def model_labels(source: Source) -> ir.Table:
    """One row per registered model: model_key, model_name, dtype, quantization, backend (DEFAULT_BACKEND where the
    record has none), kind, source, revision, bos_policy, registered_at, converted_from (the quantized file the
    weights were de-quantized from, e.g. "gguf Q4_K_M"; NULL where none or not recorded). Records of one name,
    backend and dtype with different revisions (a hosted model's snapshots) are named "name @ revision".

    Parameters
    ----------
    source : the base tables.
    """
    models = source("models")
    backend = (ibis.coalesce(models["backend"], ibis.literal(DEFAULT_BACKEND)) if "backend" in models.columns
               else ibis.literal(DEFAULT_BACKEND))
    # a hosted model's snapshots are records of one name, backend and dtype with other revisions: named apart
    same = ibis.window(group_by=[models["name"], models["backend"] if "backend" in models.columns else backend,
                                 models.dtype])
    snapshots = models.revision.notnull() & (models.revision.min().over(same) != models.revision.max().over(same))
    name = ibis.ifelse(snapshots, models["name"].concat(" @ ", models.revision), models["name"])
    converted = (models["converted_from"] if "converted_from" in models.columns
                 else ibis.null("string"))  # schema 11: the quantized file de-quantized (e.g. "gguf Q4_K_M")
    return models.select("model_key", model_name=name, dtype=models.dtype, quantization=models.quant,
                         backend=backend, kind=models.kind, source=models.source, revision=models.revision,
                         bos_policy=models.bos_policy, registered_at=models.registered_at,
                         converted_from=converted)
