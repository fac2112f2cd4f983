"""Misersky et al. (2014) gender-perception norms for English role nouns, matched to singular role nouns.

Misersky, Gygax, Canal, Gabriel, Garnham, Braun, Chiarini, Englund, Hanulikova, Ottl, Valdrova, von Stockhausen and
Sczesny (2014), "Norms on the gender perception of role nouns in Czech, English, French, German, Italian, Norwegian,
and Slovak", Behavior Research Methods 46:841-871. The table used here is the third-party extraction from the
article's PDF in mllewis/IATLANG (`misersky_norms_clean.csv`; see the dataset folder's PROVENANCE.md).

This is an auxiliary table, not a stimulus dataset: the WinoPron loader attaches a rating to each stimulus.
`mean_gender_rating` lies in [0, 1] and is a *femininity* rating (higher = the role is perceived as held by more
women). Only the `english` rows are used.

Matching. The norm keys are plural role nouns ("accountants", "secretaries", "medical doctors"); the WinoPron
occupations and participants are singular ("accountant"). A singular noun matches when one of its regular or
irregular plurals (`plural_candidates`: +s, +es, y -> ies, f/fe -> ves, man -> men, person -> people / persons,
child -> children) is a norm key. When none is, a small explicit override table (`OVERRIDES`) maps the noun to one
norm key. The overrides are limited to (a) British spellings used by the norms (counsellors, dieticians,
protestors) and (b) a norm noun that names the same role as the WinoPron noun in every WinoPron template that uses
it (the hygienist templates are about teeth, so "dental hygienists"; the officer arrests protesters, so "police
officers"; and so on). Head-noun matching (e.g. "teacher" against "head teachers" / "nursery teachers") is not done:
it picks arbitrarily between differently rated sub-roles.

Counts. With this rule (`rule="biaslab"`, the default) 49 of WinoPron's 84 antecedent nouns match, which rates 234 of
its 360 templates. The contextual-invariance paper (Kumar et al.) rates 279. Its rule is not published; 279 is
reproduced exactly, and only, by adding substring matching: a noun that the rule above leaves unmatched is rated when
it occurs inside one or more norm keys (`rule="paper"`): administrator (database administrators), advisor (tax
advisors), educator (child educators), guest (hotel guests), inspector, instructor, planner (wedding planners),
psychologist, specialist (computer specialists), teacher, therapist, visitor (health visitors), and, by accident
of spelling, resident (presidents): 15 antecedent-case units of 3 templates, 234 + 45 = 279. The paper does not say
which rating a noun inside several keys gets; `rule="paper"` takes the mean of their ratings. Neither plural forms,
British/American spelling nor hyphenation explain the difference: they are all in the default rule already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import errors
from ..errors import UsageError
from .errors import DataError
from .readers import read_table
from .dataset import Upstream, github_raw

#: Where the norms live relative to the data directory (folder `misersky_norms/`).
NORMS_FOLDER = "misersky_norms"
NORMS_FILE = "misersky_norms_clean.csv"
NORMS_SHA256 = "632949cfc3d3086d1dd2c4f360bc665e6122a4c33b4e7acf20eb77d3189de39f"
LANGUAGE = "english"
#: Upstream of the norms file (mllewis/IATLANG at the pinned commit), for `biaslab data fetch`.
NORMS_SOURCE = Upstream(github_raw("mllewis/IATLANG", "451e273ec9adaf3ca6755108793f358958559c6c",
                                   "data/study2/misersky_norms_clean.csv"))

#: Irregular plurals (singular -> plural) tried before the regular rules.
IRREGULAR_PLURALS: dict[str, tuple[str, ...]] = {
    "child": ("children",),
    "person": ("people", "persons"),
    "woman": ("women",),
    "man": ("men",),
}

#: Singular role noun -> norm key, for nouns the inflection rules cannot match. Keep this table small: each entry
#: is a spelling variant or a norm noun that names exactly the role the WinoPron templates describe.
OVERRIDES: dict[str, str] = {
    # British spellings in the norms
    "counselor": "counsellors",
    "dietitian": "dieticians",
    "protester": "protestors",
    # same role, named differently in the norms (justified by the WinoPron templates that use the noun)
    "doctor": "medical doctors",         # the other "doctors" entry is "doctors of philosophy"
    "veterinarian": "vets",              # clipped form of the same word
    "hygienist": "dental hygienists",    # templates: flossing, dental examination, teeth
    "programmer": "computer programmers",  # templates: teaching to code
    "scientist": "research scientists",  # templates: lab, hiring an undergraduate assistant
    "officer": "police officers",        # templates: arresting a protester
    "broker": "stockbrokers",            # templates: stocks and portfolios
    "owner": "cat owners",               # templates: the veterinarian's client and their cat
}


#: Matching rules: "biaslab" (inflection, then overrides; the default) and "paper" (the same, then substring
#: matching, which reproduces the paper's 279 rated templates; see the module docstring).
RULES = ("biaslab", "paper")


@dataclass(frozen=True)
class NormMatch:
    """A singular role noun matched to a norm key: the rating and the rule that found it."""

    noun: str
    key: str      # the norm key; for a substring match, the matched keys joined with " | "
    rating: float
    rule: str     # "inflection", "override" or "substring"


def norms_path(data_dir: Path) -> Path:
    return Path(data_dir) / NORMS_FOLDER / NORMS_FILE


def load_norms(path: Path, language: str = LANGUAGE) -> dict[str, float]:
    """Norm key (plural role noun) -> mean_gender_rating for one language; bad rows raise `DataError`."""
    norms: dict[str, float] = {}
    for rec in read_table(path, ("occupation", "mean_gender_rating", "language"), multiline=False):
        if rec.get("language").strip().lower() != language:
            continue
        key = rec.get("occupation").strip().lower()
        raw = rec.get("mean_gender_rating")
        try:
            rating = float(raw)
        except ValueError:
            raise rec.error(f"not a number: {raw!r}", "mean_gender_rating") from None
        if not 0.0 <= rating <= 1.0:
            raise rec.error(f"rating {rating} outside [0, 1]", "mean_gender_rating")
        if key in norms:
            raise rec.error(f"role noun {key!r} appears twice for language {language!r}", "occupation")
        norms[key] = rating
    if not norms:
        raise DataError(path, f"no rows for language {language!r}", field="language")
    return norms


def plural_candidates(noun: str) -> list[str]:
    """Plural forms of a singular English noun, most likely first (irregular, then regular rules)."""
    noun = noun.strip().lower()
    out: list[str] = list(IRREGULAR_PLURALS.get(noun, ()))
    for stem, plurals in IRREGULAR_PLURALS.items():  # compounds: salesperson, chairman
        if noun.endswith(stem) and noun != stem:
            out += [noun[: -len(stem)] + p for p in plurals]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        out.append(noun + "es")
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in "aeiou":
        out.append(noun[:-1] + "ies")
    if noun.endswith("fe"):
        out.append(noun[:-2] + "ves")
    elif noun.endswith("f"):
        out.append(noun[:-1] + "ves")
    out.append(noun + "s")
    seen: dict[str, None] = dict.fromkeys(out)
    return list(seen)


def match_noun(noun: str, norms: Mapping[str, float], overrides: Mapping[str, str] = OVERRIDES,
               rule: str = "biaslab") -> NormMatch | None:
    """The norm entry for a singular role noun: inflection rules first, then the override table; with
    rule="paper", then substring matching (the noun inside one or more norm keys; rating = the mean of their
    ratings), the rule that reproduces the contextual-invariance paper's 279 rated templates.

    Parameters
    ----------
    noun : singular role noun ("teacher").
    norms : norm key (plural role noun) -> femininity rating (`load_norms`).
    overrides : singular noun -> norm key, tried after the inflections.
    rule : "biaslab" or "paper" (RULES).

    Returns
    -------
    NormMatch, or None when the noun matches nothing.
    """
    if rule not in RULES:
        raise UsageError(f"norm matching rule must be one of {', '.join(RULES)}, got {rule!r}")
    for plural in plural_candidates(noun):
        if plural in norms:
            return NormMatch(noun, plural, norms[plural], "inflection")
    key = overrides.get(noun.strip().lower())
    if key is not None:
        if key not in norms:
            raise errors.DataError(f"override {noun!r} -> {key!r}: no such role noun in the norms")
        return NormMatch(noun, key, norms[key], "override")
    if rule == "paper":
        needle = noun.strip().lower()
        keys = sorted(k for k in norms if needle in k)
        if keys:
            return NormMatch(noun, " | ".join(keys), sum(norms[k] for k in keys) / len(keys), "substring")
    return None


def match_nouns(nouns: Iterable[str], norms: Mapping[str, float], overrides: Mapping[str, str] = OVERRIDES,
                rule: str = "biaslab") -> tuple[dict[str, NormMatch], list[str]]:
    """(matched noun -> NormMatch, sorted unmatched nouns) for a set of singular role nouns (see `match_noun`)."""
    matched: dict[str, NormMatch] = {}
    unmatched: set[str] = set()
    for noun in nouns:
        m = match_noun(noun, norms, overrides, rule)
        if m is None:
            unmatched.add(noun)
        else:
            matched[noun] = m
    return matched, sorted(unmatched)
