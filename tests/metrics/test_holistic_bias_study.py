"""`biaslab metrics holistic-bias` end to end on the tiny model: the dataset's likelihood subset collected with the
prob protocol (two axes, two templates), the perplexities read back equal to exp(-sum_logprob / n_tokens) of the
stored sequence scores, the tables equal to `stats` on them, coverage against what is loaded, the command's JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.metrics.holistic_bias import stats

WHERE = {"attrs.template": "I'm {noun_phrase}.|I love {plural_noun_phrase}."}
#: the two axes loaded alone (`--option axes=...`): the same stimuli and ids as a full load, in a fraction of the time
OPTIONS = {"axes": "nonce,socioeconomic_class"}


@pytest.fixture(scope="module")
def collected(tmp_path_factory, tiny_gpt2, data_dir):
    from biaslab.runners.collect import CollectConfig, collect

    if not (data_dir / "holistic_bias" / "dataset" / "v1.1" / "descriptors.json").is_file():
        pytest.skip("dataset folder holistic_bias is absent")
    db = tmp_path_factory.mktemp("hb") / "w.duckdb"
    # 8 descriptors (items), spread over the two axes in proportion (8 and 24 descriptors: 2 and 6), x 2 templates
    # x 32 nouns
    config = CollectConfig(dataset="holistic-bias", db=str(db), data_dir=str(data_dir), where=WHERE, limit=8,
                           loader_options=OPTIONS)
    assert collect(config, loaded=tiny_gpt2).added == 8 * 2 * 32
    return db


def test_compare_pairs_two_models_sentence_by_sentence(collected, tiny_bert, data_dir, tmp_path):
    import shutil

    from biaslab.runners.collect import CollectConfig, collect

    db = tmp_path / "two.duckdb"
    shutil.copy(collected, db)
    config = CollectConfig(dataset="holistic-bias", db=str(db), data_dir=str(data_dir), where=WHERE, limit=8,
                           loader_options=OPTIONS)
    assert collect(config, loaded=tiny_bert).added == 512  # the same sentences, by pseudo-log-likelihood
    result = CliRunner().invoke(cli, ["compare", "holistic-bias", "--db", str(db), "--format", "json",
                                      "--bootstrap", "200", "--permutations", "200"])
    assert result.exit_code == 0, result.output
    rows = {(r["measure"], r["group"]): r for r in json.loads(result.output)}
    assert set(rows) == {(m, g) for m in ("log_ppl", "spread") for g in ("nonce", "socioeconomic_class", "(all)")}
    with biaslab.open(db) as handle:
        stored = handle.sql("SELECT q.model_key, q.stimulus_id, q.sum_logprob, q.n_tokens FROM sequence_scores q "
                            "JOIN stimuli s USING (stimulus_id) WHERE s.dataset = 'holistic-bias'").to_pandas()
    stored["log_ppl"] = -stored["sum_logprob"] / stored["n_tokens"]
    wide = stored.pivot(index="stimulus_id", columns="model_key", values="log_ppl")
    row = rows[("log_ppl", "(all)")]
    assert row["n_items"] == 512
    a_key, b_key = row["model_key_a"], row["model_key_b"]
    assert row["value_a"] == pytest.approx(wide[a_key].mean(), rel=1e-9)
    assert row["estimate"] == pytest.approx((wide[a_key] - wide[b_key]).mean(), rel=1e-9)
    assert row["unit"] == "descriptor" and row["n_units"] == 8


def test_the_tables_are_the_statistics_of_the_stored_perplexities(collected):
    with biaslab.open(collected) as handle:
        tables = biaslab.holistic_bias(handle, private=True)
        stored = handle.sql("SELECT s.stimulus_id, s.attrs->>'axis' AS axis, s.attrs->>'descriptor' AS descriptor, "
                            "s.attrs->>'template' AS template, q.sum_logprob, q.n_tokens FROM sequence_scores q "
                            "JOIN stimuli s USING (stimulus_id) WHERE s.dataset = 'holistic-bias'").to_pandas()
    stored["ppl"] = np.exp(-stored["sum_logprob"] / stored["n_tokens"])
    per_axis = stored.groupby("axis")["descriptor"].nunique().to_dict()
    assert len(stored) == 512 and per_axis == {"nonce": 2, "socioeconomic_class": 6}
    by_axis = tables["holistic_bias"].set_index("axis")
    assert set(by_axis.index) == {"nonce", "socioeconomic_class"}  # the limit spreads over the axes
    expected = stats.by_axis(stats.pairs(stored), stored).set_index("axis")
    for axis, row in expected.iterrows():
        got = by_axis.loc[axis]
        assert got["likelihood_bias"] == pytest.approx(row["likelihood_bias"], abs=1e-15)
        k = per_axis[axis]
        assert (got["pairs"], got["descriptors"], got["sentences"], got["templates"]) == (
            2 * k * (k - 1) // 2, k, k * 64, 2)
        # coverage: the axis's sentences loaded (its descriptors x 26 templates x 32 nouns), used, missing
        loaded = {"nonce": 8, "socioeconomic_class": 24}[axis] * 26 * 32
        assert (got["n_loaded"], got["n_used"], got["n_missing"]) == (loaded, k * 64, loaded - k * 64)
        assert got["descriptors_loaded"] == {"nonce": 8, "socioeconomic_class": 24}[axis]
        assert got["few_clusters"] and got["low_coverage"]
    medians = tables["holistic_bias_descriptors"].set_index(["axis", "descriptor"])["median_ppl"]
    mine = stored.groupby(["axis", "descriptor"])["ppl"].median()
    assert np.allclose(medians.loc[mine.index], mine, rtol=1e-12)
    assert by_axis.loc["nonce", "most_likely"] == mine.loc["nonce"].idxmin()  # 2 descriptors: one at each end
    assert by_axis.loc["nonce", "least_likely"] == mine.loc["nonce"].idxmax()
    socio = mine.loc["socioeconomic_class"].sort_values()
    assert by_axis.loc["socioeconomic_class", "most_likely"].split(", ") == list(socio.index[:3])  # 6: three each
    assert by_axis.loc["socioeconomic_class", "least_likely"].split(", ") == list(socio.index[::-1][:3])
    assert len(tables["_pairs"]) == 2 * (1 + 15)  # per template: 1 pair of nonce, 15 of socioeconomic_class
    # the sentiment table: "I love ..." was collected, "I hate ..." was not (no love - hate)
    love = stored[stored["template"] == stats.LOVE]
    median = love["ppl"].median()
    below = love.assign(b=love["ppl"] < median).groupby(["axis", "descriptor"])["b"].mean()
    table = tables["holistic_bias_sentiment"].set_index(["axis", "descriptor"])
    assert np.allclose(table.loc[below.index, "below_love"], below, rtol=0, atol=1e-12)
    assert "love_hate_diff" not in table.columns


def test_an_axis_with_one_descriptor_has_a_row_without_a_share():
    import pandas as pd

    ppl = pd.DataFrame({"axis": ["a"] * 4 + ["b"] * 2, "template": "t", "descriptor": ["x", "x", "y", "y", "z", "z"],
                        "ppl": [1.0, 2, 3, 4, 5, 6]})
    rows = stats.by_axis(stats.pairs(ppl), ppl).set_index("axis")
    assert rows.loc["a", "pairs"] == 1 and rows.loc["b", "pairs"] == 0 and np.isnan(rows.loc["b", "likelihood_bias"])
    assert rows.loc["b", "sentences"] == 2


def test_the_command_prints_json_with_coverage(collected):
    result = CliRunner().invoke(cli, ["metrics", "holistic-bias", "--db", str(collected), "--format", "json"])
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    assert {"holistic_bias", "holistic_bias_descriptors", "holistic_bias_templates"} <= set(tables)
    row = tables["holistic_bias"][0]
    assert {"likelihood_bias", "ci_low", "ci_high", "n_loaded", "n_used", "coverage", "model_name"} <= set(row)


def test_the_report_renders_in_chromium(collected, tmp_path):
    from report_layout import chromium, dump_dom, page_overflow

    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", "holistic-bias", "--db", str(collected), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Smith et al., EMNLP 2022" in page and "holistic_bias_axes.png" in page
    assert (out / "holistic_bias_axes.png").stat().st_size > 1000
    if chromium() is None:
        pytest.skip("no chromium to render the report")
    dom = dump_dom(out / "index.html", tmp_path / "profile")
    assert "Likelihood bias per axis" in dom and "socioeconomic_class" in dom
    assert page_overflow(out / "index.html", profile=tmp_path / "profile2")["wide"] == []
