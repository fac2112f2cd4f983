"""Issue 45, items 1-4 and 6: a study file someone sent you cannot exhaust the machine or reach outside its folder,
and every value is bounded. Each hostile case ends in one line (exit 1 for data, 2 for usage), within seconds, with
the warehouse byte-identical."""

from __future__ import annotations

import hashlib
import time

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.loaders.user.bounded import MAX_DEPTH
from biaslab.loaders.user.expand import expansion_size
from biaslab.loaders.user.spec import read_spec

BASE = """
name: {name}
options:
  - {{label: female, forms: {{nom: she}}}}
  - {{label: male, forms: {{nom: he}}}}
fillers:
  occupation: [{fillers}]
templates:
  - {{id: late, text: "The {{occupation}} said that {{pronoun}} was late.", case: nom}}
{extra}
"""


def _spec(tmp_path, name="hostile", fillers="{value: nurse}, {value: pilot}", extra="", suffix=".yaml"):
    path = tmp_path / f"spec{suffix}"
    path.write_text(BASE.format(name=name, fillers=fillers, extra=extra))
    return path


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "w.duckdb"
    base = tmp_path / "base"
    base.mkdir()
    spec = _spec(base, name="base", extra="protocols: [choice]")
    result = CliRunner().invoke(cli, ["data", "load", "--spec", str(spec), "--db", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _refused(args, db, expected: str, code: int = 1) -> str:
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    start = time.perf_counter()
    result = CliRunner().invoke(cli, args)
    assert time.perf_counter() - start < 30
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and expected in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 or code == 2, result.output
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    return result.output


def test_a_yaml_alias_bomb_is_refused(tmp_path, db):
    laughs = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        laughs.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BASE.format(name="bomb", fillers="{value: nurse, attrs: {x: *i}}", extra="")
                    .replace("name: bomb", "name: bomb\nbombs:\n  " + "\n  ".join(laughs)))
    out = _refused(["data", "load", "--spec", str(bomb), "--db", str(db)], db, "once its YAML aliases are expanded")
    assert str(bomb) in out


def test_a_cyclic_alias_is_refused(tmp_path, db):
    spec = _spec(tmp_path, fillers="{value: nurse, attrs: {x: &loop [1, *loop]}}")
    _refused(["data", "load", "--spec", str(spec), "--db", str(db)], db, "a cycle")


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_an_expansion_of_a_billion_is_refused_before_expanding(tmp_path, db, suffix):
    values = ", ".join(f"{{value: v{i}}}" for i in range(1000))
    if suffix == ".yaml":
        text = BASE.format(name="huge", fillers=values, extra="").replace(
            "fillers:\n  occupation: [", "fillers:\n  a: [" + values + "]\n  b: [" + values + "]\n  occupation: [")
        text = text.replace("The {occupation} said", "The {a} {b} {occupation} said")
        spec = tmp_path / "huge.yaml"
        spec.write_text(text)
    else:
        listed = ", ".join(f'{{value = "v{i}"}}' for i in range(1000))
        spec = tmp_path / "huge.toml"
        spec.write_text(f'name = "huge"\noptions = [{{label = "female", forms = {{nom = "she"}}}}, '
                        f'{{label = "male", forms = {{nom = "he"}}}}]\n'
                        f'[fillers]\na = [{listed}]\nb = [{listed}]\nc = [{listed}]\n'
                        f'[[templates]]\nid = "t"\ntext = "The {{a}} {{b}} {{c}} said that {{pronoun}} was late."\n'
                        f'case = "nom"\n')
    assert expansion_size(read_spec(spec)[0]) == 10**9
    for command in (["data", "load", "--spec", str(spec), "--db", str(db)], ["data", "expand", str(spec)]):
        _refused(command, db, "expands to 1,000,000,000 stimuli")


def test_max_stimuli_moves_the_bound(tmp_path, db):
    spec = _spec(tmp_path, name="small")  # 2 fillers x 1 context x 1 order = 2 stimuli
    _refused(["data", "expand", str(spec), "--max-stimuli", "1"], db, "expands to 2 stimuli")
    assert CliRunner().invoke(cli, ["data", "expand", str(spec), "--max-stimuli", "2"]).exit_code == 0


@pytest.mark.parametrize("depth", [600, 100_000])
@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_deep_nesting_in_a_spec_is_one_line(tmp_path, db, depth, suffix):
    nested = "[" * depth + "1" + "]" * depth
    if suffix == ".yaml":
        spec = _spec(tmp_path, fillers=f"{{value: nurse, attrs: {{x: {nested}}}}}")
    else:
        spec = tmp_path / "deep.toml"
        spec.write_text(f'name = "deep"\nx = {nested}\n')
    _refused(["data", "load", "--spec", str(spec), "--db", str(db)], db, f"nested deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deep_nesting_in_a_jsonl_attribute_is_one_line(tmp_path, db, depth):
    rows = tmp_path / "rows.jsonl"
    nested = "[" * depth + "1" + "]" * depth
    rows.write_text('{"text": "The nurse said that BLANK was late.", "item_id": "a", "attrs": {"x": ' + nested
                    + "}}\n")
    out = _refused(["data", "load", "--file", str(rows), "--name", "deep", "--db", str(db)], db,
                   f"nested deeper than {MAX_DEPTH} levels")
    assert f"{rows}:1" in out


@pytest.mark.parametrize("where", ["absolute", "outside"])
def test_a_spec_cannot_read_outside_its_folder(tmp_path, db, where):
    secret = tmp_path / "outside" / "secret.json"
    secret.parent.mkdir()
    secret.write_text('{"system": "leaked"}')
    folder = tmp_path / "study" / "inner"
    folder.mkdir(parents=True)
    name = str(secret) if where == "absolute" else "../../outside/secret.json"
    spec = _spec(folder, extra=f"prompt: {name}\nprotocols: [choice]")
    expected = "is an absolute path" if where == "absolute" else "lies outside the spec's folder"
    for command in (["data", "load", "--spec", str(spec), "--db", str(db)], ["data", "expand", str(spec)]):
        _refused(command, db, expected)


def test_a_name_with_a_final_newline_is_refused(tmp_path, db):
    spec = _spec(tmp_path, name='"abc\\n"')
    _refused(["data", "load", "--spec", str(spec), "--db", str(db)], db, "dataset name 'abc\\n'")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "The nurse said that BLANK was late.", "item_id": "a"}\n')
    _refused(["data", "load", "--file", str(rows), "--name", "abc\n", "--db", str(db)], db, "dataset name 'abc\\n'")


@pytest.mark.parametrize("flag, value, expected", [
    ("--temperature", "inf", "--temperature: Input should be a finite number"),
    ("--temperature", "1e308", "--temperature must be at most 100"),
    ("--max-new-tokens", "1000000000", "--max-new-tokens must be at most 32768"),
    ("--k-store", "1000000000", "--k-store must be at most 262144"),
    ("--seed", str(2**70), "--seed must be at most 9223372036854775807"),
])
def test_unbounded_sampling_values_are_refused(db, flag, value, expected):
    from biaslab.cli.runners_cli import runners

    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    result = CliRunner().invoke(runners, ["collect", "--dataset", "base", "--protocol", "choice", "--db", str(db),
                                          flag, value])
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output, result.output
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("args, expected", [
    (["--timeout", "inf"], "inf is not in the range"),
    (["--memory-limit", "abc"], "'abc' is not a memory size"),
])
def test_sql_options_are_bounded(db, args, expected):
    result = CliRunner().invoke(cli, ["sql", "SELECT 1", "--db", str(db), *args])
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output
