"""Sharded collection: two shards collected separately and merged equal one unsharded collection."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.runners.collect import CollectConfig, collect
from biaslab.runners.stimuli import shard_of
from biaslab.warehouse import Warehouse, WarehouseError
from biaslab.warehouse.merge import merge_shards


def _rows(db):
    with Warehouse.open(db, read_only=True) as wh:
        return {
            "stimuli": wh.con.execute("SELECT stimulus_id FROM stimuli ORDER BY 1").fetchall(),
            "seq": wh.con.execute("SELECT model_key, request_id, n_tokens, sum_logprob FROM sequence_scores "
                                  "ORDER BY ALL").fetchall(),
            "tok": wh.con.execute("SELECT model_key, request_id, position, token_id FROM token_scores "
                                  "ORDER BY ALL").fetchall(),
        }


def test_two_shards_merged_equal_one_unsharded_collection(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("winogender")
    base = dict(dataset="winogender", data_dir=str(data_dir), limit=40)
    collect(CollectConfig(db=str(tmp_path / "whole.duckdb"), **base), loaded=tiny_gpt2)
    shards = tmp_path / "shards"
    sizes = []
    for i in range(2):
        result = collect(CollectConfig(shard=f"{i}/2", out_shard=str(shards), **base), loaded=tiny_gpt2)
        sizes.append(result.stimuli)
    assert sum(sizes) == 40 and min(sizes) > 0
    merged = tmp_path / "merged.duckdb"
    first = merge_shards(shards, merged)
    assert first["sequence_scores"] == 120
    again = merge_shards(shards, merged)
    assert sum(again.values()) == 0  # merging twice changes nothing
    whole, got = _rows(tmp_path / "whole.duckdb"), _rows(merged)
    assert got["stimuli"] == sorted(set(got["stimuli"]))  # no duplicates
    assert set(whole["stimuli"]) <= set(got["stimuli"])  # all loaded stimuli travel with the shards
    assert [r[:3] for r in got["seq"]] == [r[:3] for r in whole["seq"]] and got["tok"] == whole["tok"]
    for a, b in zip(got["seq"], whole["seq"]):
        assert a[3] == pytest.approx(b[3], abs=1e-4)
    assert shard_of("ff", 2) == 1 and shard_of("10", 4) == 0


def test_mixed_shards_are_refused(tmp_path, tiny_gpt2, tiny_bert, data_dir, dataset_folder):
    dataset_folder("winogender")
    shards = tmp_path / "shards"
    collect(CollectConfig(dataset="winogender", data_dir=str(data_dir), limit=6, shard="0/2", out_shard=str(shards)),
            loaded=tiny_gpt2)
    other = tmp_path / "other"
    collect(CollectConfig(dataset="winogender", data_dir=str(data_dir), limit=6, shard="1/2", out_shard=str(other)),
            loaded=tiny_bert)
    (other / "shard-0001-of-0002.duckdb").rename(shards / "shard-0001-of-0002.duckdb")
    result = CliRunner().invoke(biaslab, ["warehouse", "merge", str(shards), "--db", str(tmp_path / "m.duckdb")])
    assert result.exit_code != 0 and "different collection" in result.output and "model_key" in result.output
    with pytest.raises(WarehouseError, match="no shard files"):
        merge_shards(tmp_path / "empty-does-not-exist", tmp_path / "m.duckdb")


def test_shard_files_and_folders_named_with_quotes_are_merged_not_skipped(tmp_path, tiny_gpt2, data_dir,
                                                                          dataset_folder):
    """Issue 45, item 9: a shard folder or file whose name holds a quote is read as any other (names reach SQL as
    quoted literals): both shards merge, none is reported missing."""
    dataset_folder("winogender")
    shards = tmp_path / "it's \"shards\""
    base = dict(dataset="winogender", data_dir=str(data_dir), limit=10, out_shard=str(shards))
    for i in range(2):
        collect(CollectConfig(shard=f"{i}/2", **base), loaded=tiny_gpt2)
    for n, path in enumerate(sorted(shards.glob("*.duckdb"))):
        path.rename(shards / f"o'brien \"{n}\".duckdb")
    result = CliRunner().invoke(biaslab, ["warehouse", "merge", str(shards), "--db", str(tmp_path / "m.duckdb")])
    assert result.exit_code == 0, result.output
    assert "missing" not in result.output and "sequence_scores +30" in result.output


def test_a_shard_table_with_an_extra_column_is_one_line_and_nothing_is_merged(tmp_path, tiny_gpt2, data_dir,
                                                                             dataset_folder):
    """Issue 67, item 10: a shard with an extra column stopped the merge with DuckDB's BinderException."""
    import duckdb

    dataset_folder("winogender")
    shards = tmp_path / "shards"
    collect(CollectConfig(dataset="winogender", data_dir=str(data_dir), limit=6, shard="0/1", out_shard=str(shards)),
            loaded=tiny_gpt2)
    [path] = list(shards.glob("*.duckdb"))
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE sequence_scores ADD COLUMN smuggled VARCHAR")
    con.close()
    target = tmp_path / "m.duckdb"
    result = CliRunner().invoke(biaslab, ["warehouse", "merge", str(shards), "--db", str(target)])
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 1 and "Traceback" not in result.output and "Binder" not in result.output
    assert f"{path}: table sequence_scores: extra column(s) smuggled" in line and "nothing was merged" in line
    assert not target.exists() or Warehouse.open(target, read_only=True).count("sequence_scores") == 0
