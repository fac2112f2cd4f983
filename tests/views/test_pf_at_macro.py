"""The `winopron_pf_at` SQL macro repeats the exact-mode p(f) of the Ibis view `winopron_pf` (issue 40, item 4):
checked here on stored evidence without a model. A synthetic warehouse holds WinoPron-like stimuli of both option
orders, random tries (options at depth 1 and 2, pruned and rejected mass), two models, a comprehension request
(protocol 'meta') and a sample-mode request that neither may read; its `choice_probs` are the trie's probabilities at
the collection's settings. At those settings the macro must equal the view row for row, column for column."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import biaslab
from biaslab.schema import evidence
from biaslab.warehouse import Warehouse

K_STORE = 4
OUTCOMES = ("female", "male", "__pruned__")


def _stimuli(n: int) -> pd.DataFrame:
    rows = []
    for i in range(n):
        order = "FM" if i % 2 == 0 else "MF"
        options = ["she", "he"] if order == "FM" else ["he", "she"]
        labels = ["female", "male"] if order == "FM" else ["male", "female"]
        rows.append({"stimulus_id": f"s{i:02d}", "dataset": "winopron", "upstream_version": "test",
                     "item_id": f"t{i // 4}.{i % 4}", "text": f"text {i}", "context": ["unprimed", "primed_f"][i % 2],
                     "option_order": order, "grammatical_case": "nom", "referent_role": "occupation",
                     "stereotype_rating": 0.1 * (i % 7), "occupation": "accountant", "participant": "taxpayer",
                     "options": options, "option_labels": labels,
                     "attrs": json.dumps({"pair_id": f"p{i // 4}", "answer": str(i % 2)})})
    return pd.DataFrame(rows)


def _trie(rng, request_id: str, female: str, male: str):
    """A root with an option edge, a rejected token and a live edge to a child that ends in options or pruning."""
    nodes, edges = [], []
    ids = rng.permutation(50)[: K_STORE + 1].tolist()
    for node_id, parent, token, depth in ((0, None, None, 0), (1, 0, ids[2], 1)):
        logits = np.sort(rng.normal(0, 2, K_STORE))[::-1].astype(np.float32)
        topk = ids[:K_STORE] if node_id == 0 else rng.permutation(50)[:K_STORE].tolist()
        nodes.append({"request_id": request_id, "node_id": node_id, "parent_id": parent, "token_id": token,
                      "depth": depth, "topk_ids": topk, "topk_logits": logits.tolist(),
                      "logsumexp": float(np.log(np.exp(logits.astype(float)).sum() + 1.0))})
        if node_id == 0:  # topk[0] -> female, topk[1] -> male, topk[2] -> live child, topk[3] rejected (invalid)
            edges += [(0, topk[0], female, None), (0, topk[1], male, None), (0, topk[2], "__live__", 1)]
        else:
            outcome = [female, male, "__pruned__"]
            edges += [(1, topk[j], outcome[j], None) for j in range(3)]
    return nodes, [{"request_id": request_id, "node_id": n, "token_id": t, "outcome": o, "child_id": c}
                   for n, t, o, c in edges]


@pytest.fixture(scope="module", params=[(0.7, 3), (1.0, 4)], ids=["T0.7-k3", "T1-k4"])
def warehouse(request, tmp_path_factory):
    temperature, top_k = request.param
    rng = np.random.default_rng(7)
    db = tmp_path_factory.mktemp("pf_at") / "w.duckdb"
    stimuli = _stimuli(12)
    with Warehouse.open(db) as wh:
        wh.append("stimuli", evidence.arrow("stimuli", {c: stimuli[c].tolist() for c in stimuli}))
        for model in ("m1", "m2"):
            requests, nodes, edges = [], [], []
            for row in stimuli.itertuples():
                female, male = (row.options[0], row.options[1]) if row.option_order == "FM" else \
                    (row.options[1], row.options[0])
                for protocol in ("choice", "meta") if row.Index == 0 else ("choice",):
                    rid = f"{model}-{row.stimulus_id}-{protocol}"
                    requests.append({"request_id": rid, "stimulus_id": row.stimulus_id, "protocol": protocol,
                                     "mode": "exact", "options": list(row.options)})
                    n, e = _trie(rng, rid, female, male)
                    nodes += n
                    edges += e
            requests.append({"request_id": f"{model}-sampled", "stimulus_id": "s01", "protocol": "choice",
                             "mode": "sample", "options": ["he", "she"]})
            common = {"prompt_version": "v1", "adaptation": "none", "prompt_text": "p", "max_new_tokens": 8,
                      "k_store": K_STORE}
            frame = pd.DataFrame(requests)
            wh.append("choice_requests", evidence.arrow("choice_requests", {c: frame[c].tolist() for c in frame},
                                                        model_key=model, **common))
            for table, rows in (("choice_nodes", nodes), ("choice_edges", edges)):
                frame = pd.DataFrame(rows).astype(object).where(lambda f: f.notna(), None)
                wh.append(table, evidence.arrow(table, {c: frame[c].tolist() for c in frame}, model_key=model))
        probs = wh.query(f"SELECT model_key, request_id, option, temperature, top_k, 1.0 AS top_p, prob "
                         f"FROM choice_probs_at({temperature}, {top_k}, protocol_name := NULL)")
        wh.append("choice_probs", evidence.arrow("choice_probs", {c: probs[c].tolist() for c in probs}))
    return db, temperature, top_k


def test_the_macro_equals_the_view_at_the_collection_settings(warehouse):
    db, temperature, top_k = warehouse
    with biaslab.open(db) as wh:
        view = wh.query("SELECT * FROM winopron_pf WHERE mode = 'exact' ORDER BY model_key, request_id")
        macro = wh.query(f"SELECT * FROM winopron_pf_at({temperature}, {top_k}) ORDER BY model_key, request_id")
    assert len(view) == 24 and view["p_f"].notna().all()  # 12 stimuli x 2 models; no 'meta', no sample rows
    assert (view["p_valid"] < 1).all() and (view["p_unresolved"] > 0).all()  # the tries have every outcome
    assert list(macro.columns) == [*view.columns, "collected_temperature", "collected_top_k", "collected_top_p"]
    assert (macro["collected_temperature"] == temperature).all() and (macro["collected_top_k"] == top_k).all()
    for column in view.columns:
        a, b = view[column], macro[column]
        if pd.api.types.is_float_dtype(a) or pd.api.types.is_float_dtype(b):
            np.testing.assert_allclose(b.to_numpy(float), a.to_numpy(float), rtol=0, atol=1e-14, err_msg=column)
        else:
            assert a.astype(object).where(a.notna(), None).tolist() == \
                b.astype(object).where(b.notna(), None).tolist(), column


def test_the_macro_at_another_temperature_moves_p_f(warehouse):
    db, temperature, top_k = warehouse
    with biaslab.open(db) as wh:
        here = wh.query(f"SELECT request_id, p_f FROM winopron_pf_at({temperature}, {top_k}) ORDER BY request_id")
        cold = wh.query(f"SELECT request_id, p_f FROM winopron_pf_at(0.2, {top_k}) ORDER BY request_id")
    assert np.abs(here["p_f"].to_numpy() - cold["p_f"].to_numpy()).max() > 0.05
