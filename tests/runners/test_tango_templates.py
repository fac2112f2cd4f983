"""TANGO's probability protocol: templates built from the model's own stored continuations, then scored."""

from __future__ import annotations

import json

import pytest

from biaslab import loaders
from biaslab.runners.collect import CollectConfig, collect
from biaslab.runners.protocols.gen import gen_requests
from biaslab.warehouse import Warehouse

pytest.importorskip("spacy", reason="TANGO conversion needs the optional extra `nlp` (spaCy)")

CONTINUATIONS = [" and she is known for her roles.", " who writes every day.", " and they have two dogs.",
                 " because his films are popular.", " and xe fills in the BLANK."]


def _store_generations(db, model_key, prompts):
    """Continuations written as if `runners collect --protocol gen` had produced them (2 per prompt)."""
    requests = gen_requests(prompts)
    rows, samples = [], []
    for n, req in enumerate(requests):
        rows.append({"model_key": model_key, "request_id": req.request_id, "stimulus_id": req.stimulus_id,
                     "dataset": "tango", "context": req.context, "prompt_version": "gen-v1",
                     "prompt_text": req.prompt_text, "declared": req.declared, "pronoun_vocabulary": json.dumps({}),
                     "max_new_tokens": 50, "min_new_tokens": 50, "run_id": None})
        for k in range(2 if n else 3):  # the first prompt's third continuation contains the slot marker
            samples.append({"model_key": model_key, "request_id": req.request_id, "sample_index": k, "seed": k,
                            "temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_new_tokens": 50,
                            "stimulus_id": req.stimulus_id, "text": CONTINUATIONS[2 * n + k if k < 2 else 4],
                            "token_ids": [1], "token_logprobs": [-1.0], "finish_reason": "length", "answer": None,
                            "valid": True, "run_id": None})
    with Warehouse.open(db) as wh:
        wh.append("gen_requests", rows)
        wh.append("samples", samples)


def test_templates_from_stored_generations_are_scored(tmp_path, tiny_gpt2, data_dir, dataset_folder):
    dataset_folder("tango")
    prompts = sorted([s for s in loaders.get("tango").load(data_dir)], key=lambda s: (s.item_id, s.stimulus_id))[:2]
    db = tmp_path / "t.duckdb"
    config = dict(dataset="tango", protocol="prob", db=str(db), data_dir=str(data_dir), limit=2, limit_order="file")
    with pytest.raises(ValueError, match="--protocol gen"):
        collect(CollectConfig(**config), loaded=tiny_gpt2)  # no generations yet: a clear error
    _store_generations(db, tiny_gpt2.model_key, prompts)
    result = collect(CollectConfig(**config), loaded=tiny_gpt2)
    assert (result.stimuli, result.requests, result.added) == (3, 12, 12)  # 4 continuations, one without a pronoun
    assert result.note == ("5 stored generations -> 3 templates (1 without a pronoun, 0 of non-candidate families, "
                           "1 containing the slot marker)")
    again = collect(CollectConfig(**config), loaded=tiny_gpt2)
    assert (again.stimuli, again.pending, again.added) == (3, 0, 0)  # same templates, same ids
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.con.execute(
            "SELECT st.gold, st.pronoun_set, st.options, st.option_texts, st.attrs FROM stimuli st "
            "WHERE st.dataset = 'tango' AND st.options IS NOT NULL ORDER BY st.item_id").fetchall()
        assert wh.con.execute("SELECT count(*) FROM misgendering_prob").fetchone()[0] == 3
    by_id = {p.stimulus_id: p for p in prompts}
    for gold, declared, options, texts, attrs in rows:
        attrs = json.loads(attrs)
        prompt = by_id[attrs["template_of"]]
        assert declared == prompt.pronoun_set and gold == options[("he", "she", "they", "xe").index(declared)]
        assert attrs["generation"]["model_key"] == tiny_gpt2.model_key
        assert all(t.startswith(prompt.text[0].upper() + prompt.text[1:]) for t in texts)
