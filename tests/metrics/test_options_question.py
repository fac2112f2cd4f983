"""Issue 44, item 7: the options report answers "does the model's choice follow the names' perceived gender?".

- Spearman's rho over the study's unit (a spec declares `unit: name`; `--unit` overrides): rho and p equal
  scipy.stats.spearmanr over the per-name means; the interval is a bootstrap over units whose vectorized ranks equal
  a loop of scipy.stats.spearmanr over the same resamples, and lies near scipy.stats.bootstrap's.
- The option-order effect: mean p per position, the spread and the large flag against a hand computation, and the
  report says it in words where it is large.
- The report draws the scatter with rho and its interval, and the contrast of every option with labelled axes.
- `--temperatures` / `--top-k` re-derive the exact collections from their stored tries: at the collected settings
  they equal the stored numbers; what cannot be re-derived is refused in one line.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import bootstrap as scipy_bootstrap
from scipy.stats import spearmanr

from biaslab.cli.main import biaslab as cli
from biaslab.metrics.options import report, stats
from biaslab.warehouse import Warehouse
from user_specs import spec_warehouse

NAMES = [("Mary", 0.98), ("Emma", 0.97), ("Linda", 0.96), ("Robin", 0.55), ("Taylor", 0.52), ("Casey", 0.5),
         ("Jordan", 0.45), ("Alex", 0.4), ("Peter", 0.04), ("James", 0.03), ("John", 0.02), ("David", 0.01)]
SPEC = """
name: names
protocols: [choice, prob]
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
orders: [[female, male], [male, female]]
fillers:
  name:
FILLERS
templates:
  - {id: late, text: "{name} called to say that {pronoun} would be late.", case: nom}
  - {id: won, text: "{name} was happy because {pronoun} had won.", case: nom}
contexts:
  - {name: unprimed}
  - {name: primed_f, prime: "{pronoun:female} had a long day."}
unit: name
""".replace("FILLERS", "\n".join(f"    - {{value: {n}, rating: {r}}}" for n, r in NAMES))


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_gpt2):
    return spec_warehouse(tmp_path_factory.mktemp("names"), SPEC, "names", tiny_gpt2,
                          [{"protocol": "prob"}, {"protocol": "choice", "max_new_tokens": 3, "top_k": 20}])


def _json(db, *args):
    result = CliRunner().invoke(cli, ["metrics", "options", "--dataset", "names", "--db", str(db), "--format",
                                      "json", "--bootstrap", "300", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _prob_rows(db) -> pd.DataFrame:
    with Warehouse.open(db, read_only=True) as wh:
        frame = wh.query("SELECT o.method, o.option_label, o.p, s.item_id, s.context, s.name, s.options, o.option "
                         "FROM option_probs o JOIN stimuli s USING (stimulus_id) WHERE s.dataset = 'names'")
    frame["rating"] = frame["name"].map(dict(NAMES))
    return frame


def test_spearman_is_over_the_declared_unit_and_equals_scipy(db):
    tables = _json(db, "--spearman", "name_rating")
    frame = _prob_rows(db)
    prob = frame[(frame["method"] == "prob") & (frame["option_label"] == "female")]
    per_item = prob.groupby(["item_id", "name"])[["p", "rating"]].mean().reset_index()
    per_name = per_item.groupby("name")[["p", "rating"]].mean()
    expected = spearmanr(per_name["rating"], per_name["p"])
    [row] = [r for r in tables["spearman"] if r["method"] == "prob" and r["option_label"] == "female"]
    assert (row["unit"], row["n"]) == ("name", 12)
    assert row["rho"] == pytest.approx(expected.statistic, abs=1e-12)
    assert row["p_value"] == pytest.approx(expected.pvalue, abs=1e-12)
    assert row["ci_low"] < row["rho"] < row["ci_high"]
    # over items (names x templates, not independent) the same data claim twice the observations
    [by_item] = [r for r in _json(db, "--spearman", "name_rating", "--unit", "item_id")["spearman"]
                 if r["method"] == "prob" and r["option_label"] == "female"]
    items = spearmanr(per_item["rating"], per_item["p"])
    assert (by_item["unit"], by_item["n"]) == ("item_id", 24)
    assert by_item["rho"] == pytest.approx(items.statistic, abs=1e-12)


def test_the_unit_bootstrap_equals_a_loop_of_scipy_over_the_same_resamples():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=15), rng.normal(size=15)
    y = y + x  # a real correlation
    y[3] = y[4]  # and a tie
    low, high = stats.spearman_ci(x, y, np.random.default_rng(11), bootstrap=400)
    draws = np.random.default_rng(11).integers(0, 15, size=(400, 15))
    loop = [spearmanr(x[i], y[i]).statistic for i in draws]
    loop = np.array([v for v in loop if np.isfinite(v)])
    assert (low, high) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)
    ref = scipy_bootstrap((x, y), lambda a, b: spearmanr(a, b).statistic, paired=True, vectorized=False,
                          n_resamples=2000, method="percentile", random_state=1).confidence_interval
    assert low == pytest.approx(ref.low, abs=0.08) and high == pytest.approx(ref.high, abs=0.08)


def test_a_unit_the_spec_cannot_have_is_refused_in_one_line(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.replace("unit: name", "unit: nmae"))
    result = CliRunner().invoke(cli, ["data", "load", "--spec", str(spec), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code != 0
    assert result.output.strip().splitlines()[-1].endswith(
        "unit: 'nmae' is not a filler slot (name), a filler attribute, template_id or item_id")
    assert not (tmp_path / "w.duckdb").exists()


def test_the_order_effect_against_a_hand_computation():
    rows = []
    for item in range(4):
        for first in ("female", "male"):  # female listed first: p(female) 0.9 + item/100; second: 0.1
            p_female = 0.9 + item / 100 if first == "female" else 0.1
            position = 1 if first == "female" else 2
            rows += [{"model_key": "m", "method": "choice-exact", "setting": "s", "item_id": f"i{item}",
                      "stimulus_id": f"{item}{first}", "option_label": "female", "p": p_female,
                      "position": position},
                     {"model_key": "m", "method": "choice-exact", "setting": "s", "item_id": f"i{item}",
                      "stimulus_id": f"{item}{first}", "option_label": "male", "p": 1 - p_female,
                      "position": 3 - position}]
    table = stats.order_effect(pd.DataFrame(rows), None)
    female = table[table["option_label"] == "female"].set_index("position")
    assert female.loc[1, "mean_p"] == pytest.approx(np.mean([0.9, 0.91, 0.92, 0.93]), abs=1e-12)
    assert female.loc[2, "mean_p"] == pytest.approx(0.1, abs=1e-12)
    assert female["spread"].iloc[0] == pytest.approx(0.915 - 0.1, abs=1e-12)
    assert female["large"].all() and female["items"].tolist() == [4, 4]
    note = report.order_note(table.assign(model_name="m"), [])
    assert "The option order matters" in note and "p(female): 0.92 listed first, 0.10 listed second" in note
    small = stats.order_effect(pd.DataFrame(rows).assign(p=0.5), None)
    assert not small["large"].any() and report.order_note(small, []) == ""


def test_metrics_carry_the_order_table_of_the_choice_collections(db):
    tables = _json(db)
    frame = _prob_rows(db)
    choice = frame[frame["method"] == "choice-exact"].copy()
    choice["position"] = [list(o).index(x) + 1 for o, x in zip(choice["options"], choice["option"])]
    order = [r for r in tables["order"]]
    assert order and {r["method"] for r in order} == {"choice-exact"}  # prob scores sentences: no order
    for row in order:
        part = choice[(choice["option_label"] == row["option_label"]) & (choice["position"] == row["position"])]
        assert row["mean_p"] == pytest.approx(part.groupby("item_id")["p"].mean().mean(), abs=1e-12)


def test_the_report_draws_the_scatter_and_every_options_contrast(db, tmp_path, monkeypatch):
    drawn = []
    original = report.save_figure

    def keep(fig, out, name):
        drawn.append((name, [(ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) for ax in fig.axes]))
        return original(fig, out, name)

    monkeypatch.setattr(report, "save_figure", keep)
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", "options", "--dataset", "names", "--db", str(db), "--out", str(out),
                                      "--spearman", "name_rating", "--contrast", "context=primed_f:unprimed",
                                      "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    by_name = dict(drawn)
    # section 1 is prob (the tiny model's choice answers are all invalid: no pairs to draw)
    contrasts = sorted(n for n in by_name if n.startswith("contrast_"))
    assert contrasts == ["contrast_1_0.png", "contrast_1_1.png"]  # female and male, not the first label only
    assert by_name["contrast_1_1.png"][0][1] == "p(male | primed_f) - p(male | unprimed)"
    assert by_name["contrast_1_0.png"][0][0] == "items (24), sorted by their difference"
    scatters = [by_name[n][0] for n in sorted(by_name) if n.startswith("spearman_1_")]  # prob: every name has p
    assert len(scatters) == 2
    x_label, y_label, title = scatters[0]
    assert x_label == "name_rating (mean per name)" and y_label.endswith("(mean per name)")
    assert re.search(r"Spearman rho = -?\d\.\d\d \[-?\d\.\d\d, -?\d\.\d\d\], p = .*, n = 12 names", title)
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Option order: mean p per position" in page


def test_temperatures_rederive_the_stored_numbers_at_the_collected_setting(db):
    stored = _json(db)["means"]
    again = _json(db, "--temperatures", "0.5,1.3")["means"]
    collected = [r for r in stored if r["method"] == "choice-exact"]
    assert collected
    for row in collected:
        [twin] = [r for r in again if r["setting"] == f"{row['setting']} at T=0.5 top_k=20"
                  and r["option_label"] == row["option_label"]]
        assert twin["mean_p"] == pytest.approx(row["mean_p"], abs=1e-9)
        assert twin["invalid_mass"] == pytest.approx(row["invalid_mass"], abs=1e-9)
    assert any(r["setting"].endswith(" at T=1.3 top_k=20") for r in again)
    assert {r["setting"] for r in again} >= {r["setting"] for r in stored}  # the collections stay beside them


@pytest.mark.parametrize("args, message", [
    (["--top-k", "5"], "--top-k re-derives with --temperatures: give both"),
    (["--temperatures", "0.5", "--top-k", "65"], "top_k 65 exceeds the 64 logits stored per node"),
    (["--temperatures", "0,1"], "--temperatures: every temperature must be > 0, got 0"),
])
def test_what_cannot_be_rederived_is_refused_in_one_line(db, args, message):
    result = CliRunner().invoke(cli, ["metrics", "options", "--dataset", "names", "--db", str(db), *args])
    assert result.exit_code != 0
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
