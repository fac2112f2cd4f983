"""HTML reports: sections titled by model name (hash only as small text), axis labels and n on figures, a sentence
instead of an empty figure, and the contextuality flags (invalid mass, position bias)."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.metrics.contextuality.report import setting_flags
from biaslab.warehouse import Warehouse
from open_warehouse_evidence import MODEL_A, MODEL_B, build, exact_choice_rows, winopron_stimuli


@pytest.fixture(scope="module")
def winopron(data_dir):
    return winopron_stimuli(data_dir)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, winopron, data_dir):
    return build(tmp_path_factory.mktemp("reports") / "w.duckdb", data_dir)


def _exact_evidence(db, stimuli, p_f, valid: float, key: str = "m" * 16) -> None:
    """Exact-mode WinoPron evidence of one registered model: p(female | valid) = p_f(stimulus), p_valid = valid."""
    with Warehouse.open(db) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append("models", [{"model_key": key, "name": "flag-model", "source": "synthetic", "kind": "causal",
                              "dtype": "bf16", "quant": "none", "bos_policy": "prepend",
                              "registered_at": datetime(2026, 1, 1)}])
        requests, probs = exact_choice_rows(key, stimuli, [p_f(s) for s in stimuli], [valid] * len(stimuli),
                                            prompt_version="v9", temperature=0.7, top_k=20)
        wh.append_with_children("choice_requests", requests, {"choice_probs": probs})


def _report(study: str, db, out, *extra) -> str:
    result = CliRunner().invoke(biaslab, ["report", study, "--db", str(db), "--out", str(out), *extra],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return (out / "index.html").read_text()


def _model_headings(page: str) -> list[str]:
    return [h for h in re.findall(r"<h2>(.*?)</h2>", page) if "model_key" in h]


@pytest.mark.parametrize("study,extra", [("contextuality", ()), ("misgendering", ()), ("negation", ()),
                                         ("calibration", ("--bootstrap", "5"))])
def test_sections_name_the_model_and_keep_the_hash_as_small_text(synthetic, tmp_path, study, extra):
    page = _report(study, synthetic, tmp_path / study, *extra)
    headings = _model_headings(page)
    named = [h for h in headings if "synthetic-a · fp32 · hf" in h]
    unregistered = [h for h in headings if h.startswith(f"{MODEL_B} · dtype ? · hf") or f": {MODEL_B} · " in h]
    assert named and unregistered and len(named) + len(unregistered) == len(headings)
    for heading in named:
        # the hash appears once, shortened, inside the small element; nowhere else in the heading
        assert heading.count("a" * 12) == 1
        small = re.fullmatch(r'.*<small class="key">model_key (\w+)</small>', heading)
        assert small and small.group(1) == MODEL_A[:12]
    if study == "contextuality":
        settings = [re.search(r'<span class="settings">— (.*?)</span>', h).group(1) for h in named]
        assert settings == ["exact · T=0.5 · top_k=40 · top_p=1 · max_new=6 · prompt test",
                            "sample · T=1 · top_k=40 · top_p=1 · max_new=6 · prompt test"]
    if study == "calibration":
        assert sorted(h.split(":")[0] for h in named) == ["gece-test", "genderlex"]


def test_contextuality_figures_carry_n_and_the_report_raises_no_flag_on_balanced_evidence(synthetic, tmp_path):
    page = _report("contextuality", synthetic, tmp_path / "ctx")
    assert "<b>Flags</b>: none raised." in page
    # model A exact (s0): 120 prompts, 6 template pairs: five figures; model A sample (s1): 40 prompts, 2 pairs
    assert len(re.findall(r'<img src="s0_', page)) == 5 and len(re.findall(r'<img src="s1_', page)) == 4
    assert page.count('<p class="empty">contextual fractions (CbD): nothing to show: 2 template pairs with '
                      'p(feminine) defined where needed; a figure needs at least 3.</p>') == 1
    assert '<img src="s1_cbd.png"' not in page and not (tmp_path / "ctx" / "s1_cbd.png").exists()


def test_invalid_mass_of_085_is_flagged_at_the_top(tmp_path, winopron):
    db = tmp_path / "w.duckdb"
    _exact_evidence(db, winopron, lambda s: 0.3 + 0.4 * (s.context == "primed_f"), valid=0.15)
    page = _report("contextuality", db, tmp_path / "r")
    flags = re.search(r'<div class="flags">(.*?)</div>', page).group(1)
    assert page.index('<div class="flags">') < page.index("<h2>")  # at the top, before the first section
    assert ("<b>flag-model · bf16 · hf — exact · T=0.7 · top_k=20 · top_p=1 · max_new=6 · prompt v9</b>: invalid mass "
            "dominates: mean invalid mass 0.850 &gt; 0.5 over 120 prompts") in flags
    assert "position bias dominates" not in flags  # no order effect; the context moves p(f) by 0.4 in primed_f
    assert "Rules: invalid mass: flagged when the mean over prompts of 1 - p_valid" in flags


def test_position_bias_larger_than_the_context_effect_is_flagged(tmp_path, winopron):
    db = tmp_path / "w.duckdb"
    # p(f) 0.8 when the feminine option is shown first, 0.2 otherwise; priming moves it by 0.1
    _exact_evidence(db, winopron, lambda s: (0.8 if s.option_labels[0] == "female" else 0.2)
                    + {"primed_f": 0.1, "primed_m": -0.1}.get(s.context, 0.0), valid=0.9)
    with Warehouse.open(db, read_only=True) as wh:
        pf = wh.con.execute("SELECT * FROM winopron_pf").df()
    row = setting_flags(pf).iloc[0]
    # order gap: |0.8 - 0.2| = 0.6 in every (template, context); context gap: 0.1 in 2 of 4 contexts = 0.05
    assert row["order_gap"] == pytest.approx(0.6) and row["order_pairs"] == 60
    assert row["context_gap"] == pytest.approx(0.05) and row["context_pairs"] == 96
    assert row["mean_invalid_mass"] == pytest.approx(0.1) and not row["invalid_flag"] and row["position_flag"]
    page = _report("contextuality", db, tmp_path / "r")
    assert ("position bias dominates: order gap 0.600 (n = 60) &gt; context gap 0.050 (n = 96)") in page
    assert "invalid mass dominates" not in page


def test_fewer_than_three_prompts_say_nothing_to_show_instead_of_empty_figures(tmp_path, winopron):
    db = tmp_path / "w.duckdb"
    _exact_evidence(db, winopron[:2], lambda s: 0.5, valid=0.9)
    page = _report("contextuality", db, tmp_path / "r")
    assert re.findall(r"<img src=", page) == []
    # the whole section says it is too small (issue 36), instead of five "nothing to show" figures
    assert ('<p class="empty">Too small to estimate anything: 2 prompts, 2 with a defined p(feminine), and no '
            'template measured in every context') in page
    assert "comparison: nothing to show: 1 collection setting" in page
    assert page.count('<p class="empty">') == 2
    assert not list((tmp_path / "r").glob("*.png"))
