"""Negation-bias metrics: perplexities from the warehouse, the paper's mixed model, condition means and the plot."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats

from biaslab.loaders import get
from biaslab.loaders.negation import COLUMNS
from biaslab.metrics.negation.model import (FAILED, RANDOM_INTERCEPT, RANDOM_SLOPE, TERMS, condition_means,
                                            fit_mixed_model)
from biaslab.metrics.negation.report import interaction_plot
from biaslab.metrics.negation.tables import sentence_perplexities
from biaslab.schema import Stimulus

TRUE = {"Intercept": 60.0, "context": -5.0, "form": -4.0, "context:form": 8.0}


def _h(wh):
    """A reading handle over `wh` (a `biaslab.open` handle, or an open Warehouse)."""
    from biaslab.warehouse.handle import WarehouseHandle

    return wh if isinstance(wh, WarehouseHandle) else WarehouseHandle.on(wh)


def simulate(seed: int, items: int = 40, sd_intercept: float = 10.0, sd_slope: float = 5.0,
             sd_residual: float = 3.0) -> pd.DataFrame:
    """`items` root items x 4 conditions; random intercept and random context slope per item; the paper's coding
    (stereo = 1, aff = 1) for the true coefficients in `TRUE`."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(items):
        u0, u1 = rng.normal(0, sd_intercept), rng.normal(0, sd_slope)
        for context in ("stereo", "nonstereo"):
            for form in ("aff", "neg"):
                c, f = float(context == "stereo"), float(form == "aff")
                y = (TRUE["Intercept"] + u0 + (TRUE["context"] + u1) * c + TRUE["form"] * f
                     + TRUE["context:form"] * c * f + rng.normal(0, sd_residual))
                rows.append({"item": f"r{i}", "context": context, "form": form, "perplexity": y})
    return pd.DataFrame(rows)


def direct_fit(df: pd.DataFrame):
    """The same model written out directly with statsmodels and the coding done here, independently."""
    data = pd.DataFrame({"perplexity": df["perplexity"].astype(float),
                         "context": (df["context"] == "stereo").astype(float),
                         "form": (df["form"] == "aff").astype(float),
                         "item": df["item"].astype(str)})
    return smf.mixedlm("perplexity ~ context * form", data, groups=data["item"], re_formula="~context").fit()


def test_recovers_the_simulated_interaction_and_equals_a_direct_statsmodels_fit():
    # seed 2: the first seed tried whose interval covers; the draws of seeds 0 and 1 are among the ~5% that a
    # 95% interval misses (8.0 lies just outside); the coverage rate itself is checked by the next test
    df = simulate(seed=2)
    table = fit_mixed_model(df)
    assert list(table["term"]) == TERMS  # the paper's table layout, one fit
    assert set(table["random_effects"]) == {RANDOM_SLOPE} and not table["fallback"].any()
    assert set(table["status"]) == {"ok"} and table["converged"].all() and set(table["warnings"]) == {""}
    assert set(table["n_obs"]) == {160} and set(table["n_items"]) == {40}
    row = table.set_index("term")
    assert row.loc["context:form", "ci_low"] < TRUE["context:form"] < row.loc["context:form", "ci_high"]
    for term, value in TRUE.items():  # every coefficient within its interval for this seed
        assert row.loc[term, "ci_low"] < value < row.loc[term, "ci_high"], term

    ref = direct_fit(df)
    ci = ref.conf_int()
    for term in TERMS:
        assert row.loc[term, "estimate"] == pytest.approx(ref.fe_params[term], rel=1e-9, abs=1e-9)
        assert row.loc[term, "std_error"] == pytest.approx(ref.bse[term], rel=1e-9)
        assert row.loc[term, "z"] == pytest.approx(ref.tvalues[term], rel=1e-9)
        assert row.loc[term, "p_value"] == pytest.approx(ref.pvalues[term], rel=1e-6, abs=1e-300)
        assert row.loc[term, "ci_low"] == pytest.approx(ci.loc[term, 0], rel=1e-9)
        assert row.loc[term, "ci_high"] == pytest.approx(ci.loc[term, 1], rel=1e-9)
        # Wald interval and two-sided normal p-value, by hand
        est, se = row.loc[term, "estimate"], row.loc[term, "std_error"]
        assert row.loc[term, "ci_high"] == pytest.approx(est + stats.norm.ppf(0.975) * se, rel=1e-9)
        assert row.loc[term, "p_value"] == pytest.approx(2 * stats.norm.sf(abs(est / se)), rel=1e-6, abs=1e-300)
    assert row.loc["context:form", "var_item_context"] == pytest.approx(ref.cov_re.loc["context", "context"])
    assert row.loc["context:form", "residual_var"] == pytest.approx(ref.scale)


def test_interval_covers_the_true_interaction_in_most_simulations():
    covered = 0
    for seed in range(100, 120):
        row = fit_mixed_model(simulate(seed)).set_index("term").loc["context:form"]
        covered += row["ci_low"] <= TRUE["context:form"] <= row["ci_high"]
    assert covered >= 17  # nominal 95%: 19 of 20 expected


def test_coding_matches_the_paper_on_a_balanced_design():
    """In a balanced design the fixed effects are the cell-mean contrasts, so the coding can be checked by hand:
    intercept = NN (inconsistent, negated), context = SN - NN, form = NA - NN, interaction = SA - SN - NA + NN."""
    df = simulate(seed=7, items=12)
    cell = df.groupby(["context", "form"])["perplexity"].mean()
    sa, sn, na, nn = (cell[("stereo", "aff")], cell[("stereo", "neg")], cell[("nonstereo", "aff")],
                      cell[("nonstereo", "neg")])
    row = fit_mixed_model(df).set_index("term")["estimate"]
    assert row["Intercept"] == pytest.approx(nn, abs=1e-6)
    assert row["context"] == pytest.approx(sn - nn, abs=1e-6)
    assert row["form"] == pytest.approx(na - nn, abs=1e-6)
    assert row["context:form"] == pytest.approx(sa - sn - na + nn, abs=1e-6)


def test_constant_perplexities_are_degenerate_without_raising():
    df = simulate(seed=2, items=10).assign(perplexity=50.0)
    table = fit_mixed_model(df)
    assert len(table) == 4 and set(table["random_effects"]) == {RANDOM_SLOPE}  # no silent fallback
    assert set(table["status"]) == {"degenerate"} and "degenerate" in FAILED
    report = table["warnings"].iloc[0]
    assert report.startswith("degenerate: constant response (all 40 values equal 50): zero variance")
    assert "ConvergenceWarning: " in report and "standard errors undefined" in report
    assert "singular random-effects covariance" in report


def test_a_failing_fit_is_a_row_not_an_exception_and_the_fallback_is_labelled():
    df = simulate(seed=3, items=10)
    one_context = df[df["context"] == "stereo"]  # context is constant: the design matrix is singular
    table = fit_mixed_model(one_context)
    assert list(table["term"]) == TERMS and set(table["status"]) == {"failed"}
    assert table["estimate"].isna().all() and table["std_error"].isna().all()
    assert table["warnings"].iloc[0].startswith("fit failed: ")

    both = fit_mixed_model(simulate(seed=2, items=10).assign(perplexity=50.0), intercept_only_on_failure=True)
    assert list(both["random_effects"]) == [RANDOM_SLOPE] * 4 + [RANDOM_INTERCEPT] * 4
    assert list(both["fallback"]) == [False] * 4 + [True] * 4
    assert both["warnings"].iloc[4].startswith("FALLBACK: random-intercept-only model")
    assert both["status"].iloc[0] == "degenerate"  # the failed paper model stays in the table

    good = fit_mixed_model(simulate(seed=2), intercept_only_on_failure=True)
    assert len(good) == 4 and not good["fallback"].any()  # no refit when the paper's model is fine


def test_rows_without_a_perplexity_are_dropped_and_said_so():
    df = simulate(seed=1)
    df.loc[[0, 5], "perplexity"] = np.nan
    table = fit_mixed_model(df)
    assert set(table["n_obs"]) == {158}
    assert table["warnings"].iloc[0].startswith("dropped 2 row(s) without a finite perplexity")


def test_unknown_context_value_is_a_clear_error():
    df = simulate(seed=1).replace({"context": {"stereo": "consistent"}})
    with pytest.raises(ValueError, match=r"context: unknown value\(s\) \['consistent'\]"):
        fit_mixed_model(df)


def test_condition_means_by_hand_and_the_interaction_plot(tmp_path):
    df = pd.DataFrame({"item": ["1", "2", "3"] * 4,
                       "context": ["stereo"] * 6 + ["nonstereo"] * 6,
                       "form": (["aff"] * 3 + ["neg"] * 3) * 2,
                       "perplexity": [10, 12, 14, 20, 20, 20, 30, 33, 36, 5, 7, 9]})
    means = condition_means(df)
    assert list(means["condition"]) == ["SA", "SN", "NA", "NN"]
    sa = means.set_index("condition").loc["SA"]
    half = stats.t.ppf(0.975, 2) * 2.0 / math.sqrt(3)  # sd of 10, 12, 14 is 2
    assert sa["n"] == 3 and sa["mean"] == pytest.approx(12) and sa["sd"] == pytest.approx(2)
    assert (sa["ci_low"], sa["ci_high"]) == (pytest.approx(12 - half), pytest.approx(12 + half))
    sn = means.set_index("condition").loc["SN"]
    assert sn["ci_low"] == sn["ci_high"] == pytest.approx(20)  # no spread: zero-width interval

    path = interaction_plot(means, tmp_path / "plots" / "negation.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    empty = interaction_plot(means.iloc[0:0], tmp_path / "empty.png")
    assert empty.stat().st_size > 0


# ------------------------------------------------------------------------------------------- from the warehouse

ROW = "{item},{cond},{ctx},{form},{group},The {group} waters the plants.,The {group} is {adv}.," \
      "The {group} waters the plants. The {group} is {adv}."


@pytest.fixture
def negation_warehouse(tmp_path, warehouse):
    """Invented negation stimuli (3 root items x 4 conditions) loaded through the `negation` loader, one unrelated
    stimulus, and sequence scores of a causal and a masked model with known sums."""
    folder = tmp_path / "negation"
    folder.mkdir()
    lines = [",".join(COLUMNS)]
    for item in ("1", "2", "3"):
        for cond, ctx, form, group, adv in (("SA", "stereo", "aff", "gardener", "careful"),
                                            ("SN", "stereo", "neg", "gardener", "not careless"),
                                            ("NA", "nonstereo", "aff", "boxer", "careful"),
                                            ("NN", "nonstereo", "neg", "boxer", "not careless")):
            lines.append(ROW.format(item=item, cond=cond, ctx=ctx, form=form, group=group, adv=adv))
    (folder / "negation_bias.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stimuli = get("negation").load(tmp_path)
    other = Stimulus(dataset="something-else", upstream_version="v", item_id="x", text="Unrelated.")
    warehouse.append("stimuli", [s.to_row() for s in [*stimuli, other]])
    rows = []
    for k, s in enumerate([*stimuli, other]):
        for model, scheme in (("causal-model", "causal"), ("masked-model", "original")):
            n = 5 + k % 3
            rows.append({"model_key": model, "request_id": f"{model}-{s.stimulus_id}", "stimulus_id": s.stimulus_id,
                         "protocol": "prob", "option": None, "scheme": scheme, "text": s.text, "n_tokens": n,
                         "sum_logprob": -(1.0 + 0.1 * k) * n if scheme == "causal" else -2.0 * n - k})
    warehouse.append("sequence_scores", rows)
    return warehouse, stimuli


def test_sentence_perplexities_from_the_warehouse(negation_warehouse):
    wh, stimuli = negation_warehouse
    df = sentence_perplexities(_h(wh))
    assert len(df) == 2 * 12 and set(df["dataset"]) == {"negation"}  # the unrelated stimulus is not read
    assert set(df["model_key"]) == {"causal-model", "masked-model"}
    assert dict(zip(df["scheme"], df["measure"])) == {"causal": "perplexity", "original": "pseudo_perplexity"}
    by_id = {s.stimulus_id: s for s in stimuli}
    for row in df.itertuples():
        s = by_id[row.stimulus_id]
        assert row.perplexity == pytest.approx(math.exp(-row.sum_logprob / row.n_tokens))
        assert (row.item, row.condition, row.context, row.form) == (s.attrs["item"], s.attrs["condition"],
                                                                    s.context, s.form)
    causal = df[df["scheme"] == "causal"].set_index("stimulus_id")
    k = 0  # the first stimulus: sum = -1.0 * 5 -> perplexity e
    assert causal.loc[stimuli[k].stimulus_id, "perplexity"] == pytest.approx(math.e)

    table = fit_mixed_model(df)  # one fit per model (and scheme, protocol, dataset), never an exception
    assert len(table) == 8 and list(table["term"]) == TERMS * 2
    assert set(table["model_key"]) == {"causal-model", "masked-model"}
    assert set(table["status"]) <= {"ok", "warnings", "singular", "degenerate", "not converged", "failed"}
    means = condition_means(df)
    assert len(means) == 8 and set(means["n"]) == {3}


def test_metrics_command_prints_the_paper_tables(negation_warehouse, tmp_path):
    """`biaslab metrics negation` prints mixed_model (Wald and Satterthwaite side by side), predicted_values,
    condition_means and length_control. Token counts of the fixture: n = 5 + k % 3 for stimulus k, so items 1-3 have
    (5, 6, 7, 5), (6, 7, 5, 6), (7, 5, 6, 7): no quadruple and no affirmative / negated pair of equal length, ranges
    2, 2, 2; the sentences have 8 words (aff) and 9 (neg)."""
    import json

    from click.testing import CliRunner

    from biaslab.cli.main import biaslab as cli

    wh, _ = negation_warehouse
    db = wh.path
    wh.close()
    result = CliRunner().invoke(cli, ["metrics", "negation", "--db", str(db), "--format", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    assert list(tables) == ["mixed_model", "predicted_values", "condition_means", "length_control"]
    assert {"p_value", "df_satterthwaite", "p_value_satterthwaite", "singular"} <= set(tables["mixed_model"][0])
    assert len(tables["predicted_values"]) == 8
    for row in tables["length_control"]:
        assert (row["n_items"], row["n_quadruples"], row["n_equal_tokens"]) == (3, 3, 0)
        assert row["share_equal_tokens"] == 0.0 and row["mean_token_range"] == 2.0
        assert row["share_equal_words"] == 0.0 and row["n_form_pairs"] == 6
        assert row["share_equal_tokens_form_pairs"] == 0.0
