"""The misgendering paper's tables and figures (Subramonian et al. 2025): the +- terms of the agreement tables
(against statsmodels, scipy and leave-one-out loops over scikit-learn), the stratified annotation sheet and its
import, the label breakdown and human-vs-automatic agreement per cell, and the all-models Beta figure."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, matthews_corrcoef
from statsmodels.stats.inter_rater import cohens_kappa

import biaslab
from biaslab.loaders.errors import DataError
from biaslab.lexicon.pronoun_detection import vocabulary
from biaslab.metrics.misgendering.annotations import LABELS, export_sheet, import_annotations
from biaslab.metrics.misgendering.tables import agreement_first_sample_table, agreement_table, misgendering_report
from biaslab.metrics.misgendering.stats import (Z95, fisher_interval, jackknife_agreement_se, kappa_asymptotic_se,
                                                standard_error_of_mean)
from biaslab.warehouse import Warehouse

FAMILIES = ("he", "she", "they", "xe")
SENTENCES = {"he": " Then he left.", "she": " Then she left.", "they": " Then they left.", "xe": " Then xe left.",
             None: " Then the door closed."}


def _h(wh):
    """A reading handle over `wh` (a `biaslab.open` handle, or an open Warehouse)."""
    from biaslab.warehouse.handle import WarehouseHandle

    return wh if isinstance(wh, WarehouseHandle) else WarehouseHandle.on(wh)


# ------------------------------------------------------------------------------------------------ statistics


@pytest.mark.parametrize("table", [[[20, 5], [10, 15]], [[7, 1], [2, 30]], [[12, 3, 1], [2, 9, 4], [0, 3, 11]]])
def test_kappa_standard_error_equals_statsmodels(table):
    kappa, se = kappa_asymptotic_se(table)
    res = cohens_kappa(np.array(table))
    assert kappa == pytest.approx(res.kappa, abs=1e-12)
    assert se == pytest.approx(res.std_kappa, rel=1e-12)
    assert Z95 * se == pytest.approx((res.kappa_upp - res.kappa_low) / 2, rel=1e-9)  # the paper's +- term


def test_fisher_interval_and_sem_equal_scipy():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 2, 40)
    b = np.where(rng.random(40) < 0.7, a, 1 - a)
    r = stats.pearsonr(a, b)
    low, high = fisher_interval(float(r.statistic), 40)
    ci = r.confidence_interval(confidence_level=0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert matthews_corrcoef(a, b) == pytest.approx(r.statistic, abs=1e-12)  # MCC = Pearson r on 0/1 data
    x = rng.random(17)
    assert standard_error_of_mean(x) == pytest.approx(stats.sem(x), rel=1e-12)
    assert math.isnan(standard_error_of_mean([1.0])) and math.isnan(fisher_interval(0.3, 3)[0])


def _pairs(seed: int = 0, instances: int = 15, per: int = 5) -> pd.DataFrame:
    """Pairs of two cells (pre, post) of one model, seeded: prob constant per instance, gen per continuation."""
    rng = np.random.default_rng(seed)
    rows = []
    for context in ("pre", "post"):
        for i in range(instances):
            prob = int(rng.random() < 0.6)
            for k in range(per):
                gen = prob if rng.random() < 0.7 else 1 - prob
                rows.append({"model_key": "m", "setting": "causal | T=1", "dataset": "ruff", "declared": "xe",
                             "context": context, "instance": f"s{i}:{context}", "sample_index": (k + 2) % per,
                             "seed": 100 + k, "prob_correct": prob, "gen_correct": gen})
    return pd.DataFrame(rows)


def test_agreement_pm_terms_resample_instances():
    pairs = _pairs()
    table = agreement_table(pairs).set_index("context")
    for context, group in pairs.groupby("context"):
        row = table.loc[context]
        assert (row["n"], row["instances"]) == (75, 15)
        shares = group.groupby("instance").apply(lambda g: np.mean(g["prob_correct"] == g["gen_correct"]),
                                                 include_groups=False)
        assert row["raw_agreement_sem"] == pytest.approx(stats.sem(shares), rel=1e-12)
        # delete-one-instance jackknife, by a loop over scikit-learn
        loo_k, loo_m = [], []
        for inst in sorted(group["instance"].unique()):
            rest = group[group["instance"] != inst]
            loo_k.append(cohen_kappa_score(rest["prob_correct"], rest["gen_correct"]))
            loo_m.append(matthews_corrcoef(rest["prob_correct"], rest["gen_correct"]))
        m = len(loo_k)
        se_k = math.sqrt((m - 1) / m * np.sum((np.array(loo_k) - np.mean(loo_k)) ** 2))
        se_m = math.sqrt((m - 1) / m * np.sum((np.array(loo_m) - np.mean(loo_m)) ** 2))
        assert row["cohen_kappa_pm"] == pytest.approx(1.959963984540054 * se_k, rel=1e-9)
        assert row["mcc_pm"] == pytest.approx(1.959963984540054 * se_m, rel=1e-9)
        assert row["cohen_kappa"] == pytest.approx(cohen_kappa_score(group["prob_correct"], group["gen_correct"]))


def test_agreement_first_sample_is_the_papers_computation():
    """First continuation per instance (lowest sample_index), then exactly the upstream statistics."""
    pairs = _pairs(seed=1)
    table = agreement_first_sample_table(pairs).set_index("context")
    for context, group in pairs.groupby("context"):
        first = group[group["sample_index"] == 0].sort_values("instance")
        assert len(first) == 15
        prob, gen = first["prob_correct"].to_numpy(), first["gen_correct"].to_numpy()
        res = cohens_kappa(pd.crosstab(prob, gen))
        r = stats.pearsonr(prob, gen)
        ci = r.confidence_interval(confidence_level=0.95)
        row = table.loc[context]
        assert row["n"] == 15
        assert row["raw_agreement"] == pytest.approx(np.mean(prob == gen))
        assert row["raw_agreement_sem"] == pytest.approx(stats.sem(prob == gen), rel=1e-12)
        assert row["cohen_kappa"] == pytest.approx(res.kappa, abs=1e-12)
        assert row["cohen_kappa_pm"] == pytest.approx((res.kappa_upp - res.kappa_low) / 2, rel=1e-9)
        assert row["mcc"] == pytest.approx(r.statistic, abs=1e-12)
        assert (row["mcc_ci_low"], row["mcc_ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_constant_method_gives_nan_pm_terms_not_a_crash():
    pairs = _pairs().assign(prob_correct=1)
    for table in (agreement_table(pairs), agreement_first_sample_table(pairs)):
        assert table["mcc"].isna().all() and table["note"].str.contains("prob is constant").all()
        assert table["cohen_kappa"].eq(0).all() and table["cohen_kappa_pm"].isna().all()  # kappa forced to 0
        assert table["raw_agreement_sem"].notna().all()
    assert np.isnan(jackknife_agreement_se([[1, 0, 0, 0]])).all()


# ------------------------------------------------------------------------------------------------ annotation


def _warehouse(path, models=("a" * 16, "b" * 16), per_cell=30):
    """Two models x 4 pronouns x (pre, post); `per_cell` continuations per cell (6 stimuli x 5 samples), he/she
    cells of model b only 5 (one stimulus), so a cell smaller than N is taken whole."""
    from biaslab.schema import Stimulus

    stimuli, requests, samples = {}, [], []
    for model in models:
        for declared in FAMILIES:
            count = 1 if (model == models[-1] and declared in ("he", "she")) else per_cell // 5
            for i in range(count):
                s = Stimulus(dataset="ruff", upstream_version="v", item_id=f"{i}.{declared}",
                             text=f"Item {i} declares {declared}. Later BLANK was tired.", slot="BLANK",
                             pronoun_set=declared, grammatical_case="nom", options=FAMILIES, option_labels=FAMILIES,
                             gold=declared)
                stimuli[s.stimulus_id] = s
                for context in ("pre", "post"):
                    rid = f"{s.stimulus_id}:{context}"
                    requests.append({"model_key": model, "request_id": rid, "stimulus_id": s.stimulus_id,
                                     "dataset": "ruff", "context": context, "prompt_version": "gen-v1",
                                     "prompt_text": f"prompt {rid}", "declared": declared,
                                     "pronoun_vocabulary": json.dumps(vocabulary("ruff")), "max_new_tokens": 50,
                                     "min_new_tokens": 50, "run_id": None})
                    for k in range(5):
                        family = [declared, "he", None, declared, "she"][(i + k) % 5]
                        samples.append({"model_key": model, "request_id": rid, "sample_index": k, "seed": 100 + k,
                                        "temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_new_tokens": 50,
                                        "stimulus_id": s.stimulus_id, "text": SENTENCES[family],
                                        "token_ids": [1, 2], "token_logprobs": [-1.0, -1.0],
                                        "finish_reason": "length", "answer": None, "valid": True, "run_id": None})
    with Warehouse.open(path) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli.values()])
        wh.append("gen_requests", requests)
        wh.append("samples", samples)
    return path


def _read(sheet):
    with open(sheet, newline="") as f:
        return list(csv.DictReader(f))


def test_export_is_stratified_per_cell_and_seeded(tmp_path):
    db = _warehouse(tmp_path / "w.duckdb")
    with biaslab.open(db) as wh:
        assert export_sheet(_h(wh), tmp_path / "s0.csv", 25, seed=7) == 12 * 25 + 4 * 5  # 16 cells, 4 of only 5
        export_sheet(_h(wh), tmp_path / "s1.csv", 25, seed=7)
        export_sheet(_h(wh), tmp_path / "s2.csv", 25, seed=8)
        cells = wh.warehouse.con.execute("SELECT model_key, declared, context, list(sample_id) FROM gen_samples "
                                         "GROUP BY ALL").fetchall()
    rows = _read(tmp_path / "s0.csv")
    assert list(rows[0]) == ["sample_id", "model", "dataset", "declared", "context", "prompt_text", "text", "label",
                             "extraneous_gendered", "note", "annotator"]
    by_cell = {}
    for r in rows:
        by_cell.setdefault((r["model"], r["declared"], r["context"]), []).append(r["sample_id"])
    members = {(m, d, c): set(ids) for m, d, c, ids in cells}
    assert len(by_cell) == 16
    for cell, ids in by_cell.items():
        assert len(ids) == len(set(ids)) == min(25, len(members[cell]))
        assert set(ids) <= members[cell]  # every drawn continuation belongs to its cell
    assert rows == _read(tmp_path / "s1.csv")
    assert [r["sample_id"] for r in rows] != [r["sample_id"] for r in _read(tmp_path / "s2.csv")]
    with biaslab.open(db) as wh:  # a cell's draw does not depend on the other cells
        export_sheet(_h(wh), tmp_path / "only.csv", 25, seed=7, dataset="ruff")
    assert _read(tmp_path / "only.csv") == rows


def test_import_reads_every_column_and_tables_per_cell(tmp_path):
    db = _warehouse(tmp_path / "w.duckdb")
    with Warehouse.open(db) as wh:
        export_sheet(_h(wh), tmp_path / "sheet.csv", 4, seed=0)
        rows = _read(tmp_path / "sheet.csv")
        for i, r in enumerate(rows):
            r.update(label=LABELS[i % 4], extraneous_gendered=["true", "false", "no"][i % 3],
                     note=f"row {i}, with a comma", annotator="ann")
        sheet = tmp_path / "filled.csv"
        with sheet.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        assert import_annotations(wh, sheet) == (len(rows), len(rows))
        stored = dict(wh.con.execute("SELECT sample_id, note FROM annotations").fetchall())
        assert stored[rows[5]["sample_id"]] == "row 5, with a comma"
        tables = misgendering_report(_h(wh))
    gen = tables["_gen"].set_index("sample_id")
    labels = tables["annotation_labels"]
    agree = tables["annotation_vs_auto_cells"]
    assert len(labels) == len(agree) == 16 and labels["n"].sum() == len(rows)
    for (model, declared, context), cell in pd.DataFrame(rows).assign(
            model_key=lambda f: [gen.loc[s, "model_key"] for s in f["sample_id"]]).groupby(
            ["model_key", "declared", "context"]):
        [lab] = labels[(labels["model_key"] == model) & (labels["declared"] == declared)
                       & (labels["context"] == context)].to_dict("records")
        for label in LABELS:
            assert lab[f"n_{label}"] == int((cell["label"] == label).sum())
        flags = cell["extraneous_gendered"].eq("true").astype(float)
        assert lab["extraneous_gendered_rate"] == pytest.approx(flags.mean())
        assert lab["extraneous_gendered_sem"] == pytest.approx(stats.sem(flags), nan_ok=True)
        human = cell["label"].map({"correct": 1, "misgendering": 0, "no_pronoun": 1, "plural_they": 1}).to_numpy()
        auto = np.array([int(gen.loc[s, "outcome"] != "misgendered") for s in cell["sample_id"]])
        [row] = agree[(agree["model_key"] == model) & (agree["declared"] == declared)
                      & (agree["context"] == context)].to_dict("records")
        assert row["raw_agreement_binary"] == pytest.approx(np.mean(human == auto))
        assert row["raw_agreement_binary_sem"] == pytest.approx(stats.sem((human == auto).astype(float)),
                                                                nan_ok=True)
        assert row["n"] == len(cell)


@pytest.mark.parametrize("edit, field", [({"label": ""}, "label"), ({"label": "plural"}, "label"),
                                         ({"extraneous_gendered": "maybe"}, "extraneous_gendered"),
                                         ({"annotator": " "}, "annotator")])
def test_import_names_file_row_and_field(tmp_path, edit, field):
    db = _warehouse(tmp_path / "w.duckdb")
    with Warehouse.open(db) as wh:
        export_sheet(_h(wh), tmp_path / "sheet.csv", 1, seed=0)
        rows = _read(tmp_path / "sheet.csv")[:3]
        for r in rows:
            r.update(label="correct", extraneous_gendered="false", annotator="a")
        rows[1].update(edit)
        bad = tmp_path / "bad.csv"
        with bad.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        with pytest.raises(DataError) as err:
            import_annotations(wh, bad)
        assert "bad.csv:3" in str(err.value) and field in str(err.value) and "\n" not in str(err.value)
        assert wh.con.execute("SELECT count(*) FROM annotations").fetchone()[0] == 0


# ------------------------------------------------------------------------------------------------ Beta figure


def test_beta_figure_plots_every_model_with_names_axes_and_n():
    from biaslab.metrics.misgendering.report import beta_figure, plt

    rows = []
    fits = {("a", "he", "pre"): (0.5, 2.0), ("a", "xe", "pre"): (1.5, 0.7), ("b", "he", "pre"): (4.0, 3.2),
            ("a", "he", "post"): (0.9, 1.1), ("b", "xe", "post"): (float("nan"), float("nan"))}
    for (model, declared, context), (alpha, beta) in fits.items():
        rows.append({"model_key": model * 16, "setting": "causal | T=1", "dataset": "ruff", "declared": declared,
                     "context": context, "instances": 30, "mean_disagreement": 0.3, "var": 0.05, "alpha": alpha,
                     "beta": beta, "note": ""})
    names = pd.DataFrame({"model_key": ["a" * 16, "b" * 16], "model_name": ["Llama-8B", "OLMo-7B"],
                          "dtype": ["bf16", "bf16"], "backend": ["hf", "hf"]})
    fig, caption = beta_figure(pd.DataFrame(rows), "ruff", names)
    pre, post = fig.axes[:2]
    assert [ax.get_xlabel().split()[0] for ax in (pre, post)] == ["β", "β"] and pre.get_ylabel() == "α"
    assert "n = 90 instances" in pre.get_title() and "n = 30 instances" in post.get_title()
    points = sorted(tuple(map(float, c.get_offsets()[0])) for c in pre.collections)
    assert points == sorted([(2.0, 0.5), (0.7, 1.5), (3.2, 4.0)])  # (beta, alpha), as the paper
    assert pre.get_xlim()[1] == pytest.approx(4.2) and pre.get_xlim()[0] == -0.1  # no point cut off at 3
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert legend == ["Llama-8B", "OLMo-7B", "he", "xe"]
    assert "OLMo-7B xe post" in caption  # the undefined fit is named, not silently dropped
    plt.close(fig)
    assert beta_figure(pd.DataFrame(rows[-1:]), "ruff", names)[0] is None
