"""The options report's bar chart shows its whole y label (issue 56, item 10: it was clipped at the figure's top and
bottom), and the report holds the gen table `metrics options` prints."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from biaslab.metrics import html_report
from biaslab.metrics.options import report


def test_the_bars_y_label_fits_inside_the_figure(monkeypatch, tmp_path):
    seen = {}

    def spy(fig, out, name, rect=(0, 0, 1, 1)):
        html_report.tidy(fig, rect)
        fig.canvas.draw()
        box = fig.axes[0].yaxis.label.get_window_extent(fig.canvas.get_renderer())
        seen["inside"] = box.y0 >= -0.5 and box.y1 <= fig.bbox.y1 + 0.5 and box.x0 >= -0.5
        plt.close(fig)
        return name

    monkeypatch.setattr(report, "save_figure", spy)
    means = pd.DataFrame({"model_key": ["m"] * 2, "method": ["choice-exact"] * 2, "setting": ["s"] * 2,
                          "context": ["a", "a"], "option_label": ["female", "male"], "items": [5, 5],
                          "mean_p": [0.4, 0.6], "ci_low": [0.3, 0.5], "ci_high": [0.5, 0.7],
                          "invalid_mass": [0.2, 0.2]})
    report.bars_figure(means, ["context"], tmp_path, "x.png")
    assert seen["inside"]


def test_the_report_holds_the_gen_table(tmp_path):
    gen = pd.DataFrame({"model_key": ["k"] * 2, "method": ["gen"] * 2, "setting": ["T=1"] * 2,
                        "context": ["post"] * 2, "declared": ["xe"] * 2, "family": ["xe", "she"], "n": [8, 8],
                        "share": [0.25, 0.75], "ci_low": [0.07, 0.41], "ci_high": [0.59, 0.93]})
    empty = pd.DataFrame(columns=["model_key", "method", "setting"])
    page = report.write_report({"means": empty, "gen": gen}, Path(tmp_path), "w.duckdb", "keeps", [])
    text = page.read_text(encoding="utf-8")
    assert "First pronoun of the continuations" in text and "0.75" in text and "xe" in text
