"""The collections query over only the kinds of evidence a warehouse holds (what `info` and `collections` run, issue
57) gives the rows of the whole query, whichever kinds are there."""

from __future__ import annotations

import itertools
import shutil

import pytest

from biaslab.warehouse import Warehouse
from biaslab.warehouse.catalog import (COLLECTION_COLUMNS, NAMED_COLLECTIONS_SQL, collection_records,
                                       collections_sql, present_kinds)
from open_warehouse_evidence import build

TABLES = {"exact": ["choice_probs"], "sampled": ["samples"], "generated": ["gen_requests"],
          "scored": ["sequence_scores"]}


@pytest.fixture(scope="module")
def full(tmp_path_factory, data_dir):
    return build(tmp_path_factory.mktemp("kinds") / "w.duckdb", data_dir)


def test_the_fixture_holds_every_kind(full):
    with Warehouse.open(full, read_only=True) as wh:
        assert present_kinds(wh) == ["exact", "sampled", "generated", "scored"]


@pytest.mark.parametrize("emptied", [c for n in range(1, 5) for c in itertools.combinations(TABLES, n)],
                         ids=lambda c: "-".join(c))
def test_pruned_rows_equal_the_whole_query(emptied, full, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(full, db)
    with Warehouse.open(db) as wh:
        for kind in emptied:
            for table in TABLES[kind]:
                wh.con.execute(f"DELETE FROM {table}")
    with Warehouse.open(db, read_only=True) as wh:
        kinds = present_kinds(wh)
        whole = wh.rows(f"SELECT {', '.join(COLLECTION_COLUMNS)} FROM ({NAMED_COLLECTIONS_SQL})")
        _, pruned = collection_records(wh, COLLECTION_COLUMNS)
    assert kinds == [k for k in TABLES if k not in emptied]
    assert pruned == whole
    if kinds and not (kinds == ["generated"] and "sampled" in emptied):  # (gen rows are read from samples)
        assert whole  # something is left, so the comparison compares rows


def test_no_kind_is_refused():
    from biaslab.errors import UsageError

    with pytest.raises(UsageError):
        collections_sql([])


def test_a_gen_collection_names_its_last_run(tmp_path, data_dir, tiny_gpt2):
    """A gen collection's last run is found (its min_new_tokens kept its name through the union; it was NULL, so
    `collections` and `info` showed no last run for any gen collection)."""
    from biaslab.runners.collect import CollectConfig, collect

    db = tmp_path / "w.duckdb"
    result = collect(CollectConfig(dataset="misgendered", protocol="gen", samples=2, max_new_tokens=4,
                                   min_new_tokens=4, limit=2, db=str(db), data_dir=str(data_dir), dtype="fp32"),
                     loaded=tiny_gpt2)
    with Warehouse.open(db, read_only=True) as wh:
        _, rows = collection_records(wh, ["protocol", "settings", "last_run", "last_status"])
    assert rows == [("gen", "T=1 top_k=50 top_p=0.95 new=4 min=4 prompt=gen-v1", result.run_id[:8], "finished")]
