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
