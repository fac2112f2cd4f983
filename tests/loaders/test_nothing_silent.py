"""Issue 44, item 3: nothing accepted silently. A filler attribute present on some fillers of a slot and not on
others (a typo such as `ratign`) is refused unless declared `optional:`; two rows of a user's file for the same item
and condition with different texts are refused naming both lines; an option label typo in `orders` is refused."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.loaders.errors import DataError
from biaslab.loaders.user.dataset import from_spec
from biaslab.loaders.user.files import read_stimuli

SPEC = """
name: silent
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
orders: [[female, male], [male, %s]]
fillers:
  occupation: [{value: nurse, rating: 0.9}, {value: pilot, %s: 0.2}]
templates:
  - {id: late, text: "The {occupation} said that {pronoun} was late.", case: nom}
%s
"""


def test_a_misspelled_filler_attribute_is_refused(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC % ("female", "ratign", ""))
    with pytest.raises(DataError, match=r"s\.yaml: fillers\.occupation\[0\] \('nurse'\): no attribute 'ratign', "
                                        r"which fillers\.occupation\[1\] has; it has 'rating' instead \(a typo\?\)"):
        from_spec(spec)
    spec.write_text(SPEC % ("female", "rating", ""))
    assert len(from_spec(spec).stimuli) == 4
    spec.write_text(SPEC % ("female", "source", "optional: [rating, source]"))  # declared: each filler its own
    stimuli = from_spec(spec).stimuli
    assert {s.attrs.get("occupation_rating") for s in stimuli} == {0.9, None}


def test_an_order_with_a_label_typo_is_refused(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC % ("femal", "rating", ""))
    result = CliRunner().invoke(cli, ["data", "expand", str(spec)])
    assert result.exit_code == 1 and "orders: ['male', 'femal'] is not an order of the labels" in result.output


def test_two_rows_for_one_item_and_condition_are_refused(tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text("text,item_id,context,option_order,slot,options,option_labels,rating\n"
                    "The nurse said that BLANK was late.,a,unprimed,MF,BLANK,she|he,female|male,0.9\n"
                    "The nurse said that BLANK was tired.,b,unprimed,MF,BLANK,she|he,female|male,0.9\n"
                    "The nurse said that BLANK was tired.,a,unprimed,MF,BLANK,she|he,female|male,0.8\n")
    with pytest.raises(DataError, match=r"rows\.csv:4: field 'item_id': item 'a' already has a stimulus for the "
                                        r"same condition \(line 2"):
        read_stimuli(rows, "dups")
    rows.write_text(rows.read_text().replace(",a,unprimed,MF,BLANK,she|he,female|male,0.8", ",a,primed_f,MF,BLANK,"
                                             "she|he,female|male,0.8"))
    assert len(read_stimuli(rows, "dups")) == 3  # another context of the same item is another condition
