"""A factor that varies between items cannot be paired within them (issue 56, items 9 and 10): `metrics options
--contrast` and `compare options --within` say so in one line instead of printing empty rows, and a study without
within-setting conditions says so under --within instead of printing a bare header."""

from __future__ import annotations

from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.runners.collect import CollectConfig, collect

ROWS = "".join(f"i{n},The {job} said that BLANK was tired.,BLANK,she|he,female|male,{group}\n"
               for n, (job, group) in enumerate([("nurse", "care"), ("doctor", "care"), ("pilot", "travel"),
                                                 ("driver", "travel")]))


def test_a_between_item_factor_is_one_line(tmp_path, tiny_gpt2):
    rows = tmp_path / "jobs.csv"
    rows.write_text("item_id,text,slot,options,option_labels,attrs.group\n" + ROWS, encoding="utf-8")
    db = str(tmp_path / "w.duckdb")
    runner = CliRunner()
    assert runner.invoke(cli, ["data", "load", "--file", str(rows), "--name", "jobs", "--db", db]).exit_code == 0
    collect(CollectConfig(dataset="jobs", db=db, protocol="prob"), loaded=tiny_gpt2)
    result = runner.invoke(cli, ["metrics", "options", "--dataset", "jobs", "--db", db, "--by", "group",
                                 "--contrast", "group=care:travel", "--bootstrap", "100"])
    output = result.output.strip()
    assert result.exit_code == 2 and len(output.splitlines()) == 1, output
    assert "--contrast: group varies between items in jobs" in output and "--by group" in output
    result = runner.invoke(cli, ["compare", "options", "--dataset", "jobs", "--db", db, "--by", "group", "--within"])
    output = result.output.strip()
    assert result.exit_code == 2 and len(output.splitlines()) == 1, output
    assert "--within: group varies between items in jobs" in output
    # the groups themselves are still compared as groups
    result = runner.invoke(cli, ["metrics", "options", "--dataset", "jobs", "--db", db, "--by", "group",
                                 "--bootstrap", "100", "--format", "json"])
    assert result.exit_code == 0, result.output


def test_compare_options_leaves_out_items_a_setting_has_only_in_part(tmp_path, tiny_gpt2, tiny_gpt2_dir):
    """Issue 56, item 7: a setting with evidence for one option order of an item's two has a partial item, left
    out of that setting (as `metrics options` leaves it out) and counted and named by compare, never compared
    against the other setting's whole item."""
    from biaslab.engines.hf.loading import load_model

    rows = tmp_path / "orders.csv"
    lines = ["item_id,text,slot,options,option_labels,option_order"]
    for n, job in enumerate(["nurse", "doctor", "pilot"]):
        lines += [f"i{n},The {job} said that BLANK was tired.,BLANK,she|he,female|male,FM",
                  f"i{n},The {job} said that BLANK was tired.,BLANK,he|she,male|female,MF"]
    rows.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = str(tmp_path / "w.duckdb")
    runner = CliRunner()
    assert runner.invoke(cli, ["data", "load", "--file", str(rows), "--name", "orders", "--db", db]).exit_code == 0
    collect(CollectConfig(dataset="orders", db=db, protocol="prob"), loaded=tiny_gpt2)
    bf16 = load_model(str(tiny_gpt2_dir), dtype="bf16", device="cpu")
    collect(CollectConfig(dataset="orders", db=db, protocol="prob", where={"option_order": "MF"}), loaded=bf16)
    import json

    result = runner.invoke(cli, ["compare", "options", "--dataset", "orders", "--db", db, "--format", "json",
                                 "--bootstrap", "50", "--permutations", "50"])
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(result.output) if r["measure"] == "p"]
    assert rows and all(r["n_items"] == 0 and r["n_excluded"] == 3 and r["low_coverage"] for r in rows)
    assert all("3 items without a value in" in r["note"] and "i0, i1, i2" in r["note"] for r in rows)
