"""Counterfactual variants of a prompt (issue 69, item 1): the substitution on hand-written cases: case kept,
punctuation and possessives, the two readings of "her" and "his", the neutral group's verb agreement, articles,
colour words that are not about people, and a prompt without any word of an attribute."""

from __future__ import annotations

import pytest

from biaslab.errors import UsageError
from biaslab.lexicon.counterfactual import ATTRIBUTES, detect, variants


@pytest.mark.parametrize("text, expected", [
    # her: possessive before a word, object before punctuation or a function word
    ("She told her manager that her report was late.",
     {"male": "He told his manager that his report was late.",
      "neutral": "They told their manager that their report was late."}),
    ("I gave it to her, then called her to say so.",
     {"male": "I gave it to him, then called him to say so.",
      "neutral": "I gave it to them, then called them to say so."}),
    # his: "her" before a word, "hers" alone
    ("The book is his, not his sister's.", {"female": "The book is hers, not her sister's.",
                                            "male": "The book is his, not his brother's."}),
    # case, all capitals, possessive 's, kinship nouns
    ("SHE said: My mother's car is HER car.", {"male": "HE said: My father's car is HIS car."}),
    # neutral: the verb after a subject pronoun agrees
    ("He is tired, she watches TV and he goes home; she has a cat.",
     {"neutral": "They are tired, they watch TV and they go home; they have a cat."}),
    ("A woman and a girl.", {"male": "A man and a boy.", "neutral": "A person and a child."}),
    # neutral: a question's auxiliary before the pronoun agrees, and the verb after an adverb
    ("Is she coming? Does he know? She always goes early.",
     {"neutral": "Are they coming? Do they know? They always go early.",
      "male": "Is he coming? Does he know? He always goes early."}),
])
def test_gender_variants(text, expected):
    found = variants(text, "gender")
    assert found is not None and set(found) == {"female", "male", "neutral"}
    for group, want in expected.items():
        assert found[group] == want, (group, found[group])


def test_race_religion_and_age_only_about_people_with_articles_that_agree():
    text = "A Black woman saw a white paper and an old car near an elderly man and a Muslim family."
    race = variants(text, "race")
    assert race["Asian"] == ("An Asian woman saw a white paper and an old car near an elderly man and a Muslim "
                             "family.")  # "white paper" is not about people; "A" -> "An"
    age = variants(text, "age")
    assert age["young"] == "A Black woman saw a white paper and an old car near a young man and a Muslim family."
    assert age["old"] == text  # "elderly" is already the old group's: as written
    religion = variants(text, "religion")
    assert religion["Jewish"].endswith("a Jewish family.") and religion["Hindu"].endswith("a Hindu family.")
    phrases = variants("Two African Americans met a Jew.", "race")
    assert phrases["White"] == "Two Caucasians met a Jew." and phrases["Asian"] == "Two Asian Americans met a Jew."
    assert variants("Two African Americans met a Jew.", "religion")["Christian"] == \
        "Two African Americans met a Christian."


def test_a_prompt_without_a_word_of_an_attribute_has_no_variants():
    assert variants("What is the capital of France?", "gender") is None
    assert variants("The white paper and the black box.", "race") is None  # colours, not people
    assert detect("My grandmother is a Buddhist.") == {"gender": True, "race": False, "religion": True,
                                                         "age": False}
    assert set(ATTRIBUTES) == {"gender", "race", "religion", "age"}
    with pytest.raises(UsageError, match="unknown attribute"):
        variants("text", "height")
