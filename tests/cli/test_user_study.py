"""A user's own study through the command line: load a file (twice, then edited), list it, collect it (resuming,
adding nothing twice), gen with the user's own pronoun table, and the refusals that come before any model loads."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners
from biaslab.warehouse import Warehouse

ROWS = [("i1", "The nurse said that BLANK was late.", "unprimed"),
        ("i2", "The pilot said that BLANK was late.", "unprimed"),
        ("i3", "The baker said that BLANK was late.", "unprimed")]


def write_csv(path, rows=ROWS) -> None:
    lines = ["item_id,text,slot,options,option_labels,context,rating"]
    lines += [f"{i},{t},BLANK,she|he,female|male,{c},0.5" for i, t, c in rows]
    path.write_text("\n".join(lines) + "\n")


def run(group, *args):
    return CliRunner().invoke(group, [str(a) for a in args])


def one_line(result, *fragments) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_load_twice_then_an_edited_file_and_collect_resumes(tmp_path, tiny_gpt2_dir):
    data, db = tmp_path / "study.csv", tmp_path / "w.duckdb"
    write_csv(data)
    first = run(biaslab, "data", "load", "--file", data, "--name", "my-study", "--protocols", "prob,choice",
                "--db", db)
    assert first.exit_code == 0 and "3 stimuli read, 3 new" in first.output and "now its current" in first.output
    again = run(biaslab, "data", "load", "--file", data, "--name", "my-study", "--protocols", "prob,choice",
                "--db", db)
    assert "3 stimuli read, 0 new" in again.output and "already its current version" in again.output
    listed = json.loads(run(biaslab, "data", "list", "--db", db, "--format", "json", "--no-count").output)
    [mine] = [r for r in listed if r["dataset"] == "my-study"]
    assert (mine["source"], mine["protocols"], mine["stimuli"]) == ("your file", "prob, choice", 3)
    collect = ["collect", "--dataset", "my-study", "--model", tiny_gpt2_dir, "--dtype", "fp32", "--db", db]
    # prob (the default): 3 x 2 options
    assert "6 pending, 6 scored sequences added" in run(runners, *collect).output
    assert "0 pending, 0 scored sequences added" in run(runners, *collect).output          # twice adds nothing
    assert "3 pending, 3 requests added" in run(runners, *collect, "--protocol", "choice").output
    write_csv(data, [*ROWS[:2], ("i3", "The baker said that BLANK was early.", "unprimed")])
    edited = run(biaslab, "data", "load", "--file", data, "--name", "my-study", "--protocols", "prob,choice",
                 "--db", db)
    assert "3 stimuli read, 1 new" in edited.output and "now its current" in edited.output
    # only the changed row
    assert "3 stimuli, 6 requests, 2 pending, 2 scored sequences added" in run(runners, *collect).output
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("stimuli", "dataset = ?", ["my-study"]) == 4          # the old row and its evidence stay
        assert wh.count("sequence_scores") == 8 and wh.count("user_datasets") == 2


@pytest.mark.parametrize("make, args, fragments", [
    (lambda p: p.write_text("item_id,text\ni1,x\n"), ["--name", "winogender"], ["is a built-in dataset's"]),
    (lambda p: p.write_text("item_id,text,options,slot\ni1,The BLANK.,she|she,BLANK\n"), ["--name", "s"],
     ["study.csv:2: field 'options': repeated option"]),
    (lambda p: p.write_bytes(b"item_id,text\ni1,caf\xe9\n"), ["--name", "s"], ["study.csv:2: not valid UTF-8"]),
    (lambda p: p.write_text("item_id,text\ni1,x\n"), [], ["--name"]),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, make, args, fragments):
    data, db = tmp_path / "study.csv", tmp_path / "w.duckdb"
    make(data)
    one_line(run(biaslab, "data", "load", "--file", data, *args, "--db", db), *fragments)
    assert not db.exists()


def test_a_prompt_without_passage_is_refused_at_load(tmp_path):
    data, db, prompt = tmp_path / "study.csv", tmp_path / "w.duckdb", tmp_path / "prompt.json"
    write_csv(data)
    prompt.write_text(json.dumps({"version": "mine-v1", "system": "s", "user": "Pick {option_1} or {option_2}.",
                                  "prefill": "", "closing": ""}))
    one_line(run(biaslab, "data", "load", "--file", data, "--name", "s", "--protocols", "choice", "--prompt", prompt,
                 "--db", db), "prompt.json: field 'user' lacks the placeholder {passage}")
    assert not db.exists()


def test_an_unknown_dataset_says_how_to_load_one(tmp_path):
    result = run(runners, "collect", "--dataset", "my-study", "--db", tmp_path / "w.duckdb")
    one_line(result, "unknown dataset 'my-study'", "biaslab data load --file FILE --name my-study")


def test_a_users_prompt_is_shown(tmp_path, tiny_gpt2_dir):
    data, db, prompt = tmp_path / "study.csv", tmp_path / "w.duckdb", tmp_path / "prompt.json"
    write_csv(data)
    prompt.write_text(json.dumps({"version": "mine-v1", "system": "Fill the gap.", "user":
                                  "Text: {passage} Options: {option_1} / {option_2}", "prefill": "{'BLANK':'",
                                  "closing": "'"}))
    assert run(biaslab, "data", "load", "--file", data, "--name", "s", "--protocols", "choice", "--prompt", prompt,
               "--db", db).exit_code == 0
    result = run(runners, "collect", "--dataset", "s", "--model", tiny_gpt2_dir, "--dtype", "fp32", "--db", db)
    assert "3 requests added" in result.output, result.output
    with Warehouse.open(db, read_only=True) as wh:
        [(version, text)] = wh.rows("SELECT DISTINCT prompt_version, prompt_text FROM choice_requests LIMIT 1")
    assert version == "mine-v1" and "Options: she / he" in text and "Fill the gap." in text


GEN_SPEC = """
name: swedish-hen
protocols: [gen]
pronouns:
  hon: {nom: hon, acc: henne}
  han: {nom: han, acc: honom}
  hen: {nom: hen, acc: hen}
options:
  - {label: hon, forms: {nom: hon}}
  - {label: han, forms: {nom: han}}
  - {label: hen, forms: {nom: hen}}
fillers:
  name: [Alex, Kim]
templates:
  - {id: t, text: "{name} kom hem sent. Sedan sa {pronoun} hej.", case: nom, gold: hen}
"""


def test_gen_with_the_users_own_pronoun_table(tmp_path, tiny_gpt2_dir):
    spec, db = tmp_path / "spec.yaml", tmp_path / "w.duckdb"
    spec.write_text(GEN_SPEC)
    assert run(biaslab, "data", "load", "--spec", spec, "--db", db).exit_code == 0
    result = run(runners, "collect", "--dataset", "swedish-hen", "--model", tiny_gpt2_dir, "--dtype", "fp32",
                 "--samples", "2", "--max-new-tokens", "4", "--db", db)
    assert "4 requests, 4 pending, 8 samples added" in result.output, result.output  # 2 names x (pre, post) x 2 samples
    with Warehouse.open(db, read_only=True) as wh:
        [(vocabulary,)] = wh.rows("SELECT DISTINCT pronoun_vocabulary FROM gen_requests")
        declared = wh.rows("SELECT DISTINCT declared FROM gen_requests")
    assert json.loads(vocabulary) == {"han": {"acc": ["honom"], "nom": ["han"]},
                                      "hen": {"acc": ["hen"], "nom": ["hen"]},
                                      "hon": {"acc": ["henne"], "nom": ["hon"]}} and declared == [("hen",)]
    tables = json.loads(run(biaslab, "metrics", "misgendering", "--db", db, "--format", "json").output)
    gen = [r for r in tables["correctness"] if r["dataset"] == "swedish-hen" and r["method"] == "gen"]
    assert {r["context"] for r in gen} == {"pre", "post"} and all(r["n"] == 4 for r in gen)
