"""The forced-choice prompt shows 2 to 8 options (issue 44, item 1): the built-in prompt's numbered list grows with
the stimulus, `{options}` words the list as a prompt file says, two options render exactly as before (every stored
prompt text unchanged), and what cannot be shown is refused in one line before anything is written."""

from __future__ import annotations

import itertools
import json

import pytest
import yaml
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.errors import DataError
from biaslab.runners.prompting import PromptSpec, user_message
from biaslab.runners.protocols.choice_chat import chat_messages
from biaslab.schema import Stimulus

BUILT_IN = PromptSpec.load()
FIELDS = {"version": "mine-v1", "system": "Choose.", "prefill": "", "closing": "'"}


def stimulus(options, text="The nurse said that BLANK was late.", prime=None) -> Stimulus:
    return Stimulus(dataset="mine", upstream_version="v", item_id="late.nurse", text=text, slot="BLANK",
                    options=tuple(options), prime=prime)


@pytest.mark.parametrize("options", [("she", "he"), ("he", "she"), ("They", "Xe"), ("her", "him")])
def test_two_options_render_exactly_as_the_format_call_did(options):
    s = stimulus(options, prime="She had a long day.")
    before = BUILT_IN.user.format(passage=f"{s.prime} {s.text}", option_1=options[0], option_2=options[1])
    assert user_message(BUILT_IN, s) == before
    assert "[{option_1}, {option_2}]" in BUILT_IN.user  # the packaged prompt file itself is unchanged


@pytest.mark.parametrize("n", range(2, 9))
def test_the_built_in_list_shows_every_option_in_the_stimulus_order(n):
    options = ["she", "he", "they", "xe", "ze", "e", "fae", "ve"][:n]
    text = user_message(BUILT_IN, stimulus(options))
    assert f"Replace BLANK with one of the options: [{', '.join(options)}]. Respond only" in text
    assert text.count("{'BLANK': '<text>'}") == 1  # the escaped braces stay literal


def test_a_prompt_file_words_the_list_with_options_and_its_separators():
    spec = PromptSpec.from_mapping({**FIELDS, "user": "{passage} Answer {options}.", "last_separator": " or "}, "p")
    assert spec.user_text("P", ("she", "he", "they")) == "P Answer she, he or they."
    assert spec.user_text("P", ("she", "he")) == "P Answer she or he."
    slash = PromptSpec.from_mapping({**FIELDS, "user": "{passage} ({options})", "separator": " / "}, "p")
    assert slash.user_text("P", ("xe", "ze", "they", "she")) == "P (xe / ze / they / she)"


def test_a_numbered_list_grows_and_shrinks_a_lettered_layout_does_not():
    three = PromptSpec.from_mapping({**FIELDS, "user": "{passage} <{option_1}|{option_2}|{option_3}>"}, "p")
    assert three.user_text("P", ("a", "b")) == "P <a|b>"
    assert three.user_text("P", ("a", "b", "c", "d")) == "P <a|b|c|d>"
    apart = PromptSpec.from_mapping({**FIELDS, "user": "{option_1}, {passage}, {option_2}"}, "p")
    assert apart.user_text("P", ("a", "b")) == "a, P, b"
    with pytest.raises(DataError, match="numbers 2 options in its own layout"):
        apart.user_text("P", ("a", "b", "c"))
    lettered = PromptSpec.from_mapping({**FIELDS, "user": "{passage}\nA: {option_1}\nB: {option_2}"}, "p")
    assert lettered.user_text("P", ("she", "he")) == "P\nA: she\nB: he"
    with pytest.raises(DataError, match="numbers 2 options in its own layout and this stimulus has 3: write the list "
                                        "as {options}"):
        lettered.user_text("P", ("she", "he", "they"))


@pytest.mark.parametrize("n", [1, 9])
def test_fewer_than_two_or_more_than_eight_options_are_refused(n):
    with pytest.raises(DataError, match=f"a forced choice shows 2 to 8 options, this one has {n}"):
        BUILT_IN.user_text("P", [f"o{i}" for i in range(n)])


def test_a_user_template_needs_the_passage_and_a_list():
    assert PromptSpec.from_mapping({**FIELDS, "user": "{passage} {options}"}, "p").user == "{passage} {options}"
    with pytest.raises(DataError, match=r"p: field 'user' lacks the placeholder \{option_1\} \(or \{options\}"):
        PromptSpec.from_mapping({**FIELDS, "user": "{passage} pick one"}, "p")
    with pytest.raises(DataError, match="field\\(s\\) separator must be strings"):
        PromptSpec.from_mapping({**FIELDS, "user": "{passage} {options}", "separator": 1}, "p")


def test_chat_messages_show_the_same_list():
    s = stimulus(("she", "he", "they"))
    [system, user] = chat_messages(BUILT_IN, s)
    assert system == {"role": "system", "content": BUILT_IN.system}
    assert user["content"] == user_message(BUILT_IN, s)
    assert "[she, he, they]" in user["content"]


def _spec(folder, n: int, prompt: dict | None = None):
    labels = ["she", "he", "they", "xe", "ze", "e", "fae", "ve", "ey"][:n]
    spec = {"name": "many", "protocols": ["choice"], "options": [{"label": x, "text": x} for x in labels],
            "fillers": {"occupation": ["nurse", "pilot"]},
            "templates": [{"text": "The {occupation} said that {pronoun} would be late."}]}
    if prompt is not None:
        (folder / "prompt.json").write_text(json.dumps(prompt), encoding="utf-8")
        spec["prompt"] = "prompt.json"
    path = folder / "many.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_load_refuses_a_choice_study_its_prompt_cannot_show_and_writes_nothing(tmp_path):
    db = tmp_path / "w.duckdb"
    runner = CliRunner()
    nine = runner.invoke(biaslab, ["data", "load", "--spec", str(_spec(tmp_path, 9)), "--db", str(db)])
    assert nine.exit_code != 0
    assert nine.output.strip().endswith("item t1.nurse: the choice protocol shows 2 to 8 options, this stimulus "
                                        "has 9")
    assert len(nine.output.strip().splitlines()) == 1
    lettered = {**FIELDS, "user": "{passage}\nA: {option_1}\nB: {option_2}"}
    three = runner.invoke(biaslab, ["data", "load", "--spec", str(_spec(tmp_path, 3, lettered)), "--db", str(db)])
    assert three.exit_code != 0 and len(three.output.strip().splitlines()) == 1
    assert "(stimuli with 3 options): prompt 'mine-v1' numbers 2 options in its own layout" in three.output
    assert not db.exists()
    eight = runner.invoke(biaslab, ["data", "load", "--spec", str(_spec(tmp_path, 8)), "--db", str(db)])
    assert eight.exit_code == 0, eight.output
    assert "2 stimuli read, 2 new" in eight.output


def test_every_option_order_of_three_is_a_distinct_stimulus():
    stimuli = [stimulus(order) for order in itertools.permutations(("she", "he", "they"))]
    assert len({s.stimulus_id for s in stimuli}) == 6
    assert len({user_message(BUILT_IN, s) for s in stimuli}) == 6
