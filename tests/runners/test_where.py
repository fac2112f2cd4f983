"""Issue 44, item 8: `runners collect --where FIELD=VALUE` picks stimuli by their fields (and a user study's
attributes), beyond `--limit`; a field that does not exist, or a filter nothing matches, is refused in one line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.cli.runners_cli import runners
from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse


def _collected(db) -> list[tuple]:
    with Warehouse.open(db, read_only=True) as wh:
        return wh.rows("SELECT s.context, s.option_order, s.item_id FROM choice_requests r JOIN stimuli s "
                       "USING (stimulus_id) ORDER BY s.item_id, s.stimulus_id")


def test_where_picks_stimuli_by_field_before_the_limit(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("winopron")
    db = tmp_path / "w.duckdb"
    common = dict(dataset="winopron", db=str(db), data_dir=str(data_dir), top_k=5)
    result = collect(CollectConfig(where={"context": "unprimed", "option_order": "MF"}, limit=6, **common),
                     loaded=tiny_gpt2)
    assert (result.stimuli, result.added) == (6, 6)
    rows = _collected(db)
    assert len(rows) == 6 and {(c, o) for c, o, _ in rows} == {("unprimed", "MF")}
    # 6 templates among those with an unprimed MF stimulus (the filter first, then the limit's spread sample of
    # them: one prompt each here), spread over the grammatical cases
    assert len({r[2] for r in rows}) == 6
    assert {r[2].rsplit(".", 1)[1] for r in rows} == {"acc", "nom", "poss_dep"}
    other = tmp_path / "either.duckdb"
    either = collect(CollectConfig(**{**common, "db": str(other)}, where={"context": "primed_f|primed_m"}, limit=3),
                     loaded=tiny_gpt2)
    assert either.added == 12 and {c for c, _, _ in _collected(other)} == {"primed_f", "primed_m"}
    with pytest.raises(ValueError, match=r"no stimulus has context=nowhere \(--where\)"):
        collect(CollectConfig(**common, where={"context": "nowhere"}), loaded=tiny_gpt2)


@pytest.mark.parametrize("where, message", [
    (["contxt=unprimed"], "no stimulus field 'contxt'"),
    (["context"], "'context' is not KEY=VALUE"),
])
def test_a_wrong_filter_is_refused_in_one_line(tmp_path, data_dir, dataset_folder, where, message):
    dataset_folder("winopron")
    db = tmp_path / "w.duckdb"
    args = ["collect", "--dataset", "winopron", "--db", str(db), "--data-dir", str(data_dir), "--model",
            "/no/model/needed/before/this"]
    for w in where:
        args += ["--where", w]
    result = CliRunner().invoke(runners, args)
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output


def test_where_on_a_user_attribute_and_in_the_resume_command(tmp_path, tiny_gpt2):
    spec = tmp_path / "names.yaml"
    spec.write_text("""
name: names
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
fillers:
  name: [{value: Mary, rating: 0.9}, {value: John, rating: 0.1}, {value: Alex, rating: 0.5}]
templates:
  - {id: t, text: "{name} said that {pronoun} was late.", case: nom}
""")
    db = tmp_path / "w.duckdb"
    assert CliRunner().invoke(cli, ["data", "load", "--spec", str(spec), "--db", str(db)]).exit_code == 0
    config = CollectConfig(dataset="names", db=str(db), protocol="prob", where={"attrs.name_rating": "0.9|0.1"})
    assert collect(config, loaded=tiny_gpt2).stimuli == 2
    assert "--where 'attrs.name_rating=0.9|0.1'" in config.command_line()  # the resume line gives it back
