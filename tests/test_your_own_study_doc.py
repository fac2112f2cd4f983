"""docs/your-own-study.md runs end to end, as a newcomer would run it: from an empty folder, its spec file written as
shown, every command of its ```bash blocks through the installed console scripts (default model), its ```python
block; then the numbers it prints are checked against the warehouse, and the report opens in headless Chromium with
every figure loaded and drawn (not blank)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from biaslab.warehouse import Warehouse
from report_layout import chromium, dump_dom

DOC = Path(__file__).resolve().parents[1] / "docs" / "your-own-study.md"
FENCE = re.compile(r"```(\w+)([^\n]*)\n(.*?)```", re.S)


def fenced(kind: str) -> list[tuple[str, str]]:
    """(info after the language, body) of every fenced block of `kind`, in order."""
    return [(m.group(2).strip(), m.group(3)) for m in FENCE.finditer(DOC.read_text(encoding="utf-8"))
            if m.group(1) == kind]


def commands() -> list[str]:
    return [line.strip() for _, body in fenced("bash") for line in body.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def run(command: str, cwd: Path) -> str:
    """One documented command through the console script of this environment."""
    argv = shlex.split(command)
    exe = Path(sys.executable).with_name(argv[0])
    assert exe.exists(), f"console script {argv[0]} is not installed next to {sys.executable}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([str(exe), *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_the_walk_through_runs_from_an_empty_folder(tmp_path):
    [(info, spec)] = fenced("yaml")
    (tmp_path / info.removeprefix("file=")).write_text(spec, encoding="utf-8")
    steps = commands()
    assert [s.split()[0:3] for s in steps][:2] == [["biaslab", "data", "expand"], ["biaslab", "data", "load"]]
    out = {step: run(step, tmp_path) for step in steps}

    rows = [json.loads(line) for line in (tmp_path / "stimuli.jsonl").read_text().splitlines()]
    assert len(rows) == 20 * 3 * 2 and len({r["item_id"] for r in rows}) == 20
    db = tmp_path / "study.duckdb"
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("stimuli", "dataset = ?", ["occupations"]) == 120
        assert wh.count("choice_requests") == 120 and wh.count("sequence_scores") == 240
        means = wh.query("SELECT method, option_label, round(avg(p), 3) AS mean_p FROM option_probs "
                         "GROUP BY ALL ORDER BY ALL")
    sql_step = next(s for s in steps if s.startswith("biaslab sql"))
    printed = out[sql_step].splitlines()
    assert printed[0] == "method,option_label,mean_p" and len(printed) == 1 + len(means)
    metrics = out[next(s for s in steps if s.startswith("biaslab metrics options"))]
    for table in ("# means", "# contrast", "# spearman"):
        assert table in metrics
    contrast = [line for line in metrics.split("# contrast\n")[1].split("#")[0].splitlines()[1:] if line]
    assert len(contrast) == 2 * 2 and all("primed_f - unprimed" in line for line in contrast)  # 2 methods x 2 labels

    [(_, code)] = fenced("python")
    printed_py = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(printed_py):
            exec(compile(code, str(DOC), "exec"), {})  # noqa: S102 - the documentation's own example
    finally:
        os.chdir(cwd)
    assert printed_py.getvalue().count("female") == 2  # the contrast of both methods for the female option

    check_report(tmp_path / "report", tmp_path)


def check_report(report: Path, tmp_path: Path) -> None:
    page = (report / "index.html").read_text(encoding="utf-8")
    images = re.findall(r"<img src=\"([^\"]+)\"", page)
    assert sorted(images) == ["contrast_0.png", "contrast_1.png", "means_0.png", "means_1.png"]
    assert "nothing to show" not in page
    import matplotlib.image

    for name in images:  # drawn: pixels of more than one colour
        pixels = matplotlib.image.imread(report / name)
        assert pixels.shape[0] > 100 and float(np.std(pixels)) > 0.05, name
    if chromium() is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    dom = dump_dom(report / "index.html", tmp_path / "chromium")
    assert f'data-images-loaded="{len(images)}/{len(images)}"' in dom
