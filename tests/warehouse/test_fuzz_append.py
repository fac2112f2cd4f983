"""Hypothesis fuzzing of the warehouse append path (biaslab/warehouse/store.py).

Keys are drawn from a small space so that duplicates inside a batch, across batches and across calls all happen;
batches arrive in random order and chunking and in every input form `append` accepts (list of dicts, Arrow,
pandas). Each example gets a fresh in-memory warehouse.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from biaslab.warehouse import TABLE_KEYS, Warehouse
from biaslab.warehouse.check import check_warehouse

FUZZ = settings(max_examples=50, deadline=None)

MODELS = st.sampled_from(["m1", "m2"])
REQUESTS = st.sampled_from(["r0", "r1", "r2"])
VALUE = st.floats(-50, 0, allow_nan=False, width=32)


def seq_row(model, request, value):
    return {"model_key": model, "request_id": request, "stimulus_id": f"s-{request}", "protocol": "p",
            "scheme": "causal", "text": f"text {request}", "n_tokens": 2, "sum_logprob": value}


def token_row(model, request, position, value):
    return {"model_key": model, "request_id": request, "position": position, "token_id": position,
            "logprob": value}


def creq_row(model, request, value):
    return {"model_key": model, "request_id": request, "stimulus_id": f"s-{request}", "protocol": "fc",
            "mode": "exact", "prompt_version": "v1", "adaptation": "none", "prompt_text": f"p {value}",
            "options": ["he", "she"], "max_new_tokens": 3, "k_store": 64}


def node_row(model, request, node, value):
    return {"model_key": model, "request_id": request, "node_id": node, "parent_id": None, "token_id": None,
            "depth": 0, "topk_ids": [1, 2], "topk_logits": [0.5, 0.25], "logsumexp": value}


def edge_row(model, request, node, token, value):
    return {"model_key": model, "request_id": request, "node_id": node, "token_id": token, "outcome": "he",
            "child_id": None}


def prob_row(model, request, option, temperature, top_k, top_p, value):
    return {"model_key": model, "request_id": request, "option": option, "temperature": temperature,
            "top_k": top_k, "top_p": top_p, "prob": value}


#: table -> strategy of one row; key spaces are tiny on purpose. Temperatures include -0.0 next to 0.0 (equal keys).
ROWS = {
    "sequence_scores": st.builds(seq_row, MODELS, REQUESTS, VALUE),
    "token_scores": st.builds(token_row, MODELS, REQUESTS, st.integers(0, 2), VALUE),
    "choice_requests": st.builds(creq_row, MODELS, REQUESTS, VALUE),
    "choice_nodes": st.builds(node_row, MODELS, REQUESTS, st.integers(0, 1), VALUE),
    "choice_edges": st.builds(edge_row, MODELS, REQUESTS, st.integers(0, 1), st.integers(0, 2), VALUE),
    "choice_probs": st.builds(prob_row, MODELS, REQUESTS, st.sampled_from(["he", "she", "invalid"]),
                              st.sampled_from([0.0, -0.0, 0.7, 1.0]), st.sampled_from([0, 5]),
                              st.sampled_from([0.9, 1.0]), VALUE),
}
CHILDREN = {"sequence_scores": ("token_scores",),
            "choice_requests": ("choice_nodes", "choice_edges", "choice_probs")}


def key(table: str, row) -> tuple:
    out = []
    for column in TABLE_KEYS[table]:
        v = row[column]
        out.append(0.0 if isinstance(v, float) and v == 0 else v)  # -0.0 and 0.0 are one key
    return tuple(out)


def stored(wh: Warehouse, table: str) -> list[dict]:
    cur = wh.con.execute(f"SELECT * FROM {table}")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, values)) for values in cur.fetchall()]


def stored_keys(wh: Warehouse, table: str) -> list[tuple]:
    return [key(table, r) for r in stored(wh, table)]


def as_input(rows: list[dict], form: str):
    if form == "arrow":
        return pa.Table.from_pylist(rows)
    if form == "pandas":
        return pa.Table.from_pylist(rows).to_pandas()
    return rows


def same_row(incoming: dict, row: dict) -> bool:
    """The stored row carries the incoming row's values (columns the incoming row left out are NULL)."""
    return all(row[column] == value for column, value in incoming.items())


def chunked(rows: list, cuts: list[int]) -> list[list]:
    bounds = sorted({c % (len(rows) + 1) for c in cuts} | {0, len(rows)})
    return [rows[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@st.composite
def append_plan(draw):
    table = draw(st.sampled_from(sorted(ROWS)))
    batches = draw(st.lists(st.lists(ROWS[table], max_size=8), min_size=1, max_size=4))
    order = draw(st.permutations(range(len(batches))))
    calls = []
    for i in order:  # each batch in random order, cut into random chunks, each chunk in a random input form
        for chunk in chunked(batches[i], draw(st.lists(st.integers(0, 8), max_size=3))):
            calls.append((chunk, draw(st.sampled_from(["dicts", "arrow", "pandas"]))))
    return table, batches, calls


@FUZZ
@given(append_plan())
def test_appends_store_the_union_of_keys_once(plan):
    table, batches, calls = plan
    with Warehouse.open(":memory:") as wh:
        first_call: dict[tuple, list[dict]] = {}  # key -> rows of the first call that carried it
        total = 0
        for chunk, form in calls:
            added = wh.append(table, as_input(chunk, form))
            new = {key(table, r) for r in chunk} - set(first_call)
            assert added == len(new), (chunk, first_call.keys())
            for r in chunk:
                if key(table, r) in new:
                    first_call.setdefault(key(table, r), []).append(r)
            total += added

        union = {key(table, r) for batch in batches for r in batch}
        keys = stored_keys(wh, table)
        assert len(keys) == len(set(keys)) == total, "duplicate keys stored"
        assert set(keys) == union
        # a stored row is one of the rows that introduced its key (later calls never overwrite it)
        for row in stored(wh, table):
            assert any(same_row(cand, row) for cand in first_call[key(table, row)]), row
        dup = [f for f in check_warehouse(wh) if f.check == "duplicate_keys" and f.table == table]
        assert dup[0].status == "ok"

        # appending everything again, whole or in the same chunks, adds nothing
        snapshot = stored(wh, table)
        everything = [r for batch in batches for r in batch]
        assert wh.append(table, everything) == 0
        assert sum(wh.append(table, as_input(chunk, form)) for chunk, form in calls) == 0
        assert sorted(map(repr, stored(wh, table))) == sorted(map(repr, snapshot))


@st.composite
def family_plan(draw):
    parent = draw(st.sampled_from(sorted(CHILDREN)))
    calls = []
    for _ in range(draw(st.integers(1, 4))):
        parents = draw(st.lists(ROWS[parent], max_size=5))
        # children are drawn from the whole small key space: some belong to parents of this call, some to parents
        # stored earlier, some to parents that do not exist at all
        children = {c: draw(st.lists(ROWS[c], max_size=8)) for c in draw(
            st.lists(st.sampled_from(CHILDREN[parent]), unique=True, max_size=len(CHILDREN[parent])))}
        forms = {c: draw(st.sampled_from(["dicts", "arrow", "pandas"])) for c in children}
        calls.append((parents, children, draw(st.sampled_from(["dicts", "arrow", "pandas"])), forms))
    return parent, calls


@FUZZ
@given(family_plan())
def test_append_with_children_keeps_families_consistent(plan):
    parent, calls = plan
    pkeys = TABLE_KEYS[parent]
    with Warehouse.open(":memory:") as wh:
        parents_seen: set[tuple] = set()
        expected: dict[str, set[tuple]] = {c: set() for c in CHILDREN[parent]}
        for parent_rows, children, pform, cforms in calls:
            new = {key(parent, r) for r in parent_rows} - parents_seen
            added = wh.append_with_children(
                parent, as_input(parent_rows, pform), {c: as_input(rows, cforms[c]) for c, rows in children.items()})
            assert added == len(new)
            parents_seen |= new
            for child, rows in children.items():
                # children are taken only for parents first seen in this call
                expected[child] |= {key(child, r) for r in rows if tuple(r[k] for k in pkeys) in new}
            assert set(stored_keys(wh, parent)) == parents_seen
            for child, keys in expected.items():
                got = stored_keys(wh, child)
                assert len(got) == len(set(got)), f"duplicate keys in {child}"
                assert set(got) == keys, child
        # every child has its parent: the warehouse check agrees
        orphans = [f for f in check_warehouse(wh) if f.check in ("orphan_rows", "duplicate_keys")
                   and f.status == "problem"]
        assert not orphans, orphans
        # replaying every call changes nothing
        before = {t: stored(wh, t) for t in (parent, *CHILDREN[parent])}
        for parent_rows, children, pform, cforms in calls:
            assert wh.append_with_children(parent, as_input(parent_rows, pform),
                                           {c: as_input(rows, cforms[c]) for c, rows in children.items()}) == 0
        assert {t: stored(wh, t) for t in before} == before
