"""Runs of different protocols, modes and settings are never mixed silently (issue 36, item 4), on one warehouse
holding a WinoPron exact collection, a 5-prompt sample collection and a metaprompt collection of one tiny model:
`choice_probs_at` re-derives one protocol and names it; `winopron_pf` and every contextuality table keep the modes
apart and labelled; `option_probs` has no comprehension answers; the report's sample section says it is too small
instead of drawing n = 0-1 figures."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.runners.collect import CollectConfig, collect

EXACT_PROMPTS = 40  # 4 templates (a limit counts templates, 10 prompts each)
ONE_PROMPT = {"context": "unprimed", "option_order": "MF"}  # a template's one prompt


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, tiny_gpt2, data_dir):
    db = tmp_path_factory.mktemp("mixed") / "w.duckdb"

    def run(**kw):
        collect(CollectConfig(dataset="winopron", db=str(db), data_dir=str(data_dir), **kw), loaded=tiny_gpt2)

    run(limit=EXACT_PROMPTS // 10)
    run(limit=5, where=ONE_PROMPT, mode="sample", samples=6, seed=1)
    run(limit=2, where=ONE_PROMPT, protocol="meta")
    return db


def test_choice_probs_at_rederives_one_protocol_and_names_it(mixed):
    with biaslab.open(mixed) as wh:
        default = wh.query("SELECT c.protocol, c.option, r.options FROM choice_probs_at(0.5, 20) c "
                           "JOIN choice_requests r USING (model_key, request_id)")
        meta = wh.query("SELECT DISTINCT protocol FROM choice_probs_at(0.5, 20, protocol_name := 'meta')")
        every = wh.query("SELECT protocol, count(DISTINCT request_id) AS n FROM choice_probs_at(0.5, 20, "
                         "protocol_name := NULL) GROUP BY ALL ORDER BY protocol")
        requests = wh.query("SELECT protocol, count(*) AS n FROM choice_requests WHERE mode = 'exact' "
                            "GROUP BY ALL ORDER BY protocol")
    assert set(default["protocol"]) == {"choice"}
    pronouns = {o for options in default["options"] for o in options}
    assert set(default["option"]) <= pronouns | {"unresolved", "invalid"}
    assert list(meta["protocol"]) == ["meta"]
    assert dict(zip(every["protocol"], every["n"])) == dict(zip(requests["protocol"], requests["n"]))
    assert set(every["protocol"]) == {"choice", "meta"}


def test_winopron_pf_and_the_tables_keep_modes_apart(mixed):
    with biaslab.open(mixed) as wh:
        pf = wh.query("SELECT mode, count(*) AS n FROM winopron_pf GROUP BY ALL ORDER BY mode")
        tables = biaslab.contextuality(wh, bootstrap=2)
        options = wh.query("SELECT DISTINCT method FROM option_probs")
        labels = wh.query("SELECT DISTINCT option_label FROM option_probs")
    assert dict(zip(pf["mode"], pf["n"])) == {"exact": EXACT_PROMPTS, "sample": 5}
    for name in ("validity", "pf", "kl"):
        table = tables[name]
        assert "mode" in table.columns, name
        assert set(table["mode"]) <= {"exact", "sample"}
    assert set(tables["validity"]["mode"]) == {"exact", "sample"}
    assert set(options["method"]) == {"choice-exact", "choice-sample"}  # no comprehension answers
    assert set(labels["option_label"]) <= {"female", "male"}


def test_the_report_says_a_tiny_collection_is_too_small(mixed, tmp_path):
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", "contextuality", "--db", str(mixed), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text(encoding="utf-8")
    sections = page.split("<h2")[1:]  # [0] is the page head and the flags
    sample = [s for s in sections if "sample" in s.split("</h2>")[0]]
    exact = [s for s in sections if "exact" in s.split("</h2>")[0]]
    assert len(sample) == 1 and len(exact) == 1
    assert "Too small to estimate anything: 5 prompts" in sample[0] and "<img" not in sample[0]
    # the tiny random model leaves most exact prompts without a pronoun answer: said so, or drawn, never both
    assert ("Too small" in exact[0]) != ("<img" in exact[0])


def test_collections_large_enough_are_drawn(tmp_path, data_dir):
    from open_warehouse_evidence import build

    db = build(tmp_path / "w.duckdb", data_dir)
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", "contextuality", "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    sections = (out / "index.html").read_text(encoding="utf-8").split("<h2")[1:]
    drawn = [s for s in sections if "<img" in s]
    assert len(drawn) >= 3 and all("Too small" not in s for s in drawn)
