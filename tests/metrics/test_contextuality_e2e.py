"""Contextuality metrics and report end to end: two models' evidence in one warehouse, no code change between them."""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.loaders import get
from biaslab.metrics.contextuality.cbd import MARGINAL_PRODUCT_NOTE
from biaslab.metrics.contextuality.information import bernoulli_kl_bits
from biaslab.warehouse import Warehouse
from open_warehouse_evidence import exact_choice_rows, winopron_stimuli


def _synthetic_probability(stimulus, shift: float) -> float:
    """A made-up model: prefers 'she' for feminine-rated antecedents, follows the prime, prefers the first option."""
    rating = stimulus.stereotype_rating if stimulus.stereotype_rating is not None else 0.5
    logit = shift + 3.0 * (rating - 0.5) + {"primed_f": 1.0, "primed_m": -1.0}.get(stimulus.context, 0.0)
    logit += 0.5 if stimulus.option_labels[0] == "female" else -0.5
    return 1.0 / (1.0 + math.exp(-logit))


def _synthetic_warehouse(db, data_dir, models=(("synthetic-a", 0.0), ("synthetic-b", -1.0))):
    """WinoPron stimuli plus exact-mode evidence of synthetic models (model_key, logit shift) with known
    probabilities, written through the warehouse's own append path."""
    stimuli = winopron_stimuli(data_dir)  # technician/customer and the next pair, 3 cases
    with Warehouse.open(db) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        for model_key, shift in models:
            requests, probs = exact_choice_rows(model_key, stimuli, [_synthetic_probability(s, shift) for s in stimuli],
                                                [0.8] * len(stimuli), prompt_version="test", temperature=0.5,
                                                top_k=40, unresolved=True)
            wh.append_with_children("choice_requests", requests, {"choice_probs": probs})
    return db, stimuli


@pytest.fixture(scope="module")
def two_model_warehouse(tmp_path_factory, data_dir):
    """Two synthetic models (`_synthetic_warehouse`). (Tiny random models put almost no mass on she/he, which would
    leave the metrics empty; the runner path itself is tested in tests/runners.)"""
    return _synthetic_warehouse(tmp_path_factory.mktemp("ctx") / "w.duckdb", data_dir)


def test_one_setting_compares_nothing(tmp_path, data_dir, monkeypatch):
    """Issue 36: with one collection setting, model_overlap compared the setting with itself (Jaccard 1); now it has
    no rows and says why, in one line that fits 100 columns, and in JSON it is an empty list."""
    db, _ = _synthetic_warehouse(tmp_path / "one.duckdb", data_dir, models=(("synthetic-a", 0.0),))
    monkeypatch.setenv("COLUMNS", "100")
    shown = CliRunner().invoke(biaslab, ["metrics", "contextuality", "--db", str(db), "--bootstrap", "3"],
                               catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("model_overlap"))
    assert lines[start].startswith("model_overlap (0 rows): 1 collection setting; a comparison needs at least 2")
    assert "setting_a" not in shown.output and max(len(line) for line in lines) <= 100
    as_json = CliRunner().invoke(biaslab, ["metrics", "contextuality", "--db", str(db), "--format", "json",
                                           "--bootstrap", "3"], catch_exceptions=False)
    assert json.loads(as_json.output)["model_overlap"] == []


def test_metrics_cover_both_models(two_model_warehouse):
    db, stimuli = two_model_warehouse
    result = CliRunner().invoke(biaslab, ["metrics", "contextuality", "--db", str(db), "--by-order",
                                          "--format", "json", "--bootstrap", "3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    for name in ("validity", "pf", "pf_by_order", "kl", "kl_by_order", "spearman", "spearman_by_order",
                 "mutual_information", "cbd_fractions", "model_overlap"):
        assert len({row["model_key"] for row in tables[name]} if name != "model_overlap" else
                   {row[side] for row in tables[name] for side in ("setting_a", "setting_b")}) == 2, name
    # two settings: one pair per variant, never a setting against itself
    assert sorted(row["variant"] for row in tables["model_overlap"]) == ["joint", "marginal-product"]
    assert all(row["setting_a"] < row["setting_b"] for row in tables["model_overlap"])
    # mean KL(primed_f || unprimed) equals an independent computation from the synthetic model: per order, and with
    # both orders pooled per template (valid mass 0.8 in both orders: the pooled p(f) is the mean of the two)
    for model_key, shift in (("synthetic-a", 0.0), ("synthetic-b", -1.0)):
        by = {(s.item_id, s.context, s.option_order): _synthetic_probability(s, shift) for s in stimuli}
        items = {i for i, _, _ in by}
        for order in ("MF", "FM"):
            expected = sum(bernoulli_kl_bits(by[(i, "primed_f", order)], by[(i, "unprimed", order)])
                           for i in items) / len(items)
            row = next(r for r in tables["kl_by_order"] if r["model_key"] == model_key and r["option_order"] == order
                       and r["context"] == "primed_f")
            assert row["templates"] == 12 and row["mean_kl_bits"] == pytest.approx(expected)
        pooled = {(i, c): (by[(i, c, "MF")] + by[(i, c, "FM")]) / 2 for i, c, _ in by}
        expected = sum(bernoulli_kl_bits(pooled[(i, "primed_f")], pooled[(i, "unprimed")]) for i in items) / len(items)
        row = next(r for r in tables["kl"] if r["model_key"] == model_key and r["context"] == "primed_f")
        assert row["option_order"] == "pooled" and row["templates"] == 12
        assert row["mean_kl_bits"] == pytest.approx(expected)
    without = CliRunner().invoke(biaslab, ["metrics", "contextuality", "--db", str(db), "--format", "json"],
                                 catch_exceptions=False)
    assert not {"pf_by_order", "kl_by_order", "spearman_by_order"} & set(json.loads(without.output))
    either = [row for row in tables["cbd_fractions"] if row["option_order"] == "either"]
    assert {row["pairs"] for row in either} == {6}  # 2 occupation-participant pairs x 3 cases
    # the marginal-product variant is never contextual, and every row showing it says so
    printed = [row for row in tables["cbd_fractions"] if row["variant"] == "marginal-product"]
    assert printed and all(row["contextual"] == 0 and row["note"] == MARGINAL_PRODUCT_NOTE for row in printed)
    assert all(row["note"] == "" for row in tables["cbd_fractions"] if row["variant"] == "joint")
    assert all(row["note"] == (MARGINAL_PRODUCT_NOTE if row["variant"] == "marginal-product" else "")
               for row in tables["model_overlap"])
    spearman = [r for r in tables["spearman"] if r["context"] == "unprimed"]
    assert all(r["spearman_rho"] > 0.5 for r in spearman if r["n"] >= 5)  # the synthetic model follows ratings


def test_report_renders_every_figure_in_headless_chromium(two_model_warehouse, tmp_path):
    out = tmp_path / "report"
    db, _ = two_model_warehouse
    result = CliRunner().invoke(biaslab, ["report", "contextuality", "--db", str(db), "--out", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) == 1 + 2 * 5 + 1  # the headline (every setting), five figures per model, one comparison matrix
    # where the marginal-product variant is shown (CbD fractions per model and across settings, model overlap): one
    # line saying it can never be contextual
    note = f'<p class="note">Note: {html.escape(MARGINAL_PRODUCT_NOTE)}.</p>'
    assert page.count(note) == 2 + 1 + 1
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={tmp_path / 'p'}",
             "--virtual-time-budget=5000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", (out / "index.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert f'data-images-loaded="{len(images)}/{len(images)}"' in dom
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1200,3000", (out / "index.html").as_uri()],
                   capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_separate_collections_of_a_stimulus_are_not_pooled(tmp_path, data_dir):
    """Two exact-mode collections (different token limits) of the same stimuli stay two rows, each p_valid 0.8."""
    if not (data_dir / "winopron").is_dir():
        pytest.skip(f"dataset folder {data_dir / 'winopron'} is absent")
    stimuli = get("winopron").load(data_dir)[:10]
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        for max_new in (3, 6):
            requests, probs = [], []
            for s in stimuli:
                rid = f"{max_new}-{s.stimulus_id}"
                requests.append({"model_key": "m", "request_id": rid, "stimulus_id": s.stimulus_id,
                                 "protocol": "choice", "mode": "exact", "prompt_version": "v", "adaptation": "-",
                                 "prompt_text": "-", "options": list(s.options), "max_new_tokens": max_new})
                for option, p in ((s.options[0], 0.5), (s.options[1], 0.3), ("invalid", 0.2)):
                    probs.append({"model_key": "m", "request_id": rid, "option": option, "prob": p,
                                  "temperature": 0.5, "top_k": 40, "top_p": 1.0})
            wh.append_with_children("choice_requests", requests, {"choice_probs": probs})
        rows = wh.con.execute("SELECT max_new_tokens, count(*), min(p_valid), max(p_valid) FROM winopron_pf "
                              "GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [(3, 10, pytest.approx(0.8), pytest.approx(0.8)), (6, 10, pytest.approx(0.8), pytest.approx(0.8))]


def test_the_headline_figure_shows_each_settings_mean_with_its_t_interval(tmp_path, monkeypatch):
    """The report's (and the view's) first figure: a series per setting, its points the mean p(f) per context, its
    bars scipy's 95% t-interval of the templates' p(f) values (computed here from the raw values)."""
    from scipy import stats

    from biaslab.metrics.contextuality import report
    from biaslab.metrics.contextuality.stats import CONTEXTS, SETTING

    rng = np.random.default_rng(3)
    raw, rows = {}, []
    for model, n in (("k1", 6), ("k2", 9)):
        key = (model, "exact", 0.5, 40, 1.0, "v1", 6)
        for context in CONTEXTS:
            values = rng.uniform(0, 1, n)
            raw[(key, context)] = values
            rows.append({**dict(zip(SETTING, key)), "option_order": "pooled", "context": context, "templates": n,
                         "mean_p_f": values.mean(), "sd_p_f": values.std(ddof=1), "mean_p_valid": 1.0})
            rows.append({**dict(zip(SETTING, key)), "option_order": "MF", "context": context, "templates": n,
                         "mean_p_f": 0.99, "sd_p_f": 0.0, "mean_p_valid": 1.0})  # not pooled: not drawn
    captured = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, out, name, **kw: captured.setdefault(name, fig) and name)
    report.headline_figure(pd.DataFrame(rows), {}, tmp_path)
    [ax] = captured["headline_pf.png"].axes
    assert len(ax.containers) == 2
    for container, model in zip(ax.containers, ("k1", "k2")):
        key = (model, "exact", 0.5, 40, 1.0, "v1", 6)
        _, y = container.lines[0].get_data()
        segments = container.lines[2][0].get_segments()
        for i, context in enumerate(CONTEXTS):
            values = raw[(key, context)]
            low, high = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
            assert y[i] == pytest.approx(values.mean(), abs=1e-12)
            assert (segments[i][0][1], segments[i][1][1]) == pytest.approx((low, high), abs=1e-12)
