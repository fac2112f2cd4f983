"""The layer order of docs/design.md section 2, checked on every module's imports (read with `ast`, nothing imported).

Lowest first: schema, lexicon, sql, views, warehouse, loaders, engines, runners, metrics, cli. A module imports only
modules of its own layer or of layers before it; besides, metrics never imports runners or engines, loaders never
imports warehouse or engines, and engines never imports warehouse or loaders. No import cycle between modules,
whether the import sits at the top of a file or inside a function.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "biaslab"
ORDER = ("schema", "lexicon", "sql", "views", "warehouse", "loaders", "engines", "runners", "metrics", "cli")
FORBIDDEN = {"metrics": {"runners", "engines"}, "loaders": {"warehouse", "engines"},
             "engines": {"warehouse", "loaders"}}
#: modules of the package root besides __init__ (biaslab/errors.py: the error types): below every layer, so every
#: layer may import them, and they import nothing from biaslab
ROOT_MODULES = ("errors",)


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (before its imported names)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The biaslab modules `module` imports anywhere in its file (top level or inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            # `from pkg import sub` imports the submodule pkg.sub where one exists, else a name of pkg
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import biaslab.x.y` names a module; strip to the nearest one
                name = name.rpartition(".")[0]
            if name.startswith("biaslab") and name != module:
                found.add(name)
    return found


def layer(module: str) -> str | None:
    """The layer of a module (its first package below biaslab), None for the package root and its `ROOT_MODULES`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] not in ROOT_MODULES else None


def graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: imports_of(m, p, known) for m, p in known.items()}


def breaches(edges: dict[str, set[str]]) -> list[str]:
    """Every import against the layer order, as 'importer -> imported (why)'."""
    out = []
    for module, targets in sorted(edges.items()):
        own = layer(module)
        if own is None:  # the package root: __init__ is the public facade (imports lazily); ROOT_MODULES import nothing
            out.extend(f"{module} -> {target} (a module of the package root imports nothing from biaslab)"
                       for target in sorted(targets) if module != "biaslab")
            continue
        for target in sorted(targets):
            other = layer(target)
            if other is None or other == own:
                continue
            if own not in ORDER or other not in ORDER:
                out.append(f"{module} -> {target} (a module outside the layers {ORDER})")
            elif other in FORBIDDEN.get(own, ()):
                out.append(f"{module} -> {target} ({own} never imports {other})")
            elif ORDER.index(other) > ORDER.index(own):
                out.append(f"{module} -> {target} ({own} imports the higher layer {other})")
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def test_every_layer_folder_is_known():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders <= set(ORDER), f"folders outside the layer list: {sorted(folders - set(ORDER))}"
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", *ROOT_MODULES))
    assert not top, f"modules outside every layer: {top}"


def test_no_import_against_the_layer_order():
    found = breaches(graph())
    assert not found, "imports against docs/design.md section 2:\n" + "\n".join(found)


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("edges, expected", [
    ({"biaslab.a.x": {"biaslab.a.y"}, "biaslab.a.y": {"biaslab.a.x"}}, [["biaslab.a.x", "biaslab.a.y"]]),
    ({"biaslab.a.x": {"biaslab.a.y"}, "biaslab.a.y": set()}, []),
    ({"biaslab.a.x": {"biaslab.a.y"}, "biaslab.a.y": {"biaslab.a.z"}, "biaslab.a.z": {"biaslab.a.x"}},
     [["biaslab.a.x", "biaslab.a.y", "biaslab.a.z"]]),
])
def test_the_cycle_finder_itself(edges, expected):
    assert cycles(edges) == expected


def test_the_breach_finder_itself():
    edges = {"biaslab.metrics.m": {"biaslab.runners.r", "biaslab.warehouse.w"},
             "biaslab.schema.s": {"biaslab.views.v"}, "biaslab.engines.e": {"biaslab.loaders.l"},
             "biaslab.cli.c": {"biaslab.metrics.m", "biaslab.runners.r"},
             "biaslab.errors": {"biaslab.schema.s"}, "biaslab.sql.q": {"biaslab.errors"}}
    assert breaches(edges) == [
        "biaslab.engines.e -> biaslab.loaders.l (engines never imports loaders)",
        "biaslab.errors -> biaslab.schema.s (a module of the package root imports nothing from biaslab)",
        "biaslab.metrics.m -> biaslab.runners.r (metrics never imports runners)",
        "biaslab.schema.s -> biaslab.views.v (schema imports the higher layer views)",
    ]


#: the longest function (docstring included) the package may hold (issue 30: small functions that each do one thing)
MAX_FUNCTION_LINES = 60


def test_no_function_is_longer_than_the_limit():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


#: names under which the runners hold an engine's objects: its module, its prepared model, its loaded backend
ENGINE_OBJECTS = re.compile(r"(^|_|\.)(module|prepared|backend|engine|handle)s?($|_|\.)")


def probes(source: str) -> list[str]:
    """The `getattr(x, ...)` / `hasattr(x, ...)` calls of `source` whose object `x` names an engine's module,
    prepared model, backend or handle (docs/design.md section 2: capabilities are declared, never probed)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and node.args and ENGINE_OBJECTS.search(ast.unparse(node.args[0]))):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_runners_read_what_an_engine_declares_and_probe_nothing():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in sorted((PACKAGE / "runners").rglob("*.py"))
             for line in probes(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_probe_finder_itself():
    source = ("getattr(backend, 'batch', False)\nhasattr(handle.prepared, 'estimate')\n"
              "getattr(module, 'WHY_NOT', None)\ngetattr(self.backend, 'x')\n"
              "getattr(tokenizer, 'chat_template', None)\ngetattr(stimulus, field)\ngetattr(self.settings, 'top_k')\n")
    assert [p.split(":")[0] for p in probes(source)] == ["1", "2", "3", "4"]
