"""Every SQL text biaslab builds with an f-string puts names and paths in through the one quoting module
(`biaslab.sql.quoting`: `identifier`, `identifiers`, `literal`) or as bound parameters.

An f-string is SQL when its constant text has an SQL keyword in upper case (as biaslab writes SQL). Each of its
substitutions must be
a call of a quoting function, a number (`int(...)`, `float(...)`, a numeric constant), a module constant (an
UPPER_CASE name), or a variable, attribute or function whose name ends in `_sql` (SQL written by biaslab itself,
by convention built from the same pieces). Anything else is reported with its file and line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "biaslab"
#: SQL keywords as biaslab writes them (upper case), so English messages ("read from {path}") are not SQL
SQL = re.compile(r"\b(SELECT|INSERT INTO|CREATE|ATTACH|COPY|DELETE FROM|UPDATE|DROP|DETACH|PRAGMA|ALTER TABLE|FROM|"
                 r"JOIN|WHERE|USING)\b")
QUOTING = {"identifier", "identifiers", "literal"}
NUMBERS = {"int", "float", "len"}


def _allowed(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        return name in QUOTING or name in NUMBERS or name.endswith("_sql")
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float))
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name is not None and (name.isupper() or name.endswith("_sql"))


#: a value pasted into a hand-written SQL literal: `column = '{value}'`, `IN ('{value}'`, `LIKE '{value}'`
LITERAL = re.compile(r"(=|<>|\bIN \(|\bLIKE) ?'$", re.IGNORECASE)


def _is_sql(node: ast.JoinedStr) -> bool:
    text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if SQL.search(text) and text.upper() != text.lower():  # letters, not only punctuation
        return True
    return any(isinstance(before, ast.Constant) and isinstance(before.value, str) and LITERAL.search(before.value)
               for before, after in zip(node.values, node.values[1:]) if isinstance(after, ast.FormattedValue))


def offences(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """`file:line: {expression}` for each substitution of an SQL f-string in `path` that is not allowed."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _is_sql(node):
            for value in node.values:
                if isinstance(value, ast.FormattedValue) and not _allowed(value.value):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {{{ast.unparse(value.value)}}}")
    return found


def test_sql_text_takes_names_and_paths_only_through_the_quoting_module():
    found = [o for path in sorted(PACKAGE.rglob("*.py")) for o in offences(path)]
    assert not found, "SQL built from an unquoted value:\n" + "\n".join(found)


def test_the_lint_itself(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(table, path, n):\n'
                   '    a = f"SELECT * FROM {table}"\n'
                   '    b = f"ATTACH \'{path}\' AS s"\n'
                   '    c = f"SELECT * FROM {identifier(table)} LIMIT {int(n)}"\n'
                   '    d = f"{where_sql} AND x = {LIMIT}"\n'
                   '    e = f"no sql here: {table}"\n'
                   '    g = f"dataset = \'{name}\'"\n')
    found = offences(bad, root=tmp_path)
    assert [o.split(": ", 1)[1] for o in found] == ["{table}", "{path}", "{name}"]
