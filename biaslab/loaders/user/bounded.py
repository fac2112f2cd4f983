"""Reading a file someone sent you without letting it exhaust the machine (issue 45): YAML aliases and nesting, and
the nesting of any parsed JSON / TOML / YAML value, are bounded before the value is used; a file named by a spec
stays inside the spec's folder and under a stated size.

Bounds (each refusal is one line naming the file):
- MAX_DEPTH: containers nested inside each other (a spec needs about 5).
- MAX_VALUES: values a YAML document holds once every alias is expanded ("billion laughs": 9 aliases of 9 give 9^9).
- MAX_PROMPT_BYTES: a prompt JSON file named by a spec or --prompt.
- MAX_SPEC_BYTES: a spec file, and a --families file (both read whole: a spec of thousands of templates and fillers
  is far smaller).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DataError

__all__ = ["MAX_DEPTH", "MAX_VALUES", "MAX_PROMPT_BYTES", "MAX_SPEC_BYTES", "load_yaml", "check_depth", "guarded",
           "inside", "small_file"]

MAX_DEPTH = 64
MAX_VALUES = 1_000_000
MAX_PROMPT_BYTES = 1 << 20
MAX_SPEC_BYTES = 16 << 20


def small_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (a `what`, e.g. "a spec"); DataError naming the
    file otherwise, before it is read."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found" if not path.exists() else "not a regular file")
    size = path.stat().st_size
    if size > limit:
        raise DataError(path, f"{what} is at most {limit:,} bytes; this one has {size:,}")
    return path.read_bytes()


def _yaml_children(node) -> list:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_graph(root, path: Path) -> None:
    """The composed YAML graph, aliases shared: refuse a cycle, nesting beyond MAX_DEPTH, or more than MAX_VALUES
    values once aliases are expanded (sizes memoized per node, so the check itself stays small)."""
    size: dict[int, int] = {}
    stack = [(root, 1, False)]
    on_path: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _yaml_children(node))
            if size[key] > MAX_VALUES:
                raise DataError(path, f"holds more than {MAX_VALUES:,} values once its YAML aliases are expanded "
                                      "(an alias bomb?)")
            continue
        if key in size:
            continue
        if key in on_path:
            raise DataError(path, "a YAML alias refers to a value that contains it (a cycle)")
        if depth > MAX_DEPTH:
            raise DataError(path, f"nested deeper than {MAX_DEPTH} levels")
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _yaml_children(node) if id(child) not in size)


def load_yaml(text: str, path: Path) -> Any:
    """`yaml.safe_load(text)` with the graph checked (`_check_graph`) before any Python value is built; a YAML error
    or a nesting too deep for the parser is a DataError naming `path` (yaml.YAMLError is re-raised for the caller's
    own message)."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        with guarded(path):
            node = loader.get_single_node()
            if node is None:
                return None
            _check_graph(node, path)
            return loader.construct_document(node)
    finally:
        loader.dispose()


class guarded:
    """Context manager: a RecursionError while parsing (nesting deeper than the parser can follow) becomes one line
    naming the file."""

    def __init__(self, path: Path | str):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is not None and issubclass(kind, RecursionError):
            raise DataError(self.path, f"nested deeper than {MAX_DEPTH} levels") from None
        return False


def check_depth(value: Any, path: Path | str, *, line: int | None = None, field: str | None = None) -> Any:
    """`value` when its containers nest at most MAX_DEPTH deep (checked without recursion), DataError otherwise."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if depth > MAX_DEPTH:
            raise DataError(path, f"nested deeper than {MAX_DEPTH} levels", line=line, field=field)
        stack.extend((c, depth + 1) for c in children)
    return value


def inside(name: str, folder: Path, where: Path, field: str) -> Path:
    """The file `name` (relative to `folder`) when it lies inside `folder`; a spec someone sent you names files
    next to it, never an absolute path or one that climbs out (DataError naming the spec and the field)."""
    candidate = Path(name)
    if candidate.is_absolute() or candidate.drive:
        raise DataError(where, f"{name!r} is an absolute path; a spec names files relative to its folder", field=field)
    base = folder.resolve()
    resolved = (base / candidate).resolve()
    if resolved != base and base not in resolved.parents:
        raise DataError(where, f"{name!r} lies outside the spec's folder {folder}", field=field)
    return resolved
