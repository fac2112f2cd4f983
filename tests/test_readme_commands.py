"""The README's test command is what CI runs (issue 46): `.ci/run` holds the README's pytest line verbatim, and the
install line CI uses installs the extras the README's install line names."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "python -m pytest" in b)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_verbatim():
    readme = _readme_block()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    command = next(line for line in readme if "python -m pytest" in line)
    assert command == "BIASLAB_DATA=../shared/datasets python -m pytest -q"
    assert command in ci


def test_ci_installs_the_extras_the_readme_installs():
    extras = re.search(r'-e "\.\[([a-z,-]+)\]"', " ".join(_readme_block()))[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f'-e ".[{extras}]"' in ci and {"openai", "gemini", "anthropic"} <= set(extras.split(","))
