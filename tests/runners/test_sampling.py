"""A limited run is a fair sample (`runners.sampling`): whole items, spread over the dataset's strata in a seeded order
that a larger limit, a rerun and a shard extend; or the dataset's file order."""

from __future__ import annotations

import collections
import json

import pytest
from click.testing import CliRunner

from biaslab import loaders
from biaslab.cli.runners_cli import runners
from biaslab.runners import sampling
from biaslab.runners import stimuli as stimuli_of
from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse


def _chosen(data_dir, dataset: str, **config):
    cfg = CollectConfig(dataset=dataset, data_dir=str(data_dir), db="unused.duckdb", **config)
    loaded = cfg.dataset_ref().info.load(loaders.default_data_dir(str(data_dir)))
    found = sorted(loaded, key=lambda s: (s.item_id, s.stimulus_id))
    return found, stimuli_of.select(found, cfg)


def test_spread_order_is_proportional_with_every_outer_stratum_first():
    # 3 outer strata of 60 / 30 / 10 items, the largest split into two inner strata of 40 / 20
    items = {f"a{i}": ("A", "x" if i < 40 else "y") for i in range(60)}
    items.update({f"b{i}": ("B", "z") for i in range(30)})
    items.update({f"c{i}": ("C", "z") for i in range(10)})
    order = sampling.spread_order(items, seed=0)
    assert sorted(order) == sorted(items) and len(set(order)) == 100
    assert {items[i][0] for i in order[:3]} == {"A", "B", "C"}   # every outer stratum before any second
    for n in (10, 20, 50, 100):
        counts = collections.Counter(items[i][0] for i in order[:n])
        for name, size in (("A", 60), ("B", 30), ("C", 10)):
            assert abs(counts[name] - n * size / 100) <= 1.5, (n, counts)
        inner = collections.Counter(items[i][1] for i in order[:n] if items[i][0] == "A")
        assert abs(inner["x"] - 2 * inner["y"]) <= 2.5, (n, inner)   # 40 : 20 inside A
    assert sampling.spread_order(items, seed=0) == order              # the same on every call (sha256, not hash())
    assert sampling.spread_order(items, seed=1) != order


def test_spread_order_without_strata_is_a_seeded_permutation():
    items = {str(i): () for i in range(50)}
    order = sampling.spread_order(items, seed=3)
    assert sorted(order, key=int) == [str(i) for i in range(50)] and order != sorted(items)
    assert sampling.spread_order(items, seed=3) == order


def test_natural_order():
    assert sampling.file_order(["10", "2", "1", "Age.10", "Age.9", "Age.100"]) == \
        ["1", "2", "10", "Age.9", "Age.10", "Age.100"]


def test_bbq_limit_holds_every_category_present(data_dir, dataset_folder):
    dataset_folder("bbq")
    found, chosen = _chosen(data_dir, "bbq", limit=60)
    assert len(chosen) == 60
    present = collections.Counter(s.attrs["category"] for s in found)
    got = collections.Counter(s.attrs["category"] for s in chosen)
    assert set(got) == set(present)                                  # every category of this copy
    for category, n in present.items():                              # proportional, within 1.5 examples
        assert abs(got[category] - 60 * n / len(found)) <= 1.5, (category, got)
    conditions = collections.Counter((s.attrs["context_condition"], s.attrs["question_polarity"]) for s in chosen)
    assert len(conditions) == 4 and min(conditions.values()) >= 12   # the four cells, about 15 each
    assert len({(s.attrs["category"], s.attrs["question_index"]) for s in chosen}) >= 40  # spread over templates
    _, more = _chosen(data_dir, "bbq", limit=120)
    assert {s.stimulus_id for s in chosen} < {s.stimulus_id for s in more}   # a larger limit extends the sample


def test_crows_pairs_limit_takes_whole_pairs_over_every_bias_type(data_dir, dataset_folder):
    dataset_folder("crows_pairs")
    found, chosen = _chosen(data_dir, "crows-pairs", limit=150)
    pairs = collections.Counter(s.item_id for s in chosen)
    assert len(pairs) == 150 and set(pairs.values()) == {2}          # 150 whole pairs, both sentences
    types = collections.Counter(s.attrs["bias_type"] for s in found if s.attrs["sentence"] == "more")
    got = collections.Counter(s.attrs["bias_type"] for s in chosen if s.attrs["sentence"] == "more")
    assert set(got) == set(types) and len(types) == 9
    for kind, n in types.items():
        assert abs(got[kind] - 150 * n / 1508) <= 1.5, (kind, got)
    # the file order: the first 150 pairs of the file (lm-eval's --limit 150), lines 2..151
    _, first = _chosen(data_dir, "crows-pairs", limit=150, limit_order="file")
    assert sorted({s.attrs["line"] for s in first}) == list(range(2, 152))
    # another seed, another sample of the same spread
    _, other = _chosen(data_dir, "crows-pairs", limit=150, limit_seed=7)
    assert {s.item_id for s in other} != set(pairs)


def test_winopron_limit_counts_templates_and_shards_split_the_same_sample(data_dir, dataset_folder):
    dataset_folder("winopron")
    _, chosen = _chosen(data_dir, "winopron", limit=4)
    items = collections.Counter(s.item_id for s in chosen)
    assert len(items) == 4 and set(items.values()) == {10}            # 5 contexts x 2 orders each
    shards = [_chosen(data_dir, "winopron", limit=4, shard=f"{i}/3")[1] for i in range(3)]
    assert sorted(s.stimulus_id for part in shards for s in part) == sorted(s.stimulus_id for s in chosen)


def test_negation_limit_takes_root_items_with_their_four_conditions(data_dir, dataset_folder):
    dataset_folder("negation_bias_examples")
    _, chosen = _chosen(data_dir, "negation-examples", limit=2)
    roots = collections.Counter(s.attrs["item"] for s in chosen)
    assert len(roots) == 2 and set(roots.values()) == {4}


def test_the_order_and_seed_are_stored_with_the_run(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    collect(CollectConfig(dataset="winogender", db=str(db), data_dir=str(data_dir), limit=3, limit_seed=5),
            loaded=tiny_gpt2)
    with Warehouse.open(db, read_only=True) as wh:
        params = json.loads(wh.rows("SELECT params FROM runs")[0][0])
        items = {r[0] for r in wh.rows("SELECT DISTINCT s.item_id FROM sequence_scores q JOIN stimuli s "
                                       "USING (stimulus_id)")}
    assert (params["limit"], params["limit_order"], params["limit_seed"]) == (3, "spread", 5)
    _, expected = _chosen(data_dir, "winogender", limit=3, limit_seed=5)
    assert items == {s.item_id for s in expected} and len(items) == 3


def test_help_says_what_limit_counts_and_refuses_an_unknown_order():
    out = CliRunner().invoke(runners, ["collect", "--help"], terminal_width=200).output
    assert "Only N items, whole" in out and "--limit-order [spread|file]" in out and "--limit-seed" in out
    bad = CliRunner().invoke(runners, ["collect", "--dataset", "bbq", "--limit", "3", "--limit-order", "first"])
    assert bad.exit_code == 2 and "'first' is not one of 'spread', 'file'" in bad.output


@pytest.mark.parametrize("order", ["spread", "file"])
def test_limited_keeps_the_given_order_of_stimuli(order):
    class S:
        def __init__(self, item, k):
            self.item, self.k = item, k

    given = [S(str(i // 2), i) for i in range(20)]
    kept = sampling.limited(given, 3, item=lambda s: s.item, strata=lambda s: (), order=order)
    assert len(kept) == 6 and [s.k for s in kept] == sorted(s.k for s in kept)
    if order == "file":
        assert {s.item for s in kept} == {"0", "1", "2"}
