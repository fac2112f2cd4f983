"""A new warning fails the suite (issue 71, item 7): pyproject's filterwarnings begins with "error", every warning it
lets through is named with the reason beside it, and a test that warns fails under the project's own configuration
(a throwaway test file run by pytest with this pyproject)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_filter_list_starts_with_error_and_names_each_exception():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    filters = config["filterwarnings"]
    assert filters[0] == "error"
    assert all(f.startswith("ignore:") and len(f.split(":")[1]) >= 10 for f in filters[1:])  # a named message each
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = text[text.index("filterwarnings = ["):text.index("]", text.index("filterwarnings = ["))]
    assert block.count("#") >= 3  # the reasons, as comments beside the entries


def test_a_test_that_warns_fails_under_the_projects_configuration(tmp_path):
    (tmp_path / "test_warns.py").write_text(
        "import warnings\n\n"
        "def test_warns():\n"
        "    warnings.warn('something new is deprecated', DeprecationWarning)\n\n"
        "def test_quiet():\n"
        "    assert True\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed" in done.stdout and "DeprecationWarning: something new is deprecated" in done.stdout
