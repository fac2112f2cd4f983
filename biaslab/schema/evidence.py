"""The warehouse's tables as Arrow schemas: the one description of every stored column (docs/design.md section 4).

Each table has one `pyarrow.Schema` here, in the column order of the warehouse (the numbered migrations in
`biaslab/sql/schema/` create the same columns; `tests/schema/test_evidence_schema.py` diffs the two), and its
role (`ROLES`: identity key, docs/design.md section 3; the rules its values meet; the request it hangs from; whether
a merge copies it; what one row counts as). Keys, value rules, references, merge order and a collection's "N added"
are all derived from `ROLES`; the migrations mark the same key columns with ``-- key`` (the test diffs them). Runners
build their rows with `arrow`, so every appended column has the stored type; Ibis views compile against
`ibis_schema`; import, merge and check read the keys from here.

Type names follow DuckDB: VARCHAR = string, INTEGER = int32, BIGINT = int64, DOUBLE = float64, FLOAT = float32,
``X[]`` = list of X, JSON = string marked ``json`` (field metadata), TIMESTAMP = timestamp[us] without zone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

_JSON = {b"duckdb_type": b"JSON"}


def _f(name: str, kind: pa.DataType, nullable: bool = True, *, json: bool = False) -> pa.Field:
    return pa.field(name, kind, nullable=nullable, metadata=_JSON if json else None)


S, I32, I64, F64, F32, BOOL, TS = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.float32(), pa.bool_(), \
    pa.timestamp("us")
KEY = False  # NOT NULL

SCHEMAS: dict[str, pa.Schema] = {
    "meta": pa.schema([_f("key", S, KEY), _f("value", S, KEY)]),
    "stimuli": pa.schema([
        _f("stimulus_id", S, KEY), _f("dataset", S, KEY), _f("upstream_version", S, KEY), _f("item_id", S, KEY),
        _f("text", S, KEY), _f("template", S), _f("slot", S), _f("prime", S), _f("context", S), _f("form", S),
        _f("stereotype", S), _f("stereotype_rating", F64), _f("pronoun_set", S), _f("grammatical_case", S),
        _f("options", pa.list_(S)), _f("option_labels", pa.list_(S)), _f("option_texts", pa.list_(S)),
        _f("option_order", S), _f("gold", S), _f("referent_role", S), _f("occupation", S), _f("participant", S),
        _f("name", S), _f("attrs", S, json=True)]),
    "models": pa.schema([
        _f("model_key", S, KEY), _f("name", S, KEY), _f("source", S, KEY), _f("revision", S), _f("kind", S, KEY),
        _f("dtype", S, KEY), _f("quant", S, KEY), _f("tokenizer", S), _f("bos_policy", S, KEY),
        _f("registered_at", TS, KEY), _f("backend", S), _f("backend_version", S), _f("model_args", S),
        _f("engine_args", S), _f("converted_from", S)]),
    "runs": pa.schema([
        _f("run_id", S, KEY), _f("command", S, KEY), _f("params", S, json=True),
        _f("generation_config", S, json=True), _f("versions", S, json=True), _f("device", S), _f("model_key", S),
        _f("started_at", TS, KEY), _f("finished_at", TS), _f("status", S, KEY), _f("rows_added", I64),
        _f("host", S), _f("pid", I32), _f("pid_started", I64)]),
    "sequence_scores": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("stimulus_id", S, KEY), _f("protocol", S, KEY),
        _f("option", S), _f("scheme", S, KEY), _f("text", S, KEY), _f("n_tokens", I32, KEY),
        _f("sum_logprob", F64, KEY), _f("target_char_start", I32), _f("target_char_end", I32),
        _f("target_token_start", I32), _f("target_token_end", I32), _f("target_logprob", F64), _f("run_id", S)]),
    "token_scores": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("position", I32, KEY), _f("token_id", I32, KEY),
        _f("logprob", F64, KEY), _f("char_start", I32), _f("char_end", I32)]),
    "choice_requests": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("stimulus_id", S, KEY), _f("protocol", S, KEY),
        _f("mode", S, KEY), _f("prompt_version", S, KEY), _f("adaptation", S, KEY), _f("prompt_text", S, KEY),
        _f("options", pa.list_(S), KEY), _f("max_new_tokens", I32, KEY), _f("k_store", I32), _f("run_id", S)]),
    "choice_nodes": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("node_id", I32, KEY), _f("parent_id", I32),
        _f("token_id", I32), _f("depth", I32, KEY), _f("topk_ids", pa.list_(I32), KEY),
        _f("topk_logits", pa.list_(F32), KEY), _f("logsumexp", F64, KEY)]),
    "choice_edges": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("node_id", I32, KEY), _f("token_id", I32, KEY),
        _f("outcome", S, KEY), _f("child_id", I32)]),
    "choice_probs": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("option", S, KEY), _f("temperature", F64, KEY),
        _f("top_k", I32, KEY), _f("top_p", F64, KEY), _f("prob", F64, KEY)]),
    "samples": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("sample_index", I32, KEY), _f("seed", I64, KEY),
        _f("temperature", F64, KEY), _f("top_k", I32, KEY), _f("top_p", F64, KEY), _f("max_new_tokens", I32, KEY),
        _f("stimulus_id", S, KEY), _f("text", S, KEY), _f("token_ids", pa.list_(I32), KEY),
        _f("token_logprobs", pa.list_(F64), KEY), _f("finish_reason", S, KEY), _f("answer", S),
        _f("valid", BOOL, KEY), _f("run_id", S)]),
    "gen_requests": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("stimulus_id", S, KEY), _f("dataset", S, KEY),
        _f("context", S, KEY), _f("prompt_version", S, KEY), _f("prompt_text", S, KEY), _f("declared", S, KEY),
        _f("pronoun_vocabulary", S, KEY, json=True), _f("max_new_tokens", I32, KEY),
        _f("min_new_tokens", I32, KEY), _f("run_id", S)]),
    "annotations": pa.schema([
        _f("sample_id", S, KEY), _f("annotator", S, KEY), _f("label", S, KEY), _f("extraneous_gendered", BOOL, KEY),
        _f("source_file", S), _f("imported_at", TS, KEY), _f("note", S)]),
    "user_datasets": pa.schema([
        _f("dataset", S, KEY), _f("version", S, KEY), _f("loaded_at", TS, KEY), _f("source", S, KEY),
        _f("path", S), _f("file_sha256", S, KEY), _f("declaration", S, KEY, json=True),
        _f("stimulus_ids", pa.list_(S), KEY), _f("run_id", S)]),
    "attribute_edits": pa.schema([
        _f("dataset", S, KEY), _f("version", S, KEY), _f("loaded_at", TS, KEY), _f("stimulus_id", S, KEY),
        _f("attrs_before", S, json=True), _f("attrs_after", S, json=True), _f("rating_before", F64),
        _f("rating_after", F64), _f("run_id", S)]),
    "api_batches": pa.schema([
        _f("model_key", S, KEY), _f("batch_id", S, KEY), _f("provider", S, KEY), _f("custom_ids", pa.list_(S), KEY),
        _f("submitted_at", TS, KEY), _f("run_id", S)]),
    "chat_positions": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("position", I32, KEY), _f("token", S, KEY),
        _f("logprob", F64, KEY), _f("top_tokens", pa.list_(S), KEY), _f("top_logprobs", pa.list_(F64), KEY),
        _f("answer_start", BOOL, KEY)]),
    "imported_answers": pa.schema([
        _f("model_key", S, KEY), _f("request_id", S, KEY), _f("stimulus_id", S, KEY), _f("tool", S, KEY),
        _f("task", S, KEY), _f("option", S), _f("loglik", F64), _f("chosen", BOOL), _f("answer_text", S),
        _f("source_line", I32, KEY), _f("run_id", S)]),
}

@dataclass(frozen=True)
class Role:
    """What a table is, besides its columns: the one declaration that keys, value rules, references, merge order and
    the "N added" of a collection are derived from (docs/design.md sections 3 and 4).

    Attributes
    ----------
    key : the identity key (docs/design.md section 3): an append skips a row whose key is stored.
    evidence : rows are a model's evidence: each names a model of `models`.
    names_stimulus : each row names a stimulus of `stimuli`.
    parent : the request table whose row (same model_key and request_id) every row of this table needs.
    merged : a shard merge copies this table (annotations are imported, never merged).
    unit : what one row is, for a collection's "N added" (None: the table is no protocol's main table).
    values : column -> value kind, a key of `VALUE_KINDS` (rules every stored value meets).
    """

    key: tuple[str, ...]
    evidence: bool = False
    names_stimulus: bool = False
    parent: str | None = None
    merged: bool = True
    unit: str | None = None
    values: Mapping[str, str] = dataclasses.field(default_factory=dict)


#: value kinds of `Role.values`: kind -> what a value must be (the SQL that checks it: `warehouse.rules`)
VALUE_KINDS: dict[str, str] = {
    "probability": "a probability in [0, 1]",
    "logprob": "a finite log-probability <= 0",
    "logprobs": "finite log-probabilities <= 0",
    "count": "a token count >= 0",
    "logsumexp": "a finite logsumexp",
    "logits": "finite logits",
    "temperature": "a temperature > 0",
    "top_k": "a top_k >= 0 (0: no top-k truncation)",
    "top_p": "a top_p in (0, 1]",
}

_SAMPLING = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p"}

#: every table that takes appends, in merge order (a parent before its children); `meta` is keyed by its `key`
ROLES: dict[str, Role] = {
    "stimuli": Role(("stimulus_id",)),
    "user_datasets": Role(("dataset", "version", "loaded_at")),
    "attribute_edits": Role(("dataset", "version", "loaded_at", "stimulus_id"), names_stimulus=True),
    "models": Role(("model_key",)),
    "runs": Role(("run_id",)),
    "sequence_scores": Role(("model_key", "request_id"), evidence=True, names_stimulus=True,
                            unit="scored sequences",
                            values={"sum_logprob": "logprob", "target_logprob": "logprob", "n_tokens": "count"}),
    "token_scores": Role(("model_key", "request_id", "position"), evidence=True, parent="sequence_scores",
                         values={"logprob": "logprob"}),
    "choice_requests": Role(("model_key", "request_id"), evidence=True, names_stimulus=True, unit="requests"),
    "choice_nodes": Role(("model_key", "request_id", "node_id"), evidence=True, parent="choice_requests",
                         values={"logsumexp": "logsumexp", "topk_logits": "logits"}),
    "choice_edges": Role(("model_key", "request_id", "node_id", "token_id"), evidence=True,
                         parent="choice_requests"),
    "choice_probs": Role(("model_key", "request_id", "option", "temperature", "top_k", "top_p"), evidence=True,
                         parent="choice_requests", values={"prob": "probability", **_SAMPLING}),
    "chat_positions": Role(("model_key", "request_id", "position"), evidence=True, parent="choice_requests",
                           values={"logprob": "logprob", "top_logprobs": "logprobs"}),
    "gen_requests": Role(("model_key", "request_id"), evidence=True, names_stimulus=True),
    "samples": Role(("model_key", "request_id", "sample_index", "seed", "temperature", "top_k", "top_p",
                     "max_new_tokens"), evidence=True, names_stimulus=True, unit="samples",
                    values={"token_logprobs": "logprobs", **_SAMPLING}),
    "imported_answers": Role(("model_key", "request_id"), evidence=True, names_stimulus=True,
                             unit="imported answers", values={"loglik": "logprob"}),
    "api_batches": Role(("model_key", "batch_id")),
    "annotations": Role(("sample_id", "annotator"), merged=False),
}

#: identity key of every table that takes appends (docs/design.md section 3), from `ROLES`
KEYS: dict[str, tuple[str, ...]] = {table: role.key for table, role in ROLES.items()}
#: the tables a shard merge copies, parents first
MERGE_ORDER: tuple[str, ...] = tuple(t for t, role in ROLES.items() if role.merged)
#: tables whose rows are a model's evidence (each names a model of `models`)
RESULT_TABLES: tuple[str, ...] = tuple(t for t, role in ROLES.items() if role.evidence)
#: tables whose rows name a stimulus of `stimuli`
STIMULUS_TABLES: tuple[str, ...] = tuple(t for t, role in ROLES.items() if role.names_stimulus)
#: (child table, parent table, columns): child rows need a parent row with the same values
PARENTS: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    (t, role.parent, ("model_key", "request_id")) for t, role in ROLES.items() if role.parent)


def added_unit(table: str) -> str:
    """What one row of `table` is, for a collection's "N added" ("rows" for a table that declares none)."""
    role = ROLES.get(table)
    return role.unit if role is not None and role.unit else "rows"


#: every table of the current schema, in the order of `SCHEMAS`
TABLES: tuple[str, ...] = tuple(SCHEMAS)


def is_json(field: pa.Field) -> bool:
    """Whether a string column holds JSON (DuckDB type JSON)."""
    return bool(field.metadata) and field.metadata.get(b"duckdb_type") == b"JSON"


def arrow(table: str, columns: Mapping[str, Any], **constants: Any) -> pa.Table:
    """Rows of `table` as an Arrow table with the stored column types.

    Parameters
    ----------
    table : a name of `SCHEMAS`.
    columns : column name -> values (a sequence, a NumPy array or an Arrow array), all of one length.
    constants : column name -> one value repeated on every row (e.g. model_key, run_id).

    Returns
    -------
    pyarrow.Table with the given columns in the table's column order, each of its stored type (nullable, so
    that a missing value is reported by the warehouse's NOT NULL constraint rather than by Arrow).
    """
    schema = SCHEMAS[table]
    unknown = sorted((set(columns) | set(constants)) - set(schema.names))
    if unknown:
        raise ValueError(f"{table} has no column(s) {unknown}; its columns: {schema.names}")
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"{table}: columns of different lengths {sorted(lengths)}")
    rows = lengths.pop() if lengths else 0
    arrays, fields = [], []
    for field in schema:
        if field.name in columns:
            values = columns[field.name]
        elif field.name in constants:
            values = [constants[field.name]] * rows
        else:
            continue
        arrays.append(values if isinstance(values, (pa.Array, pa.ChunkedArray)) and values.type == field.type
                      else pa.array(values, type=field.type))
        fields.append(field.with_nullable(True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def column_names(table: str) -> list[str]:
    """The columns of `table`, in stored order."""
    return SCHEMAS[table].names


def ibis_schema(table: str):
    """The Ibis schema of `table` (for view expressions compiled against unbound tables)."""
    import ibis

    return ibis.schema({f.name: _ibis_type(f) for f in SCHEMAS[table]})


def _ibis_type(field: pa.Field):
    import ibis.expr.datatypes as dt
    from ibis.formats.pyarrow import PyArrowType

    if is_json(field):
        return dt.JSON(nullable=field.nullable)
    return PyArrowType.to_ibis(field.type, nullable=field.nullable)


def duckdb_type(field: pa.Field) -> str:
    """The DuckDB type name of a column (as information_schema.columns.data_type spells it)."""
    if is_json(field):
        return "JSON"
    names = {S: "VARCHAR", I32: "INTEGER", I64: "BIGINT", F64: "DOUBLE", F32: "FLOAT", BOOL: "BOOLEAN",
             TS: "TIMESTAMP"}
    if pa.types.is_list(field.type):
        return names[field.type.value_type] + "[]"
    return names[field.type]


def describe(tables: Sequence[str] = TABLES) -> list[tuple[str, str, str, bool]]:
    """(table, column, DuckDB type, nullable) of every column, for comparing with a warehouse's catalog."""
    return [(t, f.name, duckdb_type(f), f.nullable) for t in tables for f in SCHEMAS[t]]
