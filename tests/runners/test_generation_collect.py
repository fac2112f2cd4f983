"""The misgendering `gen` protocol: prompts (pre / post / prompt), seeded continuations of exactly N tokens, stored
log-probabilities equal to a naive full forward pass, idempotence, and TANGO's probability templates."""

from __future__ import annotations

import json

import pytest
import torch

from biaslab import loaders
from biaslab.lexicon.pronoun_detection import vocabulary
from biaslab.runners.collect import CollectConfig, collect
from biaslab.runners.protocols.gen import gen_requests, generation_prompts
from biaslab.warehouse import Warehouse


def _config(tmp_path, data_dir, dataset, name="g.duckdb", **kw):
    return CollectConfig(dataset=dataset, protocol="gen", db=str(tmp_path / name), data_dir=str(data_dir), **kw)


def test_pre_and_post_prompts_of_a_slot_stimulus(data_dir, dataset_folder):
    dataset_folder("ruff")
    stimuli = sorted(loaders.get("ruff").load(data_dir), key=lambda s: s.item_id)
    for s in stimuli[:40]:
        (c1, pre), (c2, post) = generation_prompts(s)
        assert (c1, c2) == ("pre", "post")
        before = s.text[: s.text.index("BLANK")]
        assert pre == before.rstrip() and before.startswith(pre)
        assert post == s.fill(s.gold) and post.startswith(before + s.gold)
    assert {r.context for r in gen_requests(stimuli[:3])} == {"pre", "post"}
    assert len({r.request_id for r in gen_requests(stimuli[:3])}) == 6


def test_tango_prompt_is_capitalized(data_dir, dataset_folder):
    dataset_folder("tango")
    s = sorted(loaders.get("tango").load(data_dir), key=lambda s: s.item_id)[0]
    [(context, text)] = generation_prompts(s)
    assert context == "prompt" and text == s.text[0].upper() + s.text[1:] and text[0].isupper()


def test_gen_collect_stores_exact_length_seeded_samples(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("misgendered")
    kw = dict(limit=2, samples=3, seed=5, max_new_tokens=12)
    first = collect(_config(tmp_path, data_dir, "misgendered", **kw), loaded=tiny_gpt2)
    assert (first.requests, first.pending, first.added) == (4, 4, 12)
    again = collect(_config(tmp_path, data_dir, "misgendered", **kw), loaded=tiny_gpt2)
    assert (again.pending, again.added) == (0, 0)
    other = collect(_config(tmp_path, data_dir, "misgendered", "other.duckdb", **kw), loaded=tiny_gpt2)
    assert other.added == 12
    stops = {tiny_gpt2.tokenizer.eos_token_id}
    rows = []
    for name in ("g.duckdb", "other.duckdb"):
        with Warehouse.open(tmp_path / name, read_only=True) as wh:
            rows.append(wh.con.execute(
                "SELECT request_id, sample_index, seed, text, token_ids FROM samples ORDER BY ALL").fetchall())
            settings = wh.con.execute("SELECT DISTINCT temperature, top_k, top_p, max_new_tokens FROM samples")
            assert settings.fetchall() == [(1.0, 50, 0.95, 12)]
            requests = wh.con.execute("SELECT context, dataset, declared, pronoun_vocabulary, min_new_tokens "
                                      "FROM gen_requests ORDER BY ALL").fetchall()
            assert sorted({r[0] for r in requests}) == ["post", "pre"] and {r[4] for r in requests} == {12}
            assert json.loads(requests[0][3]) == json.loads(json.dumps(vocabulary("misgendered")))
    assert rows[0] == rows[1]  # same seed, same continuations in another warehouse
    for _, _, _, _, token_ids in rows[0]:
        assert len(token_ids) == 12 and not stops & set(token_ids)  # end of text suppressed (min_new_tokens)


def test_stored_logprobs_equal_a_naive_forward_pass(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    """Per-token log-probabilities of a continuation = log_softmax of one full forward pass over BOS + prompt +
    continuation (fp32), and the prompt is BOS + the prompt text's tokens."""
    dataset_folder("ruff")
    collect(_config(tmp_path, data_dir, "ruff", limit=1, samples=2, max_new_tokens=8), loaded=tiny_gpt2)
    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    with Warehouse.open(tmp_path / "g.duckdb", read_only=True) as wh:
        rows = wh.con.execute("SELECT g.prompt_text, s.token_ids, s.token_logprobs FROM samples s "
                              "JOIN gen_requests g USING (model_key, request_id)").fetchall()
    assert len(rows) == 4
    for prompt, token_ids, logprobs in rows:
        ids = [bos, *tok(prompt, add_special_tokens=False)["input_ids"]]
        full = torch.tensor([ids + list(token_ids)])
        with torch.no_grad():
            logp = torch.log_softmax(model(full).logits[0].float(), -1)
        expected = [float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(token_ids)]
        assert logprobs == pytest.approx(expected, abs=1e-4)


def test_gen_protocol_refuses_absurd_settings(tmp_path, data_dir):
    for kw, message in ((dict(samples=0), "--samples"), (dict(min_new_tokens=60), "--min-new-tokens"),
                        (dict(top_p=0.0), "--top-p"), (dict(temperature=0.0), "--temperature must be > 0")):
        with pytest.raises(ValueError, match=message):
            _config(tmp_path, data_dir, "ruff", **kw).validate()
    with pytest.raises(ValueError, match="not available"):
        CollectConfig(dataset="winogender", protocol="gen").validate()
    with pytest.raises(ValueError, match="--min-new-tokens does not apply to --protocol choice"):
        CollectConfig(dataset="winopron", min_new_tokens=3).validate()
    with pytest.raises(ValueError, match="--mode does not apply to --protocol prob"):
        CollectConfig(dataset="winogender", mode="sample").validate()


def test_protocol_defaults_follow_the_protocol():
    gen = CollectConfig(dataset="ruff", protocol="gen").settings()
    assert (gen.samples, gen.temperature, gen.top_k, gen.top_p, gen.max_new_tokens, gen.min_new_tokens) == \
        (5, 1.0, 50, 0.95, 50, 50)
    choice = CollectConfig(dataset="winopron").settings()
    assert (choice.samples, choice.temperature, choice.top_k, choice.top_p, choice.max_new_tokens) == \
        (200, 0.5, 40, 1.0, 6)
    tango = CollectConfig(dataset="tango")
    assert tango.protocol is None and tango.resolved_protocol() == "gen" and tango.settings().max_new_tokens == 50


def test_generation_lengths_are_part_of_the_collection_identity(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    """Another --min-new-tokens (or --max-new-tokens) is a new collection, not a silent no-op."""
    dataset_folder("ruff")
    first = collect(_config(tmp_path, data_dir, "ruff", limit=1, samples=2, max_new_tokens=6), loaded=tiny_gpt2)
    other = collect(_config(tmp_path, data_dir, "ruff", limit=1, samples=2, max_new_tokens=6, min_new_tokens=0),
                    loaded=tiny_gpt2)
    assert (first.added, other.pending, other.added) == (4, 2, 4)
    with Warehouse.open(tmp_path / "g.duckdb", read_only=True) as wh:
        assert wh.con.execute("SELECT min_new_tokens, count(*) FROM gen_samples GROUP BY ALL ORDER BY ALL"
                              ).fetchall() == [(0, 4), (6, 4)]


def test_families_outside_the_detector_vocabulary_are_refused(data_dir, dataset_folder):
    dataset_folder("tango")
    stimuli = [s for s in loaders.get("tango").load(data_dir, pronouns="all") if s.pronoun_set == "ey"][:1]
    with pytest.raises(ValueError, match="'ey' is not among the families"):
        gen_requests(stimuli)


class _SentencePieceLike:
    """Decodes like Llama 2's tokenizer: the leading space of the first decoded token is dropped."""

    pieces = {1: "▁Casey", 2: "▁and", 3: "▁he", 4: "▁is"}

    def decode(self, ids, **_):
        return "".join(self.pieces[i] for i in ids).replace("▁", " ").lstrip(" ")


def test_continuation_text_keeps_the_space_a_lone_decode_drops():
    from biaslab.runners.protocols.gen import continuation_text

    tok = _SentencePieceLike()
    assert tok.decode([3, 4]) == "he is"  # decoding the continuation alone glues it to the prompt
    assert continuation_text(tok, [1, 2], [3, 4]) == " he is"
