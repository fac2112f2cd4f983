"""Metric tables readable in a terminal of 100 columns (issue 36, item 1): no line wider than the terminal, no
ellipsis anywhere (never inside a number), every number of the table shown with 4 significant digits, the model's
name once per section instead of in every row; --wide and --columns."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from biaslab.cli.frames import cell, layout, print_frame, wrap
from biaslab.cli.main import biaslab


def _lines(text: str) -> list[str]:
    return text.splitlines()


@pytest.mark.parametrize("value, shown", [
    (0.123456789, "0.1235"), (3600.0, "3600"), (np.int64(42), "42"), (float("nan"), ""), (None, ""),
    (pd.NA, ""), (1.1652e-09, "1.165e-09"), (-0.00087812, "-0.0008781"), (True, "True"), ("a|b", "a|b"),
    (123456.7, "1.235e+05"),
])
def test_cell(value, shown):
    assert cell(value) == shown


def test_wrap_breaks_after_underscores_and_never_loses_a_character():
    assert wrap("ece_top_label_equal_width", 15) == "ece_top_label_\nequal_width"
    assert wrap("abcdefghij", 4) == "abcd\nefgh\nij"
    for text in ("p_value_satterthwaite", "a b c d e", "x" * 30, "gender_ece_gap_top_label_equal_width"):
        for width in (3, 7, 12, 40):
            wrapped = wrap(text, width)
            assert all(len(line) <= width for line in wrapped.splitlines())
            assert wrapped.replace("\n", "").replace(" ", "") == text.replace(" ", "")


def _wide_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for model, key in (("smollm2-135m", "260ab6dfde355d6f"), ("another-model-with-a-long-name", "0123456789abcdef")):
        for context in ("unprimed", "primed_f", "primed_m", "null_1", "null_2"):
            row = {"model_name": model, "dtype": "bf16", "backend": "hf", "model_key": key, "mode": "exact",
                   "temperature": 0.5, "top_k": 40, "top_p": 1.0, "prompt_version": "forced-choice-v1",
                   "max_new_tokens": 6, "context": context, "option_order": "pooled", "templates": 360,
                   "empty": np.nan}
            row.update({f"statistic_number_{i}": float(rng.normal() * 10.0 ** rng.integers(-6, 4)) for i in range(14)})
            rows.append(row)
    return pd.DataFrame(rows)


def test_a_wide_table_fits_100_columns_with_every_number(tmp_path):
    frame = _wide_frame()
    out = io.StringIO()
    print_frame("wide", frame, width=100, out=out)
    text = out.getvalue()
    assert max(len(line) for line in _lines(text)) <= 100
    assert "…" not in text
    for column in [c for c in frame.columns if c.startswith("statistic_")]:
        for value in frame[column]:
            assert cell(value) in text
    # the model once per section, not per row; constant columns once; the empty column named once
    assert any(line.startswith("  another-model-with-a-long-name · bf16 · hf") for line in _lines(text))
    assert all("another-model-with-a-long-name" not in line for line in _lines(text) if line.startswith("│"))
    assert "all rows: option_order pooled; templates 360; no values: empty" in text


def test_layout_sections_and_column_groups_repeat_the_row_labels():
    plan = layout(_wide_frame(), 100)
    assert len({b.section.split(" [columns")[0] for b in plan.blocks}) == 2  # two models
    assert all(b.columns[0] == "context" for b in plan.blocks)
    shown = [c for b in plan.blocks[:len(plan.blocks) // 2] for c in b.columns if c != "context"]
    assert sorted(shown) == sorted(f"statistic_number_{i}" for i in range(14))  # each value column once a section
    assert len(layout(_wide_frame(), 100, wide=True).blocks) == 2


def test_a_one_row_table_that_does_not_fit_is_a_column_value_list():
    frame = pd.DataFrame([{f"a_rather_long_column_name_{i}": i / 7 for i in range(12)}])
    plan = layout(frame, 80)
    assert len(plan.blocks) == 1 and plan.blocks[0].columns == ["column", "value"]
    assert [r[1] for r in plan.blocks[0].rows] == [cell(i / 7) for i in range(12)]


def test_columns_picks_value_columns_and_names_unknown_ones():
    plan = layout(_wide_frame(), 100, columns=["statistic_number_3"])
    assert all(b.columns == ["statistic_number_3"] or "statistic_number_3" in b.columns for b in plan.blocks)
    with pytest.raises(ValueError, match="no column nope in this table"):
        layout(_wide_frame(), 100, columns=["nope"])


@pytest.fixture(scope="module")
def evidence(tmp_path_factory, data_dir):
    from open_warehouse_evidence import build

    return build(tmp_path_factory.mktemp("frames") / "w.duckdb", data_dir)


@pytest.mark.parametrize("study", ["contextuality", "negation", "calibration", "misgendering"])
def test_metrics_at_100_columns(evidence, study):
    result = CliRunner().invoke(biaslab, ["metrics", study, "--db", str(evidence)], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert max(len(line) for line in _lines(text)) <= 100
    assert "…" not in text
    tables = json.loads(CliRunner().invoke(biaslab, ["metrics", study, "--db", str(evidence), "--format",
                                                     "json"]).output)
    for name, rows in tables.items():
        for row in rows[:5]:
            for column, value in row.items():
                if isinstance(value, float) and column not in ("temperature", "top_p"):
                    assert cell(value) in text, (name, column, value)
            if "model_name" in row:
                assert row["model_name"] in text


def test_wide_prints_one_table_per_section(evidence):
    result = CliRunner().invoke(biaslab, ["metrics", "contextuality", "--db", str(evidence), "--wide",
                                          "--columns", "mean_kl_bits"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "[columns" not in result.output and "mean_kl_bits" in result.output
    assert "validity" not in result.output  # tables without the column are left out
    bad = CliRunner().invoke(biaslab, ["metrics", "contextuality", "--db", str(evidence), "--columns", "nope"])
    assert bad.exit_code == 2 and "--columns: no table has a column nope" in bad.output  # a usage error
