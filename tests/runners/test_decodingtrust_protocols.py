"""DecodingTrust's stereotype task on both protocols (issue 68): the dataset as registered (3,456 prompts, the forced
choice's two replies), the generated answers stored raw under the condition's system prompt (the prompt the model
saw checked by a naive forward pass, a chat template rendered as the model's own, a chat API sent both messages), and
the forced-choice variant's exact probabilities against brute-force enumeration and seeded sampling on SmolLM2."""

from __future__ import annotations

import csv
import math
from collections import Counter

import pytest
import torch

from biaslab.loaders import get
from biaslab.loaders.decodingtrust import OPTIONS, SLOT
from biaslab.runners.collect import CollectConfig, collect
from biaslab.runners.protocols.gen import dialogue_ids, dialogue_requests
from biaslab.runners.trie import INVALID
from biaslab.warehouse import Warehouse

FOLDER = "decodingtrust_stereotype"


@pytest.fixture(scope="module")
def stimuli(data_dir):
    if not (data_dir / FOLDER / "dataset" / "user_prompts.csv").is_file():
        pytest.skip(f"dataset folder {data_dir / FOLDER} is absent")
    return get("decodingtrust").load_verified(data_dir).stimuli


def test_the_dataset_is_3456_prompts_with_the_two_replies_and_sends_the_user_prompt_itself(stimuli, data_dir):
    info = get("decodingtrust")
    assert info.protocols == ("gen", "choice") and info.studies == ("decodingtrust",) and len(stimuli) == 3456
    assert all(s.options == OPTIONS and s.option_labels == ("agree", "disagree") and s.text.endswith(f"\n\n{SLOT}")
               for s in stimuli)
    with open(data_dir / FOLDER / "dataset" / "user_prompts.csv", encoding="utf-8", newline="") as f:
        upstream = [row["user_prompt"] for row in csv.DictReader(f)]
    requests = dialogue_requests(stimuli, max_new_tokens=150, min_new_tokens=0)
    assert [r.prompt_text for r in requests[::3]] == upstream  # each statement's three conditions in a row
    targeted = next(s for s in stimuli if s.attrs["condition"] == "targeted" and s.attrs["group"] == "Homosexuals")
    assert "You particularly hate homosexuals." in targeted.attrs["system_prompt"]
    assert len({r.request_id for r in requests}) == 3456


def test_generated_answers_are_stored_raw_and_the_model_saw_the_system_then_the_user_prompt(tmp_path, tiny_gpt2,
                                                                                           stimuli, data_dir):
    """The tiny GPT-2 has no chat template: the prompt is "system\\n\\nuser\\n" (as the forced-choice prompts
    render there); each stored token's log-probability equals one full forward pass over those ids."""
    db = tmp_path / "w.duckdb"
    result = collect(CollectConfig(dataset="decodingtrust", db=str(db), data_dir=str(data_dir), protocol="gen",
                                   limit=1, samples=2, max_new_tokens=6, seed=3), loaded=tiny_gpt2)
    assert (result.requests, result.added) == (3, 6)
    model, tok = tiny_gpt2.model, tiny_gpt2.tokenizer
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT g.context, g.prompt_text, s.attrs->>'system_prompt', x.token_ids, x.token_logprobs, "
                       "x.temperature, x.top_p FROM samples x JOIN gen_requests g USING (model_key, request_id) "
                       "JOIN stimuli s ON s.stimulus_id = x.stimulus_id")
    assert len(rows) == 6 and {r[0] for r in rows} == {"dialogue"} and {(r[5], r[6]) for r in rows} == {(1.0, 1.0)}
    for _, user, system, token_ids, logprobs, _, _ in rows:
        ids = tok(f"{system}\n\n{user}\n", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids + list(token_ids)])).logits[0].float(), -1)
        assert logprobs == pytest.approx([float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(token_ids)],
                                         abs=1e-4)


def test_a_chat_template_renders_the_system_and_user_messages(tiny_gpt2, stimuli):
    tok = tiny_gpt2.tokenizer
    request = dialogue_requests(stimuli[:1], 150, 0)[0]
    saved = tok.chat_template
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    try:
        expected = tok.apply_chat_template([{"role": "system", "content": request.system},
                                            {"role": "user", "content": request.prompt_text}], tokenize=False,
                                           add_generation_prompt=True)
        assert dialogue_ids(tok, request) == tok(expected, add_special_tokens=False)["input_ids"]
    finally:
        tok.chat_template = saved


def test_a_chat_api_gets_the_system_and_the_user_message(tmp_path, data_dir, stimuli):
    from click.testing import CliRunner

    from biaslab.cli.runners_cli import runners
    from chat_stub import ChatStub

    stub = ChatStub()
    result = CliRunner().invoke(runners, [
        "collect", "--backend", "openai-chat", "--base-url", stub.url, "--model", "stub-model", "--db",
        str(tmp_path / "w.duckdb"), "--yes", "--dataset", "decodingtrust", "--data-dir", str(data_dir), "--protocol",
        "gen", "--limit", "1", "--samples", "2", "--max-new-tokens", "20", "--top-k", "0"])
    assert result.exit_code == 0 and "6 samples added" in result.output, result.output
    sent = [b["messages"] for b in stub.bodies[1:]]
    assert len(sent) == 6 and all([m["role"] for m in messages] == ["system", "user"] for messages in sent)
    users = {m[1]["content"] for m in sent}  # one statement (a limit takes whole statements), its three conditions
    assert len(users) == 1 and users <= {s.text.removesuffix(f"\n\n{SLOT}") for s in stimuli}
    assert len({m[0]["content"] for m in sent}) == 3
    assert {b["temperature"] for b in stub.bodies[1:]} == {1.0}
    assert {b.get("max_completion_tokens", b.get("max_tokens")) for b in stub.bodies[1:]} == {20}


# ------------------------------------------------------------------------------ the forced-choice variant, SmolLM2
#: T = 1 as the generations; top_k 10 (not the default 64) keeps the brute force to a few hundred forwards
SETTINGS = dict(temperature=1.0, top_k=10, max_new_tokens=6)
SAMPLES = 200


@pytest.fixture(scope="module")
def choice(tmp_path_factory, data_dir, stimuli):
    from biaslab.engines.hf.loading import load_model
    from biaslab.engines.threads import allowed_cpus

    smollm = load_model("smollm2-135m", dtype="fp32", device="cpu")
    db = tmp_path_factory.mktemp("dt-choice") / "w.duckdb"
    common = dict(dataset="decodingtrust", db=str(db), data_dir=str(data_dir), protocol="choice", limit=2,
                  threads=allowed_cpus(), **SETTINGS)
    assert collect(CollectConfig(**common), loaded=smollm).added == 6
    assert collect(CollectConfig(mode="sample", samples=SAMPLES, seed=0, **common), loaded=smollm).added == \
        6 * SAMPLES
    with Warehouse.open(db, read_only=True) as wh:
        requests = wh.rows("SELECT r.request_id, r.prompt_text, s.options FROM choice_requests r JOIN stimuli s "
                           "USING (stimulus_id) WHERE r.mode = 'exact' ORDER BY r.request_id")
        exact: dict[str, dict[str, float]] = {}
        for rid, option, p in wh.rows("SELECT request_id, option, prob FROM choice_probs"):
            exact.setdefault(rid, {})[option] = p
        by_stimulus = dict(wh.rows("SELECT request_id, stimulus_id FROM choice_requests WHERE mode = 'exact'"))
        drawn: dict[str, Counter] = {}
        for stimulus_id, answer, valid in wh.rows("SELECT stimulus_id, answer, valid FROM samples"):
            drawn.setdefault(stimulus_id, Counter())[answer if valid else INVALID] += 1
    return smollm, requests, exact, {rid: drawn[sid] for rid, sid in by_stimulus.items()}, db


def test_exact_agree_and_disagree_equal_brute_force_enumeration(choice):
    from biaslab.engines.models import stop_token_ids
    from biaslab.runners.answers import AnswerParser
    from biaslab.runners.trie import UNRESOLVED
    from hf_explore import brute_force

    smollm, requests, exact, _, _ = choice
    model, tok = smollm.model, smollm.tokenizer
    stops = stop_token_ids(getattr(model, "generation_config", None), tok)
    assert len(requests) == 6
    for rid, prompt_text, options in requests[:2]:
        prompt = tok(prompt_text, add_special_tokens=False)["input_ids"]
        reference = brute_force(model, tok, prompt, AnswerParser(tuple(options), '"'), SETTINGS["temperature"],
                                SETTINGS["top_k"], SETTINGS["max_new_tokens"], stops)
        for outcome, value in reference.items():
            assert exact[rid][outcome] == pytest.approx(value, abs=1e-5), outcome
        assert exact[rid][UNRESOLVED] <= 1e-6
    assert max(exact[rid]["I agree"] + exact[rid]["I disagree"] for rid, _, _ in requests) > 0.01  # real mass


def test_seeded_replies_of_the_variant_fall_inside_the_exact_99_percent_intervals(choice):
    from hf_explore import prompts_inside_99_percent

    _, requests, exact, drawn, _ = choice
    assert prompts_inside_99_percent(requests, exact, drawn, SAMPLES) >= math.ceil(0.95 * len(requests)) - 1


def test_an_audit_plan_runs_both_protocols_and_the_leaderboard_shows_them(tmp_path, tiny_gpt2_dir, data_dir, stimuli):
    import json

    from click.testing import CliRunner

    from biaslab.cli.main import biaslab

    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: dt\ndb: w.duckdb\ndata_dir: {data_dir}\n"
                    f"models:\n  - {{name: tiny, model: {tiny_gpt2_dir}}}\n"
                    "datasets:\n  - {dataset: decodingtrust, protocol: choice, limit: 1}\n"
                    "  - {dataset: decodingtrust, protocol: gen, limit: 1,\n"
                    "     settings: {samples: 2, max_new_tokens: 3}}\n", encoding="utf-8")
    ran = CliRunner().invoke(biaslab, ["audit", str(plan)])
    assert ran.exit_code == 0 and "2 units, 2 computed" in ran.output, ran.output
    report = CliRunner().invoke(biaslab, ["audit", "report", str(plan), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output
    cells = json.loads((tmp_path / "rep" / "leaderboard.json").read_text(encoding="utf-8"))["cells"]
    shown = {(c["setting"].split("method=")[1].split()[0], c["measure"], c["group"]) for c in cells
             if c["study"] == "decodingtrust"}
    assert {("choice-exact", "agreement", "(all)"), ("gen", "agreement", "targeted"), ("gen", "neither", "(all)")} \
        <= shown
