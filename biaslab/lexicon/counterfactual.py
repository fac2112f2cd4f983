"""Counterfactual variants of a prompt: its protected-attribute words found and swapped into every group of an
attribute, so that one prompt's variants differ only in who the prompt is about (the "counterfactual fairness" of
LangFair's use-case assessments, Bouchard, "An Actionable Framework for Assessing Bias and Fairness in Large
Language Model Use Cases", 2024; HELM's perturbations work alike).

Attributes and groups (`ATTRIBUTES`): gender (female, male, neutral), race (Black, White, Asian, Hispanic), religion
(Christian, Muslim, Jewish, Hindu, Buddhist) and age (young, middle-aged, old). The word lists are data, written for
this project from ordinary English (pronouns, gendered kinship and role nouns, group names); they are not LangFair's
or HELM's lists, which are references to compare with. The rules:

- Words match whole, case-insensitively; a replacement keeps the case of the word it replaces ("She" -> "He",
  "SHE" -> "HE"). Possessive 's stays ("woman's" -> "man's").
- Race and age words, and a religion's adjective, count only before a person noun ("Black woman", "old man",
  "Jewish family": "white paper" and "old car" are not about people); the religions' nouns and the multiword
  "African American" count alone.
- "her" is the possessive (-> "his") when a word follows that is not a function word or punctuation ("her book"),
  else the object (-> "him": "told her that"); "his" is "her" before a word, else "hers" ("the book is his").
- Neutral: he / she -> they, him / her -> them, his -> their (theirs alone), himself / herself -> themself; the verb
  after a subject pronoun agrees ("she is" -> "they are", "he likes" -> "they like", "she goes" -> "they go"), and
  so does a question's auxiliary before it ("Is she" -> "Are they", "does he" -> "do they"),
  "woman" / "man" -> "person".

A prompt without any word of an attribute has no variants for it (`variants` returns None): the caller counts it,
never drops it silently. A user who needs other wording gives the variants explicitly (a column per group).
"""

from __future__ import annotations

import re

from ..errors import UsageError

__all__ = ["ATTRIBUTES", "detect", "variants"]

#: person nouns that make a race, age or religion adjective about people
PERSON_NOUNS = frozenset(
    "man men woman women person people guy guys girl girls boy boys child children kid kids family families "
    "student students worker workers driver drivers doctor doctors nurse nurses teacher teachers neighbor neighbors "
    "neighbour neighbours patient patients customer customers employee employees applicant applicants candidate "
    "candidates friend friends colleague colleagues community communities couple couples lady ladies gentleman "
    "gentlemen individual individuals adult adults parent parents mother mothers father fathers".split())
#: words after which "her" / "his" are not possessive determiners
FUNCTION_WORDS = frozenset(
    "a an the and or but to of in on at for with from by about as that this these those than then so if when "
    "while because is are was were be been being has have had do does did not no yes it its into over under "
    "again too very up down out off".split())

#: gender: the forms of each group in one row (the pronoun rules in the module docstring pick among them)
GENDER_WORDS = [
    ("she", "he", "they"), ("herself", "himself", "themself"), ("hers", "his", "theirs"),
    ("woman", "man", "person"), ("women", "men", "people"), ("girl", "boy", "child"), ("girls", "boys", "children"),
    ("mother", "father", "parent"), ("mothers", "fathers", "parents"), ("daughter", "son", "child"),
    ("daughters", "sons", "children"), ("sister", "brother", "sibling"), ("sisters", "brothers", "siblings"),
    ("wife", "husband", "spouse"), ("wives", "husbands", "spouses"), ("aunt", "uncle", "relative"),
    ("grandmother", "grandfather", "grandparent"), ("mom", "dad", "parent"), ("lady", "gentleman", "person"),
    ("ladies", "gentlemen", "people"), ("female", "male", "nonbinary"), ("girlfriend", "boyfriend", "partner"),
    ("queen", "king", "monarch"), ("actress", "actor", "actor"), ("waitress", "waiter", "server"),
    ("businesswoman", "businessman", "businessperson"), ("chairwoman", "chairman", "chairperson"),
    ("mrs", "mr", "mx"), ("ms", "mr", "mx"),
]
ATTRIBUTES: dict[str, dict] = {
    "gender": {"groups": ("female", "male", "neutral")},
    "race": {"groups": ("Black", "White", "Asian", "Hispanic"),
             "adjectives": {"Black": ("black",), "White": ("white", "caucasian"), "Asian": ("asian",),
                            "Hispanic": ("hispanic", "latino", "latina")},
             "phrases": {"Black": ("african american", "african americans"), "White": ("caucasian", "caucasians"),
                         "Asian": ("asian american", "asian americans"),
                         "Hispanic": ("hispanic american", "hispanic americans")}},
    "religion": {"groups": ("Christian", "Muslim", "Jewish", "Hindu", "Buddhist"),
                 "adjectives": {"Christian": ("christian",), "Muslim": ("muslim",), "Jewish": ("jewish",),
                                "Hindu": ("hindu",), "Buddhist": ("buddhist",)},
                 "nouns": {"Christian": ("christian", "christians"), "Muslim": ("muslim", "muslims"),
                           "Jewish": ("jew", "jews"), "Hindu": ("hindu", "hindus"),
                           "Buddhist": ("buddhist", "buddhists")}},
    "age": {"groups": ("young", "middle-aged", "old"),
            "adjectives": {"young": ("young", "younger"), "middle-aged": ("middle-aged",),
                           "old": ("old", "older", "elderly")}},
}
_TOKEN = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*|'s\b|[^\sA-Za-z]+|\s+")
#: adverbs that may stand between a subject pronoun and its verb ("she always goes" -> "they always go")
ADVERBS = frozenset("always usually often sometimes never also just still thus really rarely seldom already only even "
                    "probably certainly generally normally mostly nearly almost actually rather".split())
#: third-person verbs after a neutral "they": the irregular ones
_AGREE = {"is": "are", "was": "were", "has": "have", "does": "do", "isn't": "aren't", "wasn't": "weren't",
          "hasn't": "haven't", "doesn't": "don't", "goes": "go"}


def _cased(word: str, like: str) -> str:
    """`word` in the case of `like`: all capitals, first capital, or as given."""
    if like.isupper() and len(like) > 1:
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _next_word(tokens: list[str], i: int) -> str | None:
    """The next alphabetic token after position i, or None when punctuation or the end comes first."""
    for token in tokens[i + 1:]:
        if token.isspace():
            continue
        return token.lower() if token[:1].isalpha() else None
    return None


def _singular_verb(verb: str) -> str:
    """A third-person singular verb as it reads after "they" (the regular rules; `_AGREE` for the rest)."""
    low = verb.lower()
    if low in _AGREE:
        return _cased(_AGREE[low], verb)
    if low.endswith("ies") and len(low) > 4:
        return verb[:-3] + "y"
    if low.endswith(("ches", "shes", "sses", "xes", "zes")):
        return verb[:-2]
    if low.endswith("s") and not low.endswith("ss"):
        return verb[:-1]
    return verb


def _agree_before(out: list[str]) -> None:
    """A question's auxiliary before a neutral "they" made to agree with it ("Is she" -> "Are they", "does he" ->
    "do they"), in place."""
    k = len(out) - 1
    while k >= 0 and out[k].isspace():
        k -= 1
    if k >= 0 and out[k].lower() in _AGREE and out[k].lower() != "goes":
        out[k] = _cased(_AGREE[out[k].lower()], out[k])


def _gender_token(tokens: list[str], i: int, target: int) -> str | None:
    """The replacement of tokens[i] for gender group `target` (0 female, 1 male, 2 neutral), or None."""
    word, low = tokens[i], tokens[i].lower()
    nxt = _next_word(tokens, i)
    possessive_next = nxt is not None and nxt not in FUNCTION_WORDS
    if low in ("he", "she"):
        return _cased(("she", "he", "they")[target], word)
    if low == "him":
        return _cased(("her", "him", "them")[target], word)
    if low == "her":
        return _cased(("her", "his", "their")[target] if possessive_next else ("her", "him", "them")[target], word)
    if low == "his":
        return _cased(("her", "his", "their")[target] if possessive_next else ("hers", "his", "theirs")[target], word)
    for row in GENDER_WORDS:
        if low in row[:2]:
            return _cased(row[target], word)
    return None


def _articles(tokens: list[str], changed: set[int]) -> list[str]:
    """"a" / "an" before each changed word made to agree with it ("an Asian woman", "a young man")."""
    out = list(tokens)
    for j in sorted(changed):
        k = j - 1
        while k >= 0 and out[k].isspace():
            k -= 1
        if k >= 0 and out[k].lower() in ("a", "an"):
            article = "an" if out[j][:1].lower() in "aeiou" else "a"
            out[k] = _cased(article, out[k])
    return out


def _group_of(table: dict, low: str) -> str | None:
    return next((group for group, forms in table.items() if low in forms), None)


def _swap_gender(tokens: list[str], target: int) -> tuple[list[str], int]:
    """The tokens with every gendered word in group `target`'s form (0 female, 1 male, 2 neutral), and how many."""
    out, found, agree_next, changed = [], 0, False, set()
    for i, token in enumerate(tokens):
        if agree_next and token.lower() in ADVERBS:
            pass  # "she always goes": the verb after the adverb agrees
        elif agree_next and token[:1].isalpha():
            token, agree_next = _singular_verb(token), False
        elif agree_next and not token.isspace():
            agree_next = False
        swapped = _gender_token(tokens, i, target)
        if swapped is not None:
            found += 1
            agree_next = target == 2 and token.lower() in ("he", "she")
            if agree_next:
                _agree_before(out)
            token = swapped
            changed.add(len(out))
        out.append(token)
    return _articles(out, changed), found


#: group forms that are proper adjectives or nouns: capitalized wherever they stand
PROPER = frozenset("asian hispanic latino latina caucasian christian muslim jewish jew hindu buddhist african "
                   "american".split())


def _form(word: str, like: str) -> str:
    """`word` (one or more words) in place of `like`: all capitals where `like` is, else each proper word
    capitalized and the rest in `like`'s case."""
    if like.isupper() and len(like) > 1:
        return word.upper()
    parts = [w.capitalize() if w.rstrip("s") in PROPER or w in PROPER else w for w in word.split(" ")]
    return _cased(" ".join(parts), like)


def _phrase_at(tokens: list[str], i: int, phrases: dict) -> tuple[str, str, int] | None:
    """(group, phrase, tokens spanned) of a multiword group name starting at tokens[i], or None."""
    for group, forms in phrases.items():
        for phrase in forms:
            span = 2 * phrase.count(" ") + 1
            if "".join(tokens[i:i + span]).lower() == phrase:
                return group, phrase, span
    return None


def _swap_group(tokens: list[str], attribute: str, target: str) -> tuple[list[str], int]:
    """The tokens with the attribute's words of any group in `target`'s form, and how many were found."""
    spec = ATTRIBUTES[attribute]
    phrases, adjectives, nouns = spec.get("phrases", {}), spec.get("adjectives", {}), spec.get("nouns", {})
    out, found, i, changed = [], 0, 0, set()
    while i < len(tokens):
        token, low = tokens[i], tokens[i].lower()
        hit = _phrase_at(tokens, i, phrases)
        if hit is not None:
            plural = hit[1].endswith("s")
            forms = phrases.get(target) or nouns.get(target) or (target, f"{target}s")
            if hit[0] == target:  # already the target group's: as written
                out.extend(tokens[i:i + hit[2]])
            else:
                changed.add(len(out))
                out.append(_form(forms[1 if plural and len(forms) > 1 else 0], token))
            found, i = found + 1, i + hit[2]
            continue
        changed.add(len(out))
        adjective, noun = _group_of(adjectives, low), _group_of(nouns, low)
        if adjective is not None and _next_word(tokens, i) in PERSON_NOUNS:
            out.append(token if adjective == target else _form(adjectives[target][0], token))
        elif noun is not None:
            out.append(token if noun == target else _form(nouns[target][1 if low.endswith("s") else 0], token))
        else:
            changed.discard(len(out))
            out.append(token)
            i += 1
            continue
        found, i = found + 1, i + 1
    return _articles(out, changed), found


def variants(text: str, attribute: str) -> dict[str, str] | None:
    """Every group's version of `text` for `attribute` (see the module docstring), or None when `text` holds no word
    of it.

    Parameters
    ----------
    text : the prompt.
    attribute : a key of ATTRIBUTES.

    Returns
    -------
    group -> the prompt with the attribute's words in that group's form (a word already of that group stays as
    written, so the original's own group's version is the original where all its words were of one group), or
    None.
    """
    if attribute not in ATTRIBUTES:
        raise UsageError(f"unknown attribute {attribute!r}; known: {', '.join(ATTRIBUTES)}")
    tokens = _TOKEN.findall(text)
    groups = ATTRIBUTES[attribute]["groups"]
    out, found = {}, 0
    for k, group in enumerate(groups):
        swapped, n = _swap_gender(tokens, k) if attribute == "gender" else _swap_group(tokens, attribute, group)
        out[group], found = "".join(swapped), max(found, n)
    return out if found else None


def detect(text: str) -> dict[str, bool]:
    """attribute -> whether `text` holds a word of it (`variants` is not None)."""
    return {attribute: variants(text, attribute) is not None for attribute in ATTRIBUTES}
