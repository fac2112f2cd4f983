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


#: an edit the reader is asked to make to a file before the next command: `# edit FILE: OLD -> NEW`
EDIT = re.compile(r"^# edit ([\w.-]+): (.+) -> (.+)$")


def commands() -> list[str]:
    """The commands of the ```bash blocks in order, with the `# edit` lines among them (other comments left out)."""
    return [line.strip() for _, body in fenced("bash") for line in body.splitlines()
            if line.strip() and (not line.strip().startswith("#") or EDIT.match(line.strip()))]


def edit(step: str, cwd: Path) -> str:
    """Make the edit an `# edit FILE: OLD -> NEW` line asks for (OLD must occur in FILE exactly once)."""
    name, old, new = EDIT.match(step).groups()
    text = (cwd / name).read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{step}: {old!r} occurs {text.count(old)} times in {name}"
    (cwd / name).write_text(text.replace(old, new), encoding="utf-8")
    return ""


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
    specs = fenced("yaml")
    assert [info for info, _ in specs] == ["file=occupations.yaml", "file=pronouns.yaml", "file=names.yaml",
                                           "file=keeps.yaml"]
    for info, spec in [*specs, *fenced("csv")]:
        (tmp_path / info.removeprefix("file=")).write_text(spec, encoding="utf-8")
    steps = commands()
    assert [s.split()[0:3] for s in steps][:2] == [["biaslab", "data", "expand"], ["biaslab", "data", "load"]]
    done = [(step, edit(step, tmp_path) if step.startswith("# edit") else run(step, tmp_path)) for step in steps]
    out = dict(done)  # a command run twice: its last output

    rows = [json.loads(line) for line in (tmp_path / "stimuli.jsonl").read_text().splitlines()]
    assert len(rows) == 20 * 3 * 2 and len({r["item_id"] for r in rows}) == 20
    db = tmp_path / "study.duckdb"
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("stimuli", "dataset = ?", ["occupations"]) == 120
        mine = "stimulus_id IN (SELECT stimulus_id FROM stimuli WHERE dataset = 'occupations')"
        assert wh.count("choice_requests", mine) == 120 and wh.count("sequence_scores", mine) == 240
        means = wh.query("SELECT method, option_label, round(avg(p), 3) AS mean_p FROM option_probs WHERE dataset = "
                         "'occupations' "
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

    check_report(tmp_path / "report", tmp_path, ["contrast_0_0.png", "contrast_0_1.png", "contrast_1_0.png",
                                                 "contrast_1_1.png", "means_0.png", "means_1.png"])
    check_three_options(db, out[next(s for s in steps if "--dataset pronouns" in s and "metrics" in s)])
    check_names(tmp_path / "names-report", tmp_path)
    check_rating_edit(db, done)
    check_gen(out, tmp_path)
    check_counterfactual(out, tmp_path)


def check_counterfactual(out: dict, tmp_path: Path) -> None:
    """Section 9: the load's lines per attribute, 2 answers stored per variant, the metrics per pair and measure
    with the prompts without a word counted, and the report's figures drawn."""
    load = out[next(s for s in out if "--kind counterfactual" in s)].splitlines()
    assert load[0].startswith("my-prompts: 12 stimuli read, 12 new")
    assert load[1].startswith("gender: 3 of 4 prompts varied over female / male / neutral; 1 holds no gender word")
    assert "(ids bread)" in load[1] and load[4].startswith("age: 1 of 4 prompts varied over young / middle-aged")
    with Warehouse.open(tmp_path / "audit.duckdb", read_only=True) as wh:
        assert wh.count("samples") == 12 * 2
    rows = out[next(s for s in out if s.startswith("biaslab metrics counterfactual"))].split("# counterfactual\n")[1]
    header, *lines = [line for line in rows.split("#")[0].splitlines() if line]
    columns = header.split(",")
    assert len(lines) == (3 + 3) * 5  # gender and age: 3 pairs each, 5 measures
    first = dict(zip(columns, lines[0].split(",")))
    assert (first["attribute"], first["n_loaded"], first["n_without"]) in {("gender", "3", "1"), ("age", "1", "3")}
    page = (tmp_path / "audit-report" / "index.html").read_text(encoding="utf-8")
    check_report(tmp_path / "audit-report", tmp_path, sorted(re.findall(r"<img src=\"([^\"]+)\"", page)))


def check_three_options(db: Path, metrics: str) -> None:
    """Section 6: the prompt lists the three options in the stimulus's order, each prompt's outcomes sum to 1, and
    the metrics give three labels per context and the order table."""
    with Warehouse.open(db, read_only=True) as wh:
        prompts = wh.rows("SELECT r.prompt_text, s.options FROM choice_requests r JOIN stimuli s USING "
                          "(stimulus_id) WHERE s.dataset = 'pronouns'")
        sums = wh.rows("SELECT sum(p.prob) FROM choice_probs p JOIN choice_requests r USING (model_key, request_id) "
                       "JOIN stimuli s USING (stimulus_id) WHERE s.dataset = 'pronouns' GROUP BY p.request_id")
    assert len(prompts) == 6 * 2 * 3
    assert all(f"one of the options: [{', '.join(options)}]." in text for text, options in prompts)
    assert max(abs(total - 1.0) for (total,) in sums) <= 1e-12
    means = [line for line in metrics.split("# means\n")[1].split("#")[0].splitlines()[1:] if line]
    assert len(means) == 2 * 3  # contexts x options
    assert "# order" in metrics and "# contrast" in metrics


def check_names(report: Path, tmp_path: Path) -> None:
    """Section 7: per collection and option a scatter over the 12 names with rho and its interval."""
    page = (report / "index.html").read_text(encoding="utf-8")
    scatters = sorted(re.findall(r"<img src=\"(spearman_[^\"]+)\"", page))
    assert scatters == ["spearman_0_0.png", "spearman_0_1.png", "spearman_1_0.png", "spearman_1_1.png"]
    assert "Spearman&#x27;s rho" in page or "Spearman's rho" in page
    check_report(report, tmp_path, sorted(re.findall(r"<img src=\"([^\"]+)\"", page)))


def check_rating_edit(db: Path, done: list[tuple[str, str]]) -> None:
    """Section 7's correction: Robin's rating edited keeps the 48 stimuli and their evidence, the history lists the
    four edits, and collecting again has nothing pending."""
    start = next(i for i, (step, _) in enumerate(done) if step.startswith("# edit"))
    after = [out for _, out in done[start:]]  # the edit, the load, the history, the collection
    loads = [out for step, out in done if step == "biaslab data load --spec names.yaml --db study.duckdb"]
    assert len(loads) == 2 and "48 stimuli read, 48 new;" in loads[0]
    assert "48 stimuli read, 0 new, 4 with edited attributes" in loads[1]
    history = after[2].splitlines()
    assert history[0] == "loaded_at,version,stimulus_id,item_id,attribute,before,after" and len(history) == 5
    assert all(line.endswith(",name_rating,0.55,0.6") and ".Robin," in line for line in history[1:])
    assert "0 pending" in after[3]
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("stimuli", "dataset = 'names'") == 48
        assert wh.count("stimuli", "dataset = 'names' AND json_extract_string(attrs, '$.name') = 'Robin' AND "
                                   "CAST(json_extract_string(attrs, '$.name_rating') AS DOUBLE) = 0.6") == 4


def csv_table(printed: str, name: str) -> list[dict]:
    """The rows of table `name` in a `--format csv` output of several tables (`# name` above each)."""
    import csv

    block = printed.split(f"# {name}\n")[1].split("\n# ")[0]
    return list(csv.DictReader(io.StringIO(block)))


def check_gen(out: dict[str, str], tmp_path: Path) -> None:
    """Section 8: gen rates per context and declared family over 8 continuations each, shares summing to 1; the
    misgendering correctness of the user study with its 4 loaded stimuli per family; every family in the report."""
    gen = csv_table(out["biaslab metrics options --dataset keeps --db study.duckdb --format csv"], "gen")
    assert len(gen) == 2 * 3 * 4 and {r["family"] for r in gen} == {"female", "male", "neo", "(no pronoun)"}
    assert all(int(r["n"]) == 8 and float(r["ci_low"]) <= float(r["share"]) <= float(r["ci_high"]) for r in gen)
    for context in ("pre", "post"):
        for declared in ("female", "male", "neo"):
            shares = [float(r["share"]) for r in gen if (r["context"], r["declared"]) == (context, declared)]
            assert abs(sum(shares) - 1) < 1e-9 and {r["n"] for r in gen} == {"8"}
    correctness = [r for r in csv_table(out["biaslab metrics misgendering --db study.duckdb --format csv"],
                                        "correctness") if r["dataset"] == "keeps"]
    assert {(r["method"], r["declared"]) for r in correctness} == {
        (m, f) for m in ("prob", "gen") for f in ("female", "male", "neo")}
    assert {r["n_loaded"] for r in correctness} == {"4"}  # the user study's stimuli per family
    page = (tmp_path / "keeps-report" / "index.html").read_text(encoding="utf-8")
    assert all(f">{family}<" in page for family in ("female", "male", "neo"))
    check_report(tmp_path / "keeps-report", tmp_path, sorted(re.findall(r"<img src=\"([^\"]+)\"", page)))


def check_report(report: Path, tmp_path: Path, expected: list[str]) -> None:
    page = (report / "index.html").read_text(encoding="utf-8")
    images = re.findall(r"<img src=\"([^\"]+)\"", page)
    assert sorted(images) == expected
    assert "nothing to show" not in page
    import matplotlib.image

    for name in images:  # drawn: pixels of more than one colour
        pixels = matplotlib.image.imread(report / name)
        assert pixels.shape[0] > 100 and float(np.std(pixels)) > 0.05, name
    if chromium() is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    dom = dump_dom(report / "index.html", tmp_path / "chromium")
    assert f'data-images-loaded="{len(images)}/{len(images)}"' in dom
