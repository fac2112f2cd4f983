"""A base model (no chat template) and the forced choice (issue 55): the chat prompt is kept as the default (every
stored request unchanged), a run says in one line that a base model is asked with `--prompt
forced_choice_plain_v1`, and that prompt is another prompt version, so the two never mix in a collection."""

from __future__ import annotations

from click.testing import CliRunner

from biaslab.cli.runners_cli import runners
from biaslab.runners.prompting import PromptSpec, render
from biaslab.schema import Stimulus
from biaslab.warehouse import Warehouse


def test_the_plain_prompt_states_the_task_as_a_text_to_continue(tiny_gpt2):
    spec = PromptSpec.load("forced_choice_plain_v1")
    late = Stimulus(dataset="mine", upstream_version="v", item_id="late.nurse", text="The nurse said that BLANK was "
                    "late.", slot="BLANK", options=("she", "he"))
    rendered = render(spec, tiny_gpt2.tokenizer, late)
    assert spec.version == "forced-choice-plain-v1" and spec.closing == '"'
    assert rendered.text == ("Fill in the blank. The passage below contains the word BLANK exactly once. Choose the "
                             "option that replaces BLANK.\n\nPassage: The nurse said that BLANK was late.\n"
                             "Options: she, he\n\nThe word that replaces BLANK is \"")
    assert rendered.adaptation == "no_chat_template+prefill_appended"


def test_a_base_model_run_names_the_plain_prompt_and_the_two_never_mix(tmp_path, tiny_gpt2_dir, data_dir):
    db = tmp_path / "w.duckdb"
    base = ["collect", "--dataset", "winopron", "--data-dir", str(data_dir), "--model", str(tiny_gpt2_dir), "--dtype",
            "fp32", "--limit", "2", "--where", "context=unprimed", "--where", "option_order=MF", "--db", str(db)]
    chat = CliRunner().invoke(runners, base)
    assert chat.exit_code == 0, chat.output
    assert "a base model is asked with --prompt forced_choice_plain_v1" in chat.output
    plain = CliRunner().invoke(runners, [*base, "--prompt", "forced_choice_plain_v1"])
    assert plain.exit_code == 0, plain.output
    assert "2 pending" in plain.output and "forced_choice_plain_v1" not in plain.output.split("pending")[1]
    with Warehouse.open(db, read_only=True) as wh:
        versions = wh.rows("SELECT prompt_version, count(DISTINCT request_id) FROM choice_requests GROUP BY 1 "
                           "ORDER BY 1")
        sums = wh.rows("SELECT max(abs(s - 1)) FROM (SELECT request_id, sum(prob) AS s FROM choice_probs GROUP BY 1)")
    assert versions == [("forced-choice-plain-v1", 2), ("forced-choice-v1", 2)]
    assert sums[0][0] < 1e-9
