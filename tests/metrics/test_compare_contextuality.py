"""`biaslab compare contextuality` (issue 43) on a warehouse with two settings of the same model (fp32 and bf16) over
120 WinoPron prompts (12 templates x 5 contexts x 2 orders), written through the warehouse's append path with known
probabilities; 3 templates have no valid answer in the bf16 setting. Checked against a difference of means computed
by hand in SQL, statsmodels' mcnemar and multipletests, and scipy's spearmanr."""

from __future__ import annotations

import hashlib
import re
import json
import math
from datetime import datetime

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

import biaslab
from biaslab.cli.main import biaslab as biaslab_cli
from biaslab.warehouse import Warehouse
from open_warehouse_evidence import exact_choice_rows, winopron_stimuli

KEY_A, KEY_B = "a1" * 8, "b2" * 8
LOST = 3  # templates without a valid answer in setting B


def _p(stimulus, shift: float, noise: float) -> float:
    rating = stimulus.stereotype_rating if stimulus.stereotype_rating is not None else 0.5
    logit = shift + noise + 3.0 * (rating - 0.5) + {"primed_f": 1.2, "primed_m": -1.0}.get(stimulus.context, 0.0)
    logit += 0.4 if stimulus.option_labels[0] == "female" else -0.4
    return 1.0 / (1.0 + math.exp(-logit))


def _model(key: str, dtype: str) -> dict:
    return {"model_key": key, "name": "tiny-lm", "source": "synthetic", "revision": None, "kind": "causal",
            "dtype": dtype, "quant": "none", "tokenizer": None, "bos_policy": "prepend",
            "registered_at": datetime(2026, 1, 1)}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, data_dir):
    db = tmp_path_factory.mktemp("compare") / "w.duckdb"
    stimuli = winopron_stimuli(data_dir)
    rng = np.random.default_rng(17)
    templates = sorted({s.item_id for s in stimuli})
    lost = set(templates[:LOST])
    with Warehouse.open(db) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append("models", [_model(KEY_A, "fp32"), _model(KEY_B, "bf16")])
        for key, shift in ((KEY_A, 0.0), (KEY_B, -0.6)):
            p_f = [_p(s, shift, rng.normal(0, 0.8)) for s in stimuli]
            valid = [0.0 if key == KEY_B and s.item_id in lost else rng.uniform(0.6, 1.0) for s in stimuli]
            requests, probs = exact_choice_rows(key, stimuli, p_f, valid, prompt_version="test", temperature=0.5,
                                                top_k=40)
            wh.append_with_children("choice_requests", requests, {"choice_probs": probs})
    return db, sorted(lost)


def _sql_pooled_difference(db) -> pd.DataFrame:
    """Mean over templates of the pooled p(f) of A minus B per context, by hand in SQL over the `winopron_pf` view:
    pooled p(f) = sum over orders of p_valid * p_f / sum of p_valid (exact mode), templates both settings have."""
    with biaslab.open(db) as wh:
        return wh.sql("""
            WITH pooled AS (
                SELECT model_key, item_id, context,
                       sum(p_f * p_valid) FILTER (WHERE p_valid > 0) / sum(p_valid) FILTER (WHERE p_valid > 0) AS p
                FROM winopron_pf GROUP BY ALL)
            SELECT a.context, avg(a.p - b.p) AS diff, avg(a.p) AS mean_a, avg(b.p) AS mean_b, count(*) AS n
            FROM pooled a JOIN pooled b ON a.item_id = b.item_id AND a.context = b.context
            WHERE a.model_key = 'KEY_A' AND b.model_key = 'KEY_B' AND a.p IS NOT NULL AND b.p IS NOT NULL
            GROUP BY a.context ORDER BY a.context""".replace("KEY_A", KEY_A).replace("KEY_B", KEY_B)).execute()


def test_between_two_settings_equals_independent_implementations(warehouse):
    db, lost = warehouse
    with biaslab.open(db) as wh:
        table = biaslab.compare(wh, "contextuality", between=["tiny-lm · fp32 · hf", KEY_B[:6]], bootstrap=500,
                                permutations=2000)
        ctx = biaslab.contextuality(wh, bootstrap=3, private=True)
    pf = table[table["measure"] == "p_f"].set_index("group")
    by_hand = _sql_pooled_difference(db).set_index("context")
    assert sorted(pf.index) == sorted(by_hand.index)
    for context, row in by_hand.iterrows():
        assert pf.loc[context, "estimate"] == pytest.approx(row["diff"], abs=1e-12)
        assert pf.loc[context, "value_a"] == pytest.approx(row["mean_a"], abs=1e-12)
        assert pf.loc[context, "n_items"] == row["n"] == 12 - LOST
    assert (pf["n_excluded"] == LOST).all() and pf["low_coverage"].all()  # 9 of 12 templates: 75% < 80%
    assert all(f"{LOST} templates without a value in tiny-lm · bf16 · hf ({', '.join(lost)})" in n
               for n in pf["note"])
    assert (pf["ci_low"] <= pf["estimate"]).all() and (pf["estimate"] <= pf["ci_high"]).all()
    assert set(table["setting_a"]) == {"tiny-lm · fp32 · hf"} and set(table["model_key_b"]) == {KEY_B}
    # Holm and BH over the whole family of rows (one pair of settings)
    assert np.allclose(table["p_holm"], multipletests(table["p_value"], method="holm")[1], atol=1e-15)
    assert np.allclose(table["p_bh"], multipletests(table["p_value"], method="fdr_bh")[1], atol=1e-15)
    # Spearman: rho of each side over the rated templates both have, as scipy computes it
    pooled = ctx["_pooled"]
    rated = pooled[pooled["stereotype_rating"].notna() & pooled["p_f"].notna()]
    unprimed = rated[rated["context"] == "unprimed"]
    both = set(unprimed.loc[unprimed["model_key"] == KEY_A, "item_id"]) & set(
        unprimed.loc[unprimed["model_key"] == KEY_B, "item_id"])
    side = {k: unprimed[(unprimed["model_key"] == k) & unprimed["item_id"].isin(both)].sort_values("item_id")
            for k in (KEY_A, KEY_B)}
    rho = table[(table["measure"] == "spearman_rho") & (table["group"] == "unprimed")].iloc[0]
    expected = [spearmanr(side[k]["p_f"], side[k]["stereotype_rating"]).statistic for k in (KEY_A, KEY_B)]
    assert (rho["value_a"], rho["value_b"]) == pytest.approx(tuple(expected), abs=1e-12)
    assert rho["test"] == "permutation" and rho["effect_kind"] == "cohen_q"
    # CbD (joint, either order): McNemar on the pairs both settings have
    cbd = ctx["_cbd"]
    either = (cbd[cbd["variant"] == "joint"].groupby(["model_key", "pair_id"])
              .agg(n=("contextual", "size"), c=("contextual", "any")).reset_index())
    either = either[either["n"] == 2].pivot(index="pair_id", columns="model_key", values="c").dropna()
    a, b = either[KEY_A].astype(bool), either[KEY_B].astype(bool)
    row = table[(table["measure"] == "cbd_contextual") & (table["group"] == "joint · either")].iloc[0]
    assert row["test"] == "mcnemar" and row["n_items"] == len(either)
    assert row["p_value"] == pytest.approx(mcnemar([[int((a & b).sum()), int((a & ~b).sum())],
                                                    [int((~a & b).sum()), int((~a & ~b).sum())]],
                                                   exact=True).pvalue)


def test_within_compares_contexts_and_orders(warehouse):
    db, _ = warehouse
    with biaslab.open(db) as wh:
        table = biaslab.compare(wh, "contextuality", within=True, between=["tiny-lm · fp32 · hf", KEY_B],
                                bootstrap=200, permutations=1000)
        pf = wh.sql(f"SELECT item_id, context, option_order, p_f FROM winopron_pf WHERE model_key = '{KEY_A}'"
                    ).execute()
    mine = table[table["setting_a"] == "tiny-lm · fp32 · hf"]
    order = mine[(mine["measure"] == "p_f_order") & (mine["group"] == "unprimed · MF vs unprimed · FM")].iloc[0]
    wide = pf[pf["context"] == "unprimed"].pivot(index="item_id", columns="option_order", values="p_f")
    assert order["estimate"] == pytest.approx((wide["MF"] - wide["FM"]).mean(), abs=1e-12)
    assert order["n_items"] == 12 and order["setting_b"] == order["setting_a"]
    primed = mine[(mine["measure"] == "p_f") & (mine["group"] == "primed_f vs unprimed")].iloc[0]
    assert primed["estimate"] > 0 and primed["p_value"] < 0.01  # the synthetic prime moves p(f) up
    assert len(table.groupby("setting_a")) == 2  # one family per setting


def test_compare_cli_json_and_terminal(warehouse, monkeypatch):
    db, lost = warehouse
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    runner = CliRunner()
    result = runner.invoke(biaslab_cli, ["compare", "contextuality", "--db", str(db), "--between",
                                         "tiny-lm · fp32 · hf", KEY_B[:4], "--format", "json", "--bootstrap", "100",
                                         "--permutations", "500"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    records = json.loads(result.output)
    for field in ("measure", "group", "setting_a", "setting_b", "estimate", "ci_low", "ci_high", "p_value", "p_holm",
                  "p_bh", "n_items", "n_excluded"):
        assert all(field in r for r in records), field
    assert {r["measure"] for r in records} == {"p_f", "p_valid", "kl_bits", "spearman_rho", "cbd_contextual"}
    monkeypatch.setenv("COLUMNS", "100")
    shown = runner.invoke(biaslab_cli, ["compare", "contextuality", "--db", str(db), "--bootstrap", "100",
                                        "--permutations", "500"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "A = tiny-lm · fp32 · hf · B = tiny-lm · bf16 · hf" in shown.output
    assert "low coverage" in shown.output and f"p_f unprimed: left out: {LOST} templates" in shown.output
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest  # read-only


@pytest.mark.parametrize("args, message", [
    (["--between", "tiny-lm", "tiny-lm"], "names the same setting twice"),
    (["--between", "zzz", KEY_B], "--between 'zzz' names no setting of this study"),
    (["--between", KEY_A, KEY_A[:5]], "names the same setting twice"),
])
def test_compare_cli_refuses_bad_settings(warehouse, args, message):
    db, _ = warehouse
    result = CliRunner().invoke(biaslab_cli, ["compare", "contextuality", "--db", str(db), *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_compare_unknown_study(warehouse):
    db, _ = warehouse
    result = CliRunner().invoke(biaslab_cli, ["compare", "negationx", "--db", str(db)])
    assert result.exit_code == 2 and "has no comparisons; studies with comparisons: contextuality" in result.output


def test_report_has_a_comparison_section(warehouse, tmp_path):
    db, _ = warehouse
    out = tmp_path / "report"
    result = CliRunner().invoke(biaslab_cli, ["report", "contextuality", "--db", str(db), "--out", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    section = page[page.index('<h2 id="comparison">'):]
    assert "tiny-lm · fp32 · hf" in section and "tiny-lm · bf16 · hf" in section
    assert section.count("<tr") >= 23 and "p_holm" in section and "low-coverage" in section


def test_report_links_the_evidence_in_biaslab_view(warehouse, tmp_path):
    db, _ = warehouse
    out = tmp_path / "report"
    CliRunner().invoke(biaslab_cli, ["report", "contextuality", "--db", str(db), "--out", str(out)],
                       catch_exceptions=False)
    page = (out / "index.html").read_text()
    links = re.findall(r'href="http://127\.0\.0\.1:8765(/stimulus/[0-9a-f]{16})"', page)
    assert len(links) == 3 and 'href="http://127.0.0.1:8765/study/contextuality"' in page
    from biaslab.cli.view import create_app

    client = create_app(db).test_client()  # the addresses the report gives are pages of `biaslab view`
    assert all(client.get(link).status_code == 200 for link in [*links, "/study/contextuality"])
