"""What `biaslab view` shows, read from a warehouse opened read-only for one request (so a collection can write
between requests, as `biaslab sql` reads): every value from a URL goes into SQL as a bound parameter, never as text.

The numbers shown are the stored ones: option probabilities from `option_probs`, exact-mode tries from
`choice_nodes` / `choice_edges` (each edge's probability at the collection's temperature and top-k by the formula of
docs/design.md section 6), samples, token scores.
"""

from __future__ import annotations

import json
import math
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...errors import BiaslabError
from ...schema import evidence
from ...sql.quoting import identifier

#: a stimulus id as biaslab writes it (16 hex characters); anything else is answered 404 before any query
STIMULUS_ID = re.compile(r"[0-9a-f]{16}")
#: rows a search page shows at most
SEARCH_LIMIT = 200
#: seconds one page's queries may take in all before DuckDB is told to stop them (one URL cannot hold the CPU)
QUERY_TIME_S = 20.0


class QueryTooLong(BiaslabError):
    """A page's queries ran past QUERY_TIME_S and were stopped (answered 503 in one line)."""


@contextmanager
def warehouse(db: str | Path, time_s: float | None = None):
    """The warehouse opened read-only for one request, closed after it; its queries are interrupted after `time_s`
    seconds in all (QUERY_TIME_S by default), raising QueryTooLong."""
    import threading

    from ...warehouse.store import Warehouse

    limit = QUERY_TIME_S if time_s is None else time_s
    wh = Warehouse.open(db, read_only=True)
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        wh.con.interrupt()
    timer = threading.Timer(limit, stop)
    timer.daemon = True
    timer.start()
    try:
        yield wh
    except Exception as exc:
        if fired.is_set():
            raise QueryTooLong(f"the page's queries took longer than {limit:g} s and were stopped; narrow the "
                               f"search (a dataset, a model) and try again") from exc
        raise
    finally:
        timer.cancel()
        wh.close()


def overview(handle) -> dict[str, pd.DataFrame]:
    """Models, datasets (stimuli and items loaded) and collections of the warehouse (a `biaslab.open` handle)."""
    datasets = handle.query("SELECT dataset, count(*) AS stimuli, count(DISTINCT item_id) AS items FROM stimuli "
                            "GROUP BY dataset ORDER BY dataset")
    return {"models": handle.models(), "datasets": datasets, "collections": handle.collections()}


#: the longest text a search field takes (a longer one is refused, not searched)
MAX_FIELD = 500
#: a stimulus attribute a search may filter on (`attr.NAME=VALUE`): its name is bound into a JSON path
ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass
class Filters:
    """The search form: every field optional; numbers parsed here, text bound as a parameter."""

    dataset: str = ""
    context: str = ""
    model: str = ""
    option: str = ""
    text: str = ""
    p_min: float | None = None
    p_max: float | None = None
    attrs: dict[str, str] = field(default_factory=dict)  # attr.NAME=VALUE: the stimulus attribute NAME equals VALUE
    errors: list[str] = field(default_factory=list)
    model_evidence: bool = False  # set by `search`: a model asked of a dataset without options (its stimuli listed)

    @classmethod
    def parse(cls, args) -> Filters:
        out = cls(**{k: (args.get(k) or "").strip() for k in ("dataset", "context", "model", "option", "text")})
        for key in args:
            if not key.startswith("attr."):
                continue
            name, value = key[len("attr."):], (args.get(key) or "").strip()
            if not ATTR_NAME.fullmatch(name):
                out.errors.append(f"{key}: not an attribute name (letters, digits and _)")
            elif len(value) > MAX_FIELD:
                out.errors.append(f"{key}: longer than {MAX_FIELD} characters")
            elif value:
                out.attrs[name] = value
        for name in ("dataset", "context", "model", "option", "text"):
            if len(getattr(out, name)) > MAX_FIELD:
                out.errors.append(f"{name}: longer than {MAX_FIELD} characters")
                setattr(out, name, "")
        for name in ("p_min", "p_max"):
            raw = (args.get(name) or "").strip()
            if not raw:
                continue
            try:
                value = float(raw)
            except ValueError:
                out.errors.append(f"{name}: {raw!r} is not a number")
                continue
            if not 0 <= value <= 1:
                out.errors.append(f"{name}: {raw} is not a probability in [0, 1]")
                continue
            setattr(out, name, value)
        return out

    @property
    def on_probabilities(self) -> bool:
        return bool(self.model or self.option or self.p_min is not None or self.p_max is not None)


def search(wh, filters: Filters) -> tuple[pd.DataFrame, int]:
    """Stimuli (with their option probabilities when a model, option or value range is asked) matching `filters`:
    (the first SEARCH_LIMIT rows, how many match)."""
    where, params = ["TRUE"], []
    for column, value in (("s.dataset", filters.dataset), ("s.context", filters.context)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    for name, value in sorted(filters.attrs.items()):  # the path and the value bound, never pasted
        where.append("json_extract_string(s.attrs, ?) = ?")
        params += [f"$.{name}", value]
    if filters.text:  # literal, case-insensitive: % and _ are characters, never a pattern (no LIKE backtracking)
        where.append("contains(lower(s.text), lower(?))")
        params.append(filters.text)
    scored_only = filters.model and not (filters.option or filters.p_min is not None or filters.p_max is not None) \
        and filters.dataset and not wh.rows("SELECT 1 FROM stimuli WHERE dataset = ? AND options IS NOT NULL LIMIT 1",
                                            [filters.dataset])
    if scored_only:  # a dataset without options (sentences scored, answers generated): the stimuli with the model's
        # evidence, from every table whose rows name a stimulus and a model
        tables = [t for t in evidence.STIMULUS_TABLES if "model_key" in evidence.column_names(t)
                  and t in wh.tables()]
        union_sql = " UNION ".join(f"SELECT stimulus_id FROM {identifier(t)} WHERE model_key IN "
                                   f"(SELECT model_key FROM models WHERE starts_with(model_key, ?) OR name = ?)"
                                   for t in tables)
        where.append(f"s.stimulus_id IN ({union_sql})")
        params += [filters.model, filters.model] * len(tables)
        filters.model_evidence = True
    if filters.on_probabilities and not scored_only:
        source_sql = ("stimuli s JOIN option_probs o USING (stimulus_id) LEFT JOIN models m USING (model_key)")
        columns_sql = ("s.stimulus_id, s.dataset, s.item_id, s.context, s.option_order, s.text, "
                   "coalesce(m.name, o.model_key) AS model_name, o.model_key, o.method, o.option, o.option_label, "
                   "o.p, o.valid_mass")
        if filters.model:
            where.append("(starts_with(o.model_key, ?) OR m.name = ?)")
            params += [filters.model, filters.model]
        if filters.option:
            where.append("(o.option = ? OR o.option_label = ?)")
            params += [filters.option, filters.option]
        if filters.p_min is not None:
            where.append("o.p >= ?")
            params.append(filters.p_min)
        if filters.p_max is not None:
            where.append("o.p <= ?")
            params.append(filters.p_max)
        order_sql = "s.dataset, s.item_id, s.stimulus_id, model_name, o.method, o.option_label"
    else:
        source_sql = "stimuli s"
        columns_sql = "s.stimulus_id, s.dataset, s.item_id, s.context, s.option_order, s.text"
        order_sql = "s.dataset, s.item_id, s.stimulus_id"
    condition_sql = " AND ".join(where)
    total = int(wh.rows(f"SELECT count(*) FROM {source_sql} WHERE {condition_sql}", params)[0][0])
    rows = wh.query(f"SELECT {columns_sql} FROM {source_sql} WHERE {condition_sql} ORDER BY {order_sql} "
                    f"LIMIT {SEARCH_LIMIT}",
                    params)
    return rows, total


@dataclass
class TrieRow:
    """One edge of an exact-mode answer trie, as the page lists it (depth-first)."""

    depth: int
    token_id: int
    token: str
    outcome: str
    p_edge: float
    p_path: float


def edge_probabilities(logits: np.ndarray, temperature: float, top_k: int) -> np.ndarray:
    """p(c) = 1[z_c >= z_(K)] exp(z_c / T) / sum_{j : z_j >= z_(K)} exp(z_j / T) over the stored top logits
    (docs/design.md section 6; ties at the K-th logit kept; top_k 0 or above the stored count keeps them all)."""
    z = np.asarray(logits, dtype=float)
    if top_k and top_k < len(z):
        kth = np.sort(z)[::-1][top_k - 1]
        keep = z >= kth
    else:
        keep = np.ones(len(z), dtype=bool)
    scaled = np.where(keep, z / temperature, -np.inf)
    scaled -= scaled[keep].max()
    weights = np.exp(scaled)
    return weights / weights.sum()


def trie_rows(nodes: pd.DataFrame, edges: pd.DataFrame, temperature: float, top_k: int, decode) -> list[TrieRow]:
    """The trie's edges depth first from the root, each with its probability at its node and along its path; a
    node's mass on tokens the parser rejected shows as one 'rejected' row."""
    by_node = {int(r.node_id): r for r in nodes.itertuples(index=False)}
    out_edges: dict[int, list] = {}
    for r in edges.itertuples(index=False):
        out_edges.setdefault(int(r.node_id), []).append(r)
    rows: list[TrieRow] = []

    def walk(node_id: int, p_path: float, depth: int) -> None:
        node = by_node.get(node_id)
        if node is None:
            return
        ids = list(node.topk_ids)
        probs = edge_probabilities(np.asarray(node.topk_logits), temperature, top_k)
        p_of = dict(zip(ids, probs))
        listed = 0.0
        for edge in sorted(out_edges.get(node_id, []), key=lambda e: -p_of.get(int(e.token_id), 0.0)):
            p_edge = float(p_of.get(int(edge.token_id), 0.0))
            listed += p_edge
            outcome = "continues" if edge.outcome == "__live__" else edge.outcome
            rows.append(TrieRow(depth, int(edge.token_id), decode(int(edge.token_id)), outcome, p_edge,
                                p_path * p_edge))
            if edge.outcome == "__live__" and edge.child_id is not None and not pd.isna(edge.child_id):
                walk(int(edge.child_id), p_path * p_edge, depth + 1)
        rejected = max(0.0, 1.0 - listed)
        if rejected > 1e-12:
            rows.append(TrieRow(depth, -1, "", "rejected by the parser (invalid)", rejected, p_path * rejected))

    root = nodes.loc[nodes["parent_id"].isna(), "node_id"]
    if len(root):
        walk(int(root.iloc[0]), 1.0, 0)
    return rows


@lru_cache(maxsize=8)
def _load_tokenizer(source: str):
    """The model's tokenizer from a local folder or the local cache (never the network), or None."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except Exception:  # a GGUF file, a hosted model, a missing cache: token ids are shown instead
        return None


#: tokenizers loaded so far, by place (None: not loadable), shared by every page of the app; `_LOADING` the places
#: being loaded, each with the event set when its load ends (a second caller waits on it instead of loading again)
_TOKENIZERS: dict[str, Any] = {}
_LOADING: dict[str, threading.Event] = {}
_LOCK = threading.Lock()


def _tokenizer(place: str, wait: bool = True):
    """The tokenizer at `place`, loaded once per process. `wait` False: None at once while it is not loaded yet (a
    background thread loads it, so a page never waits on importing transformers: the next one shows it)."""
    with _LOCK:
        if place in _TOKENIZERS:
            return _TOKENIZERS[place]
        done = _LOADING.get(place)
        mine = done is None
        if mine:
            done = _LOADING[place] = threading.Event()
    if not mine:  # another caller is loading it
        if wait:
            done.wait()
            with _LOCK:
                return _TOKENIZERS.get(place)
        return None
    if not wait:
        threading.Thread(target=_load_into, args=(place, done), daemon=True, name=f"tokenizer {place}").start()
        return None
    return _load_into(place, done)


def _load_into(place: str, done: threading.Event):
    """Load the tokenizer at `place` into `_TOKENIZERS` and tell those waiting for it."""
    found = None
    try:
        found = _load_tokenizer(place)
    finally:
        with _LOCK:
            _TOKENIZERS[place] = found
            _LOADING.pop(place, None)
        done.set()
    return found


def warm_tokenizers(wh) -> list[str]:
    """Start loading, in the background, the tokenizer of every model of the warehouse that has one here (`biaslab
    view` does at start, so its first stimulus page does not wait on them); the places."""
    places = [p for p in (tokenizer_place(*row) for row in wh.rows("SELECT source, revision, tokenizer FROM models"))
              if p]
    for place in places:
        _tokenizer(place, wait=False)
    return places


def tokenizers_pending() -> bool:
    """Whether a tokenizer is still loading (a page says that token boundaries come on the next load)."""
    with _LOCK:
        return bool(_LOADING)


def tokenizer_place(source: str | None, revision: str | None, tokenizer: str | None) -> str | None:
    """Where a stored model's tokenizer is on this machine, from the model's own record (`source`, `revision` and
    `tokenizer`, the identity of the tokenizer it was run with): its local folder, the folder its alias or `.gguf`
    file was converted into (`engines.aliases.converted_folder`), or its hub id (read from the local cache only);
    None for a model recorded without a tokenizer (a hosted chat model) or without a source."""
    from ...engines.aliases import converted_folder

    if not source or tokenizer is None:
        return None
    folder = Path(source)
    if folder.is_dir():
        return str(folder)
    converted = converted_folder(source, revision)
    if converted is not None:
        return str(converted)
    return None if folder.exists() else source  # a file that is not converted has no tokenizer; else a hub id


def decoder(wh, model_key: str, wait: bool = True):
    """f(token id) -> its text under the model's tokenizer (loaded from disk only: `tokenizer_place`), or "#id"
    without one; `wait` False: also "#id" while it is still loading in the background (`_tokenizer`)."""
    found = wh.rows("SELECT source, revision, tokenizer FROM models WHERE model_key = ?", [model_key])
    place = tokenizer_place(*found[0]) if found else None
    tokenizer = _tokenizer(place, wait=wait) if place else None

    def decode(token_id: int) -> str:
        if tokenizer is None:
            return f"#{token_id}"
        return tokenizer.decode([token_id])

    decode.tokenizer = tokenizer  # type: ignore[attr-defined]
    return decode


def decoders(wh, wait: bool = True):
    """f(model_key) -> `decoder(wh, model_key, wait)`, each model's tokenizer looked up once (one page shows several
    requests of the same models)."""
    cache: dict[str, Any] = {}

    def of(model_key: str):
        if model_key not in cache:
            cache[model_key] = decoder(wh, model_key, wait)
        return cache[model_key]

    return of


def prompt_tokens(decode, text: str) -> list[str] | None:
    """The prompt cut at the tokenizer's boundaries (as the model saw it), or None without a tokenizer."""
    tokenizer = getattr(decode, "tokenizer", None)
    if tokenizer is None:
        return None
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [tokenizer.decode([i]) for i in ids]


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dict(orient="records")


def _name_apart(requests: list[dict[str, Any]]) -> None:
    """Give each request whose heading (model name, protocol, mode, sampler settings) another one shares the
    settings that tell them apart, as `distinct` ("dtype=fp32 prompt=forced-choice-v1"), and every request an
    anchor unique on the page (`anchor`: the model key's prefix and the request id; one request id is shared by
    every model that answered it)."""
    def heading(r: dict[str, Any]) -> tuple:
        return r["model_name"], r["protocol"], r["mode"], tuple(r["sample_settings"])

    for r in requests:
        same = [o for o in requests if heading(o) == heading(r)]
        fields = [f for f in ("dtype", "backend", "prompt_version") if len({str(o.get(f)) for o in same}) > 1]
        if len(same) > 1 and not fields:
            fields = ["model_key"]
        r["distinct"] = " ".join(f"{f}={str(r.get(f))[:12] if f == 'model_key' else r.get(f)}" for f in fields)
        r["anchor"] = f"{str(r['model_key'])[:12]}-{r['request_id']}"


def _choice_requests(wh, stimulus_id: str, decode_of) -> list[dict[str, Any]]:
    """The stimulus's forced-choice requests, each with its probabilities, prompt tokens, trie, samples, sampler
    settings and its model's name, dtype and backend (`_name_apart` then names the settings apart)."""
    models = {key: (name, {"dtype": dtype, "backend": backend}) for key, name, dtype, backend in
              wh.rows("SELECT model_key, name, dtype, backend FROM models")}
    names, kinds = {k: v[0] for k, v in models.items()}, {k: v[1] for k, v in models.items()}
    requests = []
    for req in _records(wh.query("SELECT * FROM choice_requests WHERE stimulus_id = ? ORDER BY model_key, mode, "
                                 "request_id", [stimulus_id])):
        key, rid = req["model_key"], req["request_id"]
        decode = decode_of(key)
        probs = wh.query("SELECT option, temperature, top_k, top_p, prob FROM choice_probs WHERE model_key = ? AND "
                         "request_id = ? ORDER BY temperature, top_k, option", [key, rid])
        entry = {**req, "model_name": names.get(key, key), "probs": _records(probs),
                 "tokens": prompt_tokens(decode, req["prompt_text"]), "trie": [], "samples": []}
        if req["mode"] == "exact" and not probs.empty:
            nodes = wh.query("SELECT * FROM choice_nodes WHERE model_key = ? AND request_id = ? ORDER BY node_id",
                             [key, rid])
            edges = wh.query("SELECT * FROM choice_edges WHERE model_key = ? AND request_id = ? ORDER BY node_id, "
                             "token_id", [key, rid])
            first = probs.iloc[0]
            entry["trie_settings"] = {"temperature": float(first["temperature"]), "top_k": int(first["top_k"])}
            entry["trie"] = trie_rows(nodes, edges, float(first["temperature"]), int(first["top_k"]), decode)
        samples = wh.query("SELECT sample_index, seed, temperature, top_k, top_p, text, answer, valid, finish_reason, "
                           "token_ids, token_logprobs FROM samples WHERE model_key = ? AND request_id = ? "
                           "ORDER BY temperature, top_k, top_p, seed, sample_index LIMIT 100", [key, rid])
        entry["samples"] = _records(samples)  # and their sampler settings: two temperatures are two settings
        entry["sample_settings"] = sorted({(s["temperature"], s["top_k"], s["top_p"]) for s in entry["samples"]})
        requests.append({**entry, **kinds.get(key, {"dtype": None, "backend": None})})
    return requests


def stimulus(wh, stimulus_id: str, wait: bool = True) -> dict[str, Any] | None:
    """Everything stored about one stimulus, or None when the warehouse has no such stimulus; `wait` False: without
    the token boundaries of a tokenizer still loading (the app's pages: they never wait on one)."""
    found = wh.query("SELECT * FROM stimuli WHERE stimulus_id = ?", [stimulus_id])
    if found.empty:
        return None
    row = found.iloc[0].to_dict()
    names = dict(wh.rows("SELECT model_key, name FROM models"))
    decode_of = decoders(wh, wait)
    requests = _choice_requests(wh, stimulus_id, decode_of)
    _name_apart(requests)
    scores = []
    for seq in _records(wh.query("SELECT * FROM sequence_scores WHERE stimulus_id = ? ORDER BY model_key, scheme, "
                                 "option", [stimulus_id])):
        decode = decode_of(seq["model_key"])
        tokens = wh.query("SELECT position, token_id, logprob FROM token_scores WHERE model_key = ? AND "
                          "request_id = ? ORDER BY position", [seq["model_key"], seq["request_id"]])
        scores.append({**seq, "model_name": names.get(seq["model_key"], seq["model_key"]),
                       "tokens": [{"token": decode(int(t.token_id)), "token_id": int(t.token_id),
                                   "logprob": float(t.logprob)} for t in tokens.itertuples(index=False)]})
    generations = _records(wh.query(
        "SELECT g.model_key, coalesce(m.name, g.model_key) AS model_name, g.context, g.declared, g.prompt_text, "
        "x.sample_index, x.seed, x.temperature, x.top_k, x.top_p, x.max_new_tokens, x.text FROM gen_requests g "
        "JOIN samples x USING (model_key, request_id) LEFT JOIN models m USING (model_key) WHERE g.stimulus_id = ? "
        "ORDER BY g.model_key, x.temperature, x.top_k, x.top_p, g.context, x.seed, x.sample_index LIMIT 200",
        [stimulus_id]))
    siblings = wh.query(
        "SELECT s.stimulus_id, s.context, s.option_order, coalesce(m.name, o.model_key) AS model_name, o.method, "
        "o.option_label, o.p, o.valid_mass FROM stimuli s LEFT JOIN option_probs o USING (stimulus_id) "
        "LEFT JOIN models m USING (model_key) WHERE s.dataset = ? AND s.item_id = ? "
        "ORDER BY s.context, s.option_order, s.stimulus_id, model_name, o.method, o.option_label",
        [row["dataset"], row["item_id"]])
    attrs = row.get("attrs")
    if isinstance(attrs, str):
        try:
            row["attrs"] = json.loads(attrs)
        except ValueError:
            pass
    imported = _records(wh.query(
        "SELECT a.model_key, coalesce(m.name, a.model_key) AS model_name, a.tool, m.backend_version AS version, "
        "a.task, a.option, a.loglik, a.chosen, a.answer_text, a.source_line FROM imported_answers a "
        "LEFT JOIN models m USING (model_key) WHERE a.stimulus_id = ? ORDER BY model_name, a.model_key, a.option",
        [stimulus_id])) if "imported_answers" in wh.tables() else []
    return {"stimulus": row, "requests": requests, "scores": scores, "generations": generations,
            "siblings": siblings, "variants": counterfactual_variants(wh, row), "imported": imported}


def counterfactual_variants(wh, row: dict) -> dict[str, Any] | None:
    """A counterfactual audit's stimulus: its item's variants side by side (one column per group: the variant's text,
    then per model, sampler and sample index the answers with their VADER compound score, refusal flag and words,
    `metrics.counterfactual.measures`), or None for any other stimulus."""
    attrs = row.get("attrs")
    if not isinstance(attrs, dict) or attrs.get("variants") not in ("detected", "given") or "group" not in attrs:
        return None
    from ...metrics.counterfactual import measures

    found = wh.query(
        "SELECT s.attrs->>'group' AS grp, s.text AS variant, s.stimulus_id, coalesce(m.name, x.model_key) AS model, "
        "x.temperature, x.top_k, x.top_p, x.max_new_tokens, x.sample_index, x.text FROM stimuli s LEFT JOIN samples "
        "x ON x.stimulus_id = s.stimulus_id LEFT JOIN models m ON m.model_key = x.model_key "
        "WHERE s.dataset = ? AND s.item_id = ? ORDER BY model, x.temperature, x.sample_index LIMIT 2000",
        [row["dataset"], row["item_id"]])
    groups = list(dict.fromkeys(found["grp"]))
    declared = wh.rows("SELECT declaration FROM user_datasets WHERE dataset = ? ORDER BY loaded_at DESC LIMIT 1",
                       [row["dataset"]]) if "user_datasets" in wh.tables() else []
    if declared:  # the groups in their declared order (female, male, neutral)
        order = (json.loads(declared[0][0]).get("counterfactual") or {}).get("groups", {}).get(attrs["attribute"], [])
        groups.sort(key=lambda g: order.index(g) if g in order else len(order))
    texts = {g: found.loc[found["grp"] == g, "variant"].iloc[0] for g in groups}
    ids = {g: found.loc[found["grp"] == g, "stimulus_id"].iloc[0] for g in groups}
    answered = found[found["text"].notna()]
    answers: dict[tuple, dict[str, dict]] = {}
    scores = measures.sentiment(list(answered["text"]))
    for r, score in zip(answered.itertuples(index=False), scores):
        key = (r.model, f"T={number(r.temperature)} top_k={r.top_k} top_p={number(r.top_p)} new={r.max_new_tokens}",
               int(r.sample_index))
        answers.setdefault(key, {})[r.grp] = {"text": r.text, "sentiment": score, "refusal": measures.refusal(r.text),
                                              "words": measures.length(r.text)}
    return {"attribute": attrs.get("attribute"), "prompt": row.get("template"), "groups": groups, "texts": texts,
            "ids": ids, "answers": [{"model": k[0], "sampler": k[1], "sample": k[2], "cells": v}
                                    for k, v in answers.items()]}


def number(value: Any) -> str:
    """A stored number as the page shows it: 4 significant digits (the tables' rule), empty for missing."""
    from ...metrics.display import cell

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return cell(value)
