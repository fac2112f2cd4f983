"""Issue 44, item 6: gen on a user dataset. `metrics options` gives the gen rates per declared family with Wilson
intervals (a gen-only study too, instead of "collect it"); `metrics misgendering` pairs a user study's prob and gen
(agreement tables); `report misgendering` draws every declared family, named female / male as the docs instruct.

The tiny model's continuations rarely hold a pronoun, so the stored texts are replaced, in the test's own
warehouse, by sentences whose first pronoun is known; the shares are then checked against a hand count."""

from __future__ import annotations

import json
import math

import duckdb
import pytest
from click.testing import CliRunner
from statsmodels.stats.proportion import proportion_confint

from biaslab.cli.main import biaslab as cli
from biaslab.metrics.misgendering import report as mis_report
from biaslab.warehouse import Warehouse
from user_specs import spec_warehouse

SPEC = """
name: pronoun-gen
protocols: [gen, prob]
pronouns:
  female: {nom: she, acc: her, poss_dep: her}
  male: {nom: he, acc: him, poss_dep: his}
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
fillers:
  name: [Mary, Anna, John]
templates:
  - {id: f, text: "{name} said that {pronoun} was home.", case: nom, gold: female}
  - {id: m, text: "{name} said that {pronoun} was out.", case: nom, gold: male}
"""
#: the continuations written in place of the tiny model's: first pronoun female, male, male, none
TEXTS = [" and she left early.", " because he was tired, she said.", " and him too.", " nothing else."]


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_gpt2):
    path = spec_warehouse(tmp_path_factory.mktemp("gen"), SPEC, "pronoun-gen", tiny_gpt2,
                          [{"protocol": "prob"}, {"protocol": "gen", "samples": 4, "max_new_tokens": 4}])
    con = duckdb.connect(str(path))
    con.execute("UPDATE samples SET text = CASE sample_index WHEN 0 THEN ? WHEN 1 THEN ? WHEN 2 THEN ? ELSE ? END "
                "WHERE request_id IN (SELECT request_id FROM gen_requests)", TEXTS)
    con.close()
    return path


def _run(*args):
    result = CliRunner().invoke(cli, [*args])
    assert result.exit_code == 0, result.output
    return result.output


def test_gen_rates_per_declared_family_against_a_hand_count(db):
    tables = json.loads(_run("metrics", "options", "--dataset", "pronoun-gen", "--db", str(db), "--format", "json"))
    gen = tables["gen"]
    with Warehouse.open(db, read_only=True) as wh:
        cells = wh.rows("SELECT context, declared, count(*) FROM gen_samples GROUP BY ALL ORDER BY ALL")
    assert {(r["context"], r["declared"]) for r in gen} == {(c, d) for c, d, _ in cells}
    first = {"female": 1, "male": 2, "(no pronoun)": 1}  # of every 4 continuations (TEXTS)
    for context, declared, n in cells:
        rows = {r["family"]: r for r in gen if (r["context"], r["declared"]) == (context, declared)}
        assert set(rows) == {"female", "male", "(no pronoun)"}  # every declared family, the gold one too
        assert math.fsum(r["share"] for r in rows.values()) == pytest.approx(1.0, abs=1e-12)
        for family, per_four in first.items():
            k = per_four * n // 4
            low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
            assert (rows[family]["n"], rows[family]["share"]) == (n, pytest.approx(k / n, abs=1e-12))
            # the study's Wilson interval takes z = 1.96, statsmodels the exact 1.959964: 1e-5 apart at most here
            assert (rows[family]["ci_low"], rows[family]["ci_high"]) == (pytest.approx(low, abs=1e-5),
                                                                        pytest.approx(high, abs=1e-5))
    assert tables["means"]  # the prob evidence keeps its own tables beside


def test_a_gen_only_study_gets_its_rates_not_collect_it(tmp_path, tiny_gpt2):
    path = spec_warehouse(tmp_path, SPEC.replace("protocols: [gen, prob]", "protocols: [gen]"), "pronoun-gen",
                          tiny_gpt2, [{"protocol": "gen", "samples": 2, "max_new_tokens": 3}])
    tables = json.loads(_run("metrics", "options", "--dataset", "pronoun-gen", "--db", str(path), "--format",
                             "json"))
    assert tables["gen"] and {r["n"] for r in tables["gen"]} == {2 * 3}  # 2 samples x 3 names per template
    assert tables["means"] == []


def test_misgendering_pairs_a_user_studys_prob_and_gen(db):
    tables = json.loads(_run("metrics", "misgendering", "--db", str(db), "--format", "json"))
    prob = [r for r in tables["correctness"] if r["dataset"] == "pronoun-gen" and r["method"] == "prob"]
    assert {r["declared"] for r in prob} == {"female", "male"} and sum(r["n"] for r in prob) == 6
    agreement = [r for r in tables["agreement"] if r["dataset"] == "pronoun-gen"]
    assert agreement and all(r["n"] > 0 for r in agreement)


def test_the_misgendering_report_draws_every_declared_family(db, tmp_path, monkeypatch):
    legends = []
    original = mis_report.save_figure

    def keep(fig, out, name):
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:
                legends.append((name, [t.get_text() for t in legend.get_texts()]))
        return original(fig, out, name)

    monkeypatch.setattr(mis_report, "save_figure", keep)
    _run("report", "misgendering", "--db", str(db), "--out", str(tmp_path / "r"))
    correctness = [labels for name, labels in legends if name.endswith("_correctness.png")]
    assert correctness and all({"female", "male"} <= set(labels) for labels in correctness)
