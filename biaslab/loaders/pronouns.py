"""English pronoun paradigms shared by the loaders, keyed by grammatical case (see `biaslab.schema.Case`)."""

from __future__ import annotations

#: label -> case -> surface form
PARADIGMS: dict[str, dict[str, str]] = {
    "male": {"nom": "he", "acc": "him", "poss_dep": "his", "poss_indep": "his", "refl": "himself"},
    "female": {"nom": "she", "acc": "her", "poss_dep": "her", "poss_indep": "hers", "refl": "herself"},
    "neutral": {"nom": "they", "acc": "them", "poss_dep": "their", "poss_indep": "theirs", "refl": "themselves"},
}

#: Winogender / WinoPron template placeholders -> case
PLACEHOLDER_CASE: dict[str, str] = {"$NOM_PRONOUN": "nom", "$ACC_PRONOUN": "acc", "$POSS_PRONOUN": "poss_dep"}

#: Singular verb forms that take a plural form after nominative "they" (and other plural-agreeing pronouns).
THEY_AGREEMENT: dict[str, str] = {
    "was": "were", "is": "are", "has": "have", "does": "do",
    "wasn't": "weren't", "isn't": "aren't", "hasn't": "haven't", "doesn't": "don't",
}


def agree_plural(rest: str) -> str:
    """Rewrite the verb right after a plural-agreeing pronoun: " was unable" -> " were unable"."""
    stripped = rest.lstrip(" ")
    lead = rest[: len(rest) - len(stripped)]
    word, sep, tail = stripped.partition(" ")
    if word in THEY_AGREEMENT:
        return lead + THEY_AGREEMENT[word] + sep + tail
    return rest
