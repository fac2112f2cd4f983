"""The contextual-invariance paper's tables (Kumar et al.): both option orders pooled per template, mutual information
per template averaged over templates, valid-measurement counts, and temperature robustness re-derived from one exact
collection (compared with fresh exact runs at those temperatures)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import entropy, sem
from sklearn.metrics import mutual_info_score

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.metrics.contextuality.stats import (SETTING, cbd_fractions, cbd_table, kl_table,
                                                 mutual_information_per_template, per_template_mi, pf_table,
                                                 pool_orders, spearman_table, temperature_overlap)
from biaslab.metrics.contextuality.tables import load_pf, pf_at_temperature, temperature_tables
from biaslab.warehouse import Warehouse
from open_warehouse_evidence import exact_choice_rows, winopron_stimuli

SAMPLE = {"model_key": "m", "mode": "sample", "temperature": 1.0, "top_k": 40, "top_p": 1.0, "prompt_version": "v",
          "max_new_tokens": 6}
EXACT = {**SAMPLE, "mode": "exact", "temperature": 0.5}


def _h(wh):
    """A reading handle over `wh` (a `biaslab.open` handle, or an open Warehouse)."""
    from biaslab.warehouse.handle import WarehouseHandle

    return wh if isinstance(wh, WarehouseHandle) else WarehouseHandle.on(wh)


def _row(setting, item, context, order, p_f, p_valid, n=None, n_valid=None, rating=0.5):
    return {**setting, "request_id": f"{item}{context}{order}", "stimulus_id": f"{item}{context}{order}",
            "p_f": p_f, "p_valid": p_valid, "n": n, "n_valid": n_valid, "item_id": item, "context": context,
            "option_order": order, "grammatical_case": "nom", "referent_role": "occupation",
            "stereotype_rating": rating, "occupation": "o", "participant": "p", "pair_id": "o|p|nom", "answer": 0}


def test_sample_mode_pooling_counts_valid_samples_of_both_orders():
    """n_female / n_valid: MF 3 / 4, FM 1 / 8 -> pooled 4 / 12 (not the mean of 0.75 and 0.125)."""
    pf = pd.DataFrame([_row(SAMPLE, "t", "unprimed", "MF", 3 / 4, 4 / 10, 10, 4),
                       _row(SAMPLE, "t", "unprimed", "FM", 1 / 8, 8 / 10, 10, 8),
                       _row(SAMPLE, "u", "unprimed", "MF", None, 0.0, 10, 0),  # no valid sample: adds nothing
                       _row(SAMPLE, "u", "unprimed", "FM", 2 / 5, 5 / 10, 10, 5)])
    pooled = pool_orders(pf).set_index("item_id")
    assert pooled.loc["t", "p_f"] == pytest.approx(4 / 12, abs=1e-15)
    assert pooled.loc["t", "p_valid"] == pytest.approx(12 / 20) and pooled.loc["t", "n_valid"] == 12
    assert pooled.loc["u", "p_f"] == pytest.approx(2 / 5) and pooled.loc["u", "orders"] == 1
    assert set(pooled["option_order"]) == {"pooled"}
    summary = pf_table(pool_orders(pf))
    assert summary["templates"].tolist() == [2] and summary["mean_p_f"].tolist() == pytest.approx([(4 / 12 + 0.4) / 2])


def test_exact_mode_pooling_is_the_limit_of_equal_samples_per_order():
    """p(female) 0.3 of valid 0.4 (MF) and 0.05 of valid 0.5 (FM): pooled (0.3 + 0.05) / (0.4 + 0.5)."""
    pf = pd.DataFrame([_row(EXACT, "t", c, "MF", 0.3 / 0.4, 0.4) for c in ("unprimed", "primed_f")]
                      + [_row(EXACT, "t", c, "FM", 0.05 / 0.5, 0.5) for c in ("unprimed", "primed_f")])
    pooled = pool_orders(pf)
    assert pooled["p_f"].tolist() == pytest.approx([0.35 / 0.9] * 2, abs=1e-15)
    assert pooled["p_valid"].tolist() == pytest.approx([0.45, 0.45]) and pooled["n"].isna().all()
    rng = np.random.default_rng(3)  # the same pooled value from many samples per order
    draws = 400_000
    female = rng.binomial(draws, 0.3) + rng.binomial(draws, 0.05)
    valid = rng.binomial(draws, 0.4) + rng.binomial(draws, 0.5)
    assert female / valid == pytest.approx(pooled["p_f"].iloc[0], abs=4e-3)


def _random_pf(rng, setting, templates=12, sample=False):
    rows = []
    for t in range(templates):
        for context in ("unprimed", "primed_f", "primed_m", "null_1", "null_2"):
            for order in ("MF", "FM"):
                if sample:
                    n = 20
                    n_valid = int(rng.integers(0, n + 1))
                    n_female = int(rng.integers(0, n_valid + 1))
                    rows.append(_row(setting, f"t{t}", context, order, n_female / n_valid if n_valid else None,
                                     n_valid / n, n, n_valid, rating=rng.random()))
                else:
                    rows.append(_row(setting, f"t{t}", context, order, rng.random(), rng.uniform(0.05, 1),
                                     rating=rng.random()))
    frame = pd.DataFrame(rows)
    frame["stereotype_rating"] = frame.groupby("item_id")["stereotype_rating"].transform("first")
    return frame


def test_per_template_mutual_information_equals_scikit_learn_on_the_samples():
    """Sample mode: per template, the valid samples expanded to (feature, answer) labels; scikit-learn's
    mutual_info_score (nats) / ln 2."""
    rng = np.random.default_rng(0)
    pf = _random_pf(rng, SAMPLE, sample=True)
    per = per_template_mi(pf).set_index(["context_group", "feature", "item_id"])
    feature_of = {"prime_gender": lambda r: r["context"], "null_prime": lambda r: r["context"],
                  "context": lambda r: r["context"], "option_order": lambda r: r["option_order"]}
    groups = {"unprimed": ["unprimed"], "primed": ["primed_f", "primed_m"], "null": ["null_1", "null_2"],
              "all": ["unprimed", "primed_f", "primed_m", "null_1", "null_2"]}
    expected = set()  # (group, feature, template) with valid samples under at least two feature values
    for group, features in (("unprimed", ["option_order"]), ("primed", ["prime_gender", "option_order"]),
                            ("null", ["null_prime", "option_order"]), ("all", ["context"])):
        for feature in features:
            for item, part in pf[pf["context"].isin(groups[group]) & (pf["n_valid"] > 0)].groupby("item_id"):
                if part.apply(feature_of[feature], axis=1).nunique() >= 2:
                    expected.add((group, feature, item))
    assert set(per.index) == expected and 60 < len(expected) < 72  # some templates lack valid samples somewhere
    checked = 0
    for (group, feature, item), row in per.iterrows():
        part = pf[(pf["item_id"] == item) & pf["context"].isin(groups[group]) & (pf["n_valid"] > 0)]
        labels, answers = [], []
        for _, r in part.iterrows():
            females = round(r["p_f"] * r["n_valid"])
            labels += [feature_of[feature](r)] * int(r["n_valid"])
            answers += [1] * females + [0] * (int(r["n_valid"]) - females)
        assert row["mi_bits"] == pytest.approx(mutual_info_score(labels, answers) / math.log(2), abs=1e-12)
        assert row["measurements"] == len(answers)
        checked += 1
    assert checked == len(expected)
    summary = mutual_information_per_template(pf).set_index(["context_group", "feature"])
    values = per.sort_index().loc[("primed", "prime_gender"), "mi_bits"]  # sorted: no lexsort-depth warning
    assert summary.loc[("primed", "prime_gender"), "mi_bits"] == pytest.approx(values.mean())
    assert summary.loc[("primed", "prime_gender"), "mi_se_bits"] == pytest.approx(sem(values))
    assert summary.loc[("primed", "prime_gender"), "templates"] == len(values)


def test_per_template_mutual_information_exact_mode_is_h_y_minus_h_y_given_f():
    """Exact mode: weights p_valid per stimulus; I = H(Y) - sum_v P(v) H(Y | v) with scipy's entropy."""
    rng = np.random.default_rng(1)
    pf = _random_pf(rng, EXACT)
    per = per_template_mi(pf).set_index(["context_group", "feature", "item_id"])
    for item in ("t0", "t7"):
        part = pf[(pf["item_id"] == item) & pf["context"].isin(["primed_f", "primed_m"])]
        female = part["p_valid"] * part["p_f"]
        male = part["p_valid"] * (1 - part["p_f"])
        for feature, by in (("prime_gender", part["context"]), ("option_order", part["option_order"])):
            f_v, m_v = female.groupby(by).sum(), male.groupby(by).sum()
            total = f_v.sum() + m_v.sum()
            h_y = entropy([f_v.sum(), m_v.sum()], base=2)
            h_y_f = sum((f_v[v] + m_v[v]) / total * entropy([f_v[v], m_v[v]], base=2) for v in f_v.index)
            assert per.loc[("primed", feature, item), "mi_bits"] == pytest.approx(h_y - h_y_f, abs=1e-12)
    assert per["measurements"].isna().all()  # exact mode has no sample count
    # the prime changes nothing: p_f and p_valid equal for primed_f and primed_m -> exactly 0 bits
    flat = pf.copy()
    flat.loc[flat["context"] == "primed_m", ["p_f", "p_valid"]] = \
        flat.loc[flat["context"] == "primed_f", ["p_f", "p_valid"]].to_numpy()
    assert per_template_mi(flat).query("feature == 'prime_gender'")["mi_bits"].abs().max() < 1e-12


def test_temperature_overlap_counts_pairs_by_hand():
    base = {**EXACT, "variant": "joint"}
    rows = []
    contextual = {0.3: {("a", "MF"), ("b", "MF"), ("a", "FM")}, 0.7: {("b", "MF"), ("c", "FM")}}
    for t, hits in contextual.items():
        for pair in "abc":
            for order in ("MF", "FM"):
                rows.append({**base, "at_temperature": t, "pair_id": pair, "option_order": order,
                             "contextual": (pair, order) in hits, "delta_c": 0.0})
    got = temperature_overlap(pd.DataFrame(rows)).set_index("option_order")
    assert got.loc["MF", ["contextual_a", "contextual_b", "both"]].tolist() == [2, 1, 1]
    assert got.loc["MF", "jaccard"] == pytest.approx(1 / 2)
    assert got.loc["FM", ["contextual_a", "contextual_b", "both"]].tolist() == [1, 1, 0]
    assert got.loc["either", ["pairs", "contextual_a", "contextual_b", "both"]].tolist() == [3, 2, 2, 1]
    assert got.loc["either", "jaccard"] == pytest.approx(1 / 3)


def test_validity_counts_valid_samples_per_context_and_order(tmp_path, data_dir):
    """Sample mode: valid / total per context and order (the paper's Table 3), counted here from the rows written."""
    stimuli = winopron_stimuli(data_dir)[:40]
    rng = np.random.default_rng(5)
    requests, samples, expected = [], [], {}
    for s in stimuli:
        rid = f"s-{s.stimulus_id}"
        requests.append({"model_key": "m", "request_id": rid, "stimulus_id": s.stimulus_id, "protocol": "choice",
                         "mode": "sample", "prompt_version": "v", "adaptation": "-", "prompt_text": "-",
                         "options": list(s.options), "max_new_tokens": 6, "k_store": None})
        key = (s.context, s.option_order)
        for k in range(7):
            valid = bool(rng.random() < 0.6)
            answer = s.options[k % 2] if valid else None
            expected.setdefault(key, [0, 0])
            expected[key][0] += valid
            expected[key][1] += 1
            samples.append({"model_key": "m", "request_id": rid, "sample_index": k, "seed": k, "temperature": 1.0,
                            "top_k": 40, "top_p": 1.0, "max_new_tokens": 6, "stimulus_id": s.stimulus_id,
                            "text": answer or "it", "token_ids": [1], "token_logprobs": [-1.0],
                            "finish_reason": "stop", "answer": answer, "valid": valid, "run_id": None})
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append_many({"choice_requests": requests, "samples": samples})
    result = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(tmp_path / "w.duckdb"),
                                          "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    validity = json.loads(result.output)["validity"]
    assert len(validity) == len(expected) == 10
    for row in validity:
        valid, total = expected[(row["context"], row["option_order"])]
        assert (row["valid_samples"], row["samples"]) == (valid, total)
        assert row["valid_share"] == pytest.approx(valid / total) and row["valid_mass"] is None


def test_temperatures_without_trie_evidence_give_empty_tables(tmp_path, data_dir):
    stimuli = winopron_stimuli(data_dir)[:20]
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        requests, probs = exact_choice_rows("m" * 16, stimuli, [0.4] * 20, [0.5] * 20, prompt_version="v",
                                            temperature=0.5, top_k=40)
        wh.append_with_children("choice_requests", requests, {"choice_probs": probs})
    result = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(tmp_path / "w.duckdb"),
                                          "--format", "json", "--temperatures", "0.3,0.7"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    assert tables["temperature_kl"] == [] and tables["temperature_overlap"] == []
    bad = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(tmp_path / "w.duckdb"),
                                       "--temperatures", "0.3,-1"])
    assert bad.exit_code == 2 and "every temperature must be > 0, got -1" in bad.output


# --- temperature robustness against fresh exact runs (real SmolLM2, fp32) --------------------------------------

TEMPERATURES = (0.3, 0.5, 0.7)
# templates in the file's order (--limit-order file): accountant.taxpayer answer 0 acc / nom / poss_dep and answer
# 1 acc, 10 stimuli each: one complete template pair (acc) for CbD. The 3 rated templates share one rating
# (accountant), so Spearman is NaN on both sides (the NaN patterns are compared).
LIMIT = 4


@pytest.fixture(scope="module")
def collections(tmp_path_factory, data_dir):
    """One exact collection per temperature (top_k 40), each in its own warehouse."""
    from biaslab.runners.collect import CollectConfig, collect

    if not (data_dir / "winopron").is_dir():
        pytest.skip(f"dataset folder {data_dir / 'winopron'} is absent")
    root = tmp_path_factory.mktemp("temps")
    out = {}
    for t in TEMPERATURES:
        db = root / f"t{t}.duckdb"
        collect(CollectConfig(dataset="winopron", db=str(db), data_dir=str(data_dir), limit=LIMIT, dtype="fp32",
                              limit_order="file", temperature=t, top_k=40))
        out[t] = db
    return out


METRIC_COLUMNS = {"temperature_pf": ["mean_p_f", "sd_p_f", "mean_p_valid"],
                  "temperature_kl": ["mean_kl_bits", "sd_kl_bits"],
                  "temperature_spearman": ["spearman_rho"],
                  "temperature_mutual_information": ["mi_bits", "mi_se_bits"],
                  "temperature_cbd_fractions": ["contextual", "fraction"]}
KEYS = {"temperature_pf": ["option_order", "context"], "temperature_kl": ["option_order", "context"],
        "temperature_spearman": ["option_order", "context"],
        "temperature_mutual_information": ["context_group", "feature"],
        "temperature_cbd_fractions": ["variant", "option_order"]}


def _fresh_tables(db):
    """The same tables computed from a fresh collection's own winopron_pf."""
    with biaslab.open(db) as wh:
        pf = load_pf(_h(wh))
    pooled = pool_orders(pf)
    return {"temperature_pf": pf_table(pooled), "temperature_kl": kl_table(pooled)[1],
            "temperature_spearman": spearman_table(pooled),
            "temperature_mutual_information": mutual_information_per_template(pf),
            "temperature_cbd_fractions": cbd_fractions(cbd_table(pf))}, pf


def test_rederived_metrics_equal_fresh_exact_runs(collections):
    with biaslab.open(collections[0.5]) as wh:
        derived = temperature_tables(_h(wh), list(TEMPERATURES))
        derived_pf = {t: pf_at_temperature(_h(wh), t, 40).set_index("stimulus_id") for t in TEMPERATURES}
        zmax, depth = wh.warehouse.con.execute("SELECT max(abs(z)), max(depth) FROM (SELECT unnest(topk_logits) AS z, "
                                               "depth FROM choice_nodes)").fetchone()
    eps = torch.finfo(torch.float32).eps
    # Tolerance from the dtype (as tests/runners/test_choice_collect.py): the fp32 logits of the trie levels below
    # the first differ between runs by a few ulps of their magnitude (different live nodes share a batch); a logit
    # error d moves a probability by at most d / (2 T) per level, so an option's probability by at most
    # delta = depth * d / (2 T), and p(f) = p(female) / p_valid by at most 2 delta / p_valid.
    logit_error = 8 * eps * zmax
    # The metrics are smooth functions of the p(f) (no p(f) at 0 or 1, no Delta C at 0 on these templates); their
    # differences stay within 1000 float32 ulps at 1 (observed: ~1e-7).
    metric_tolerance = 1000 * eps
    for t in TEMPERATURES:
        fresh, pf = _fresh_tables(collections[t])
        assert len(pf) == 10 * LIMIT and pf["p_f"].notna().all()  # 10 prompts a template
        delta = depth * logit_error / (2 * t)
        mine = derived_pf[t].loc[pf["stimulus_id"]]
        female_fresh, female_mine = pf["p_f"].to_numpy() * pf["p_valid"].to_numpy(), mine["p_f"] * mine["p_valid"]
        assert np.abs(female_mine.to_numpy() - female_fresh).max() <= delta
        assert np.abs(mine["p_valid"].to_numpy() - pf["p_valid"].to_numpy()).max() <= 2 * delta
        assert (np.abs(mine["p_f"].to_numpy() - pf["p_f"].to_numpy()) <= 2 * delta / pf["p_valid"].to_numpy()).all()
        for name, columns in METRIC_COLUMNS.items():
            ours = derived[name][derived[name]["at_temperature"] == t]
            assert set(ours["temperature"]) == {0.5}  # named by the collection they came from
            theirs = fresh[name]
            assert set(theirs["temperature"]) == {t}
            merged = theirs.merge(ours, on=["model_key", *KEYS[name]], suffixes=("_fresh", "_derived"))
            assert len(merged) == len(theirs) == len(ours) > 0, name
            for column in columns:
                a, b = merged[f"{column}_fresh"].to_numpy(float), merged[f"{column}_derived"].to_numpy(float)
                assert np.array_equal(np.isnan(a), np.isnan(b)), (name, column)
                if (~np.isnan(a)).any():
                    assert np.nanmax(np.abs(a - b)) <= metric_tolerance, (name, column, t)
    # the temperatures differ by far more than the tolerance: re-deriving at 0.3 is not a no-op
    kl = derived["temperature_kl"].query("context == 'primed_f'").set_index("at_temperature")["mean_kl_bits"]
    assert abs(kl[0.3] - kl[0.7]) > 100 * metric_tolerance
    assert {(r.temperature_a, r.temperature_b) for r in derived["temperature_overlap"].itertuples()} == \
        {(0.3, 0.5), (0.3, 0.7), (0.5, 0.7)}


def test_rederivation_at_the_collection_temperature_is_the_stored_table(collections):
    with biaslab.open(collections[0.5]) as wh:
        derived = temperature_tables(_h(wh), [0.5])
        stored = load_pf(_h(wh))
    pooled = pool_orders(stored)
    expected = kl_table(pooled)[1]
    got = derived["temperature_kl"]
    assert got[SETTING].drop_duplicates().to_dict("records") == expected[SETTING].drop_duplicates().to_dict("records")
    assert got["mean_kl_bits"].to_numpy() == pytest.approx(expected["mean_kl_bits"].to_numpy(), abs=1e-12)
