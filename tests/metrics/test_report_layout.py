"""Every report fits the page and its figures are readable (issue 36, item 5), on a warehouse of two models with
every study's evidence: at 1400 px in headless Chromium no element reaches past the page; in every figure, as
matplotlib's renderer lays it out, no text overlaps other text or runs past the figure, no legend covers a bar or a
point, and no text is smaller than 8 pt as shown; no table prints <NA>, a long note or an empty column."""

from __future__ import annotations

from pathlib import Path

import matplotlib.figure
import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.metrics.html_report import DPI, MIN_FONT_PT, PAGE_PX
from report_layout import chromium, figure_problems, page_overflow

STUDIES = ("contextuality", "negation", "calibration", "misgendering")


@pytest.fixture(scope="module")
def reports(tmp_path_factory, data_dir):
    from open_warehouse_evidence import build

    root = tmp_path_factory.mktemp("layout")
    db = build(root / "w.duckdb", data_dir)
    problems: dict[str, list[str]] = {}
    original = matplotlib.figure.Figure.savefig

    def checked(fig, fname, *args, **kwargs):
        found = figure_problems(fig)
        scale = max(1.0, fig.get_figwidth() * DPI / PAGE_PX)
        from matplotlib.text import Text
        small = {t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
                 and t.get_fontsize() / scale < MIN_FONT_PT - 1e-6}
        found += [f"text {t!r} smaller than {MIN_FONT_PT} pt as shown" for t in sorted(small)]
        problems[Path(str(fname)).name] = found
        return original(fig, fname, *args, **kwargs)

    pages = {}
    matplotlib.figure.Figure.savefig = checked
    try:
        for study in STUDIES:
            out = root / study
            extra = ["--bootstrap", "50"] if study == "calibration" else []
            result = CliRunner().invoke(biaslab, ["report", study, "--db", str(db), "--out", str(out), *extra])
            assert result.exit_code == 0, result.output
            pages[study] = out / "index.html"
    finally:
        matplotlib.figure.Figure.savefig = original
    return pages, problems


def test_every_figure_is_readable(reports):
    _, problems = reports
    assert len(problems) >= 20  # figures of all four studies were checked
    assert {name: found for name, found in problems.items() if found} == {}


@pytest.mark.parametrize("study", STUDIES)
def test_tables_show_no_missing_markers(reports, study):
    page = reports[0][study].read_text(encoding="utf-8")
    assert "&lt;NA&gt;" not in page and "<NA>" not in page and ">nan<" not in page and ">NaN<" not in page


@pytest.mark.parametrize("study", STUDIES)
def test_no_element_is_wider_than_the_page_at_1400_px(reports, study, tmp_path):
    if chromium() is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    found = page_overflow(reports[0][study], width=1400, profile=tmp_path / "chromium")
    assert found["width"] > 1300
    assert found["wide"] == []
