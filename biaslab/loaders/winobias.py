"""WinoBias (Zhao et al. 2018, "Gender Bias in Coreference Resolution: Evaluation and Debiasing Methods", NAACL),
upstream `WinoBias/wino/data/` layout (uclanlp/corefBias).

Upstream: 8 files `{pro,anti}_stereotyped_type{1,2}.txt.{dev,test}`, 396 lines each, `<index> <sentence>`, the two
coreferent mentions (the referent occupation and the pronoun) in `[...]`. Line i of a pro file and line i of the
matching anti file are the same sentence with the pronoun's gender swapped.

Mapping (decided here): **one stimulus per pro/anti line pair** = (type, split, line), so 2 types x 2 splits x 396
= 1,584 stimuli, 792 per type (`subset="type1"` / `"type2"`; `None` or `"all"` gives both). One line per stimulus
would give 3,168 with every sentence twice; the pair is the minimal pair a scoring runner needs.

* Brackets are removed from both lines. The **slot** is the first word (`\\w+` token) where the two bracket-free
  lines differ; it must be a gendered pronoun in both, of opposite genders. `text` is the pro line with that word
  replaced by `BLANK`.
* `options` = (male form, female form) in the slot's case, derived from the pair (he/she nom, him/her acc, his/her
  poss_dep, his/hers poss_indep, himself/herself refl); capitalized when the slot word is; `option_labels` =
  ("male", "female").
* `gold` = the option of the **pro-stereotypical** line, and `stereotype` = "pro" on every stimulus: it says which
  reading `gold` encodes. The anti reading is the other option; attrs `pro_option`, `pro_label`, `anti_option`,
  `anti_label` record both readings.
* When the two lines also differ after the slot (a second pronoun, as in "[he] needed to cut [his] hair", or an
  upstream wording difference), `option_texts` holds the two bracket-free lines, so filling each option reproduces
  the raw pro and anti lines exactly.
* `occupation` = the bracketed non-pronoun mention without its determiner ("[The developer]" -> "developer");
  `participant` = the other occupation of `male_occupations.txt` / `female_occupations.txt` named in the sentence
  (None when that is not unique); attrs `occupation_gender` = the list the referent occupation is on.
  A pro line whose pronoun gender differs from its occupation's list is a `DataError`.
* attrs also hold `type` (1/2), `split` (dev/test), `line` (1-based, equal to the upstream index), `slot_marked`
  (the slot word was the bracketed pronoun; false for one type-2 pair where the first differing pronoun is an
  unbracketed "his").

Upstream anomalies (kept, not dropped, so the counts stay 396 per file; 9 of 1,584 pairs have attrs `anomaly` set):
* 8 pairs differ before the pronoun: typos ("card"/"cared", "[ physician]"/"[the physician]", "greeted with"/
  "greeted", "the"/"an", "because of [she]"/"because [he]"), a pro line with a stray "he" (type1.test.296), and two
  type-2 test pairs whose anti line is a different sentence (type2.test.382, .384). Their stimulus is built from the
  pro line alone: the slot is its first bracketed pronoun, the case comes from that pronoun (disambiguated by the
  anti line's first bracketed pronoun), plain filling gives the anti reading, and attrs `anti_line` keeps the raw
  anti line; filling the anti option does NOT reproduce it.
* 1 pair uses pronouns of different cases ("demanded [her] pay" / "demanded [he] pay", type2.dev.171): the options
  are the two words as written, ("he", "her"), `grammatical_case` is None, and both lines are reproduced exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..schema import Stimulus
from .errors import DataError
from ..lexicon.pronouns import BINARY, FORM_CASES, FORM_GENDER, PAIR_CASE, PARADIGMS, capitalize
from .readers import files_digest, read_lines
from .dataset import DatasetInfo, Upstream, github_raw

SLOT = "BLANK"
LABELS = BINARY
TYPES = (1, 2)
SPLITS = ("dev", "test")
SUBSETS = {"all": TYPES, "type1": (1,), "type2": (2,)}
OCCUPATION_LISTS = {"male": "data/male_occupations.txt", "female": "data/female_occupations.txt"}

LINE_RE = re.compile(r"^(\d+) (.*\S)\s*$")
BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")
TOKEN_RE = re.compile(r"\w+|\W")
DETERMINER_RE = re.compile(r"^(the|a|an)\s+", re.IGNORECASE)


def data_file(stereotype: str, wb_type: int, split: str) -> str:
    return f"data/{stereotype}_stereotyped_type{wb_type}.txt.{split}"


@dataclass(frozen=True)
class Line:
    """One upstream line: its location, the bracket-free sentence and the bracketed spans in that sentence."""

    file: Path
    number: int
    raw: str
    plain: str
    spans: tuple[tuple[int, int], ...]  # [start, end) of each bracket's content in `plain`

    def mentions(self) -> list[tuple[str, int, int]]:
        return [(self.plain[s:e], s, e) for s, e in self.spans]

    def error(self, message: str, field: str | None = None) -> DataError:
        return DataError(self.file, message, line=self.number, field=field)


def parse_line(path: Path, number: int, raw: str) -> Line:
    """`<index> <sentence with [mentions]>` -> Line; the index must equal the 1-based line number."""
    m = LINE_RE.match(raw)
    if not m:
        raise DataError(path, f"expected '<index> <sentence>', got {raw!r}", line=number, field="sentence")
    if int(m.group(1)) != number:
        raise DataError(path, f"index {m.group(1)} does not match line number {number}", line=number, field="index")
    sentence = m.group(2)
    plain, spans, pos = [], [], 0
    for b in BRACKET_RE.finditer(sentence):
        plain.append(sentence[pos:b.start()])
        start = sum(map(len, plain))
        plain.append(b.group(1))
        spans.append((start, start + len(b.group(1))))
        pos = b.end()
    plain.append(sentence[pos:])
    text = "".join(plain)
    if "[" in text or "]" in text:
        raise DataError(path, f"unbalanced brackets in {sentence!r}", line=number, field="sentence")
    if len(spans) < 2:
        raise DataError(path, f"expected two bracketed mentions, found {len(spans)}", line=number, field="sentence")
    return Line(path, number, raw, text, tuple(spans))


def read_data_lines(path: Path) -> list[Line]:
    """The parsed lines of one data file; an empty line, an exact repeat of an earlier line and a last line without
    a line break after it (a cut file) are errors (`readers.read_lines`)."""
    lines = []
    for i, raw in read_lines(path):
        if not raw.strip():
            raise DataError(path, "empty line", line=i)
        lines.append(parse_line(path, i, raw))
    return lines


def read_occupations(folder: Path) -> dict[str, str]:
    """occupation -> "male" / "female" (the upstream stereotype lists)."""
    occupations: dict[str, str] = {}
    first: dict[str, str] = {}
    for label, rel in OCCUPATION_LISTS.items():
        for i, name in read_lines(folder / rel):
            if name.strip():
                if name.strip() in occupations:
                    raise DataError(folder / rel, f"occupation {name.strip()!r} listed twice (first on "
                                                  f"{first[name.strip()]})", line=i)
                occupations[name.strip()] = label
                first[name.strip()] = f"line {i} of {rel}"
    return occupations


def tokens(text: str) -> list[tuple[str, int]]:
    """Word and single non-word character tokens with their start offsets (concatenation gives `text`)."""
    return [(m.group(), m.start()) for m in TOKEN_RE.finditer(text)]


def first_difference(a: str, b: str) -> tuple[str, str, int, int] | None:
    """The first differing tokens of a and b with their offsets; None when the texts are token-identical."""
    ta, tb = tokens(a), tokens(b)
    for (wa, sa), (wb, sb) in zip(ta, tb):
        if wa != wb:
            return wa, wb, sa, sb
    if len(ta) != len(tb):  # one text is a prefix of the other: the extra token against nothing
        n = min(len(ta), len(tb))
        return (ta[n][0] if len(ta) > n else ""), (tb[n][0] if len(tb) > n else ""), len(a), len(b)
    return None


def pronoun_options(case: str, surface: str) -> tuple[str, str]:
    """(male, female) forms of `case`, capitalized like `surface`."""
    forms = tuple(PARADIGMS[label][case] for label in LABELS)
    if surface[:1].isupper():
        forms = tuple(capitalize(f) for f in forms)
    return forms  # type: ignore[return-value]


def referent(pro: Line, occupations: dict[str, str]) -> str:
    """The bracketed occupation (the first bracketed mention that is not a pronoun), determiner removed."""
    for mention, _, _ in pro.mentions():
        if mention.strip().lower() not in FORM_GENDER:
            name = DETERMINER_RE.sub("", mention.strip())
            if name not in occupations:
                raise pro.error(f"bracketed mention {mention!r} is not a WinoBias occupation", "sentence")
            return name
    raise pro.error("no bracketed occupation", "sentence")


def other_occupation(text: str, occupation: str, occupations: dict[str, str]) -> str | None:
    """The one other listed occupation named in `text`, or None when there is not exactly one."""
    found = {o for o in occupations if o != occupation and re.search(rf"\b{re.escape(o)}\b", text, re.IGNORECASE)}
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class Slot:
    start: int
    word: str                    # the pro line's word in the slot
    case: str | None             # None when the two lines use pronouns of different cases
    options: tuple[str, str]     # (male, female)
    option_texts: tuple[str, str] | None
    anomaly: str | None


def regular_slot(pro: Line, anti: Line) -> Slot | str:
    """The slot of a clean minimal pair, or the reason the pair is anomalous."""
    diff = first_difference(pro.plain, anti.plain)
    if diff is None:
        return "pro and anti lines are identical"
    wp, wa, sp, sa = diff
    gp, ga = FORM_GENDER.get(wp.lower()), FORM_GENDER.get(wa.lower())
    if gp is None or ga is None or gp == ga:
        return f"lines first differ in {wp!r} / {wa!r}, not in a he/she pronoun pair"
    male, female = (wp, wa) if gp == "male" else (wa, wp)
    case = PAIR_CASE.get((male.lower(), female.lower()))
    options = pronoun_options(case, wp) if case else (male, female)
    anomaly = None if case else f"pronouns {male!r} / {female!r} are of different cases; options are the two words"
    after_pro, after_anti = pro.plain[sp + len(wp):], anti.plain[sa + len(wa):]
    texts = None
    if after_pro != after_anti:
        texts = (pro.plain, anti.plain) if gp == "male" else (anti.plain, pro.plain)
    return Slot(sp, wp, case, options, texts, anomaly)


def fallback_slot(pro: Line, anti: Line, reason: str) -> Slot:
    """Anomalous pair: the pro line's first bracketed pronoun; its case, disambiguated by the anti line."""
    pro_pronouns = [(m, s) for m, s, _ in pro.mentions() if m.lower() in FORM_GENDER]
    anti_pronouns = [m for m, _, _ in anti.mentions() if m.lower() in FORM_GENDER]
    if not pro_pronouns:
        raise pro.error("no bracketed pronoun", "sentence")
    word, start = pro_pronouns[0]
    cases = set(FORM_CASES[word.lower()])
    if len(cases) > 1 and anti_pronouns:
        other = anti_pronouns[0].lower()
        pair = (word.lower(), other) if FORM_GENDER[word.lower()] == "male" else (other, word.lower())
        cases &= {PAIR_CASE[pair]} if pair in PAIR_CASE else cases
    if cases == {"poss_dep", "poss_indep"}:  # a lone "his": the dependent possessive is the common reading
        cases = {"poss_dep"}
    if len(cases) != 1:
        raise pro.error(f"cannot tell the case of {word!r} ({sorted(cases)})", "sentence")
    case = cases.pop()
    return Slot(start, word, case, pronoun_options(case, word), None, reason)


def pair_stimulus(pro: Line, anti: Line, wb_type: int, split: str, version: str,
                  occupations: dict[str, str]) -> Stimulus:
    slot = regular_slot(pro, anti)
    if isinstance(slot, str):
        slot = fallback_slot(pro, anti, slot)
    text = pro.plain[:slot.start] + SLOT + pro.plain[slot.start + len(slot.word):]
    options = slot.options
    pro_label = FORM_GENDER[slot.word.lower()]
    pro_index = LABELS.index(pro_label)
    occupation = referent(pro, occupations)
    if occupations[occupation] != pro_label:  # what "pro-stereotypical" means: the pronoun matches the list
        raise pro.error(f"pro-stereotypical pronoun {slot.word!r} does not match the {occupations[occupation]} "
                        f"occupation {occupation!r}", "sentence")
    spans = {s for s, _ in pro.spans}
    return Stimulus(
        dataset="winobias",
        upstream_version=version,
        item_id=f"type{wb_type}.{split}.{pro.number}",
        text=text,
        slot=SLOT,
        stereotype="pro",
        grammatical_case=slot.case,
        options=options,
        option_labels=LABELS,
        option_texts=slot.option_texts,
        gold=options[pro_index],
        referent_role="occupation",
        occupation=occupation,
        participant=other_occupation(pro.plain, occupation, occupations),
        attrs={
            "type": wb_type, "split": split, "line": pro.number,
            "pro_option": options[pro_index], "pro_label": pro_label,
            "anti_option": options[1 - pro_index], "anti_label": LABELS[1 - pro_index],
            "occupation_gender": occupations[occupation],
            "slot_marked": slot.start in spans,
            "anomaly": slot.anomaly,
            **({"anti_line": anti.raw} if slot.anomaly and slot.case is not None else {}),
        },
    )


def all_files() -> list[str]:
    data = [data_file(s, t, sp) for t in TYPES for sp in SPLITS for s in ("pro", "anti")]
    return data + list(OCCUPATION_LISTS.values())


def load_winobias(folder: Path, subset: str | None = "all") -> list[Stimulus]:
    key = subset or "all"
    if key not in SUBSETS:
        raise UsageError(f"winobias: subset must be one of {sorted(SUBSETS)} (or None), got {subset!r}")
    version = files_digest([folder / rel for rel in all_files()])
    occupations = read_occupations(folder)
    stimuli = []
    for wb_type in SUBSETS[key]:
        for split in SPLITS:
            pro_path, anti_path = (folder / data_file(s, wb_type, split) for s in ("pro", "anti"))
            pro_lines, anti_lines = read_data_lines(pro_path), read_data_lines(anti_path)
            if len(pro_lines) != len(anti_lines):
                raise DataError(anti_path, f"{len(anti_lines)} lines, but {pro_path.name} has {len(pro_lines)}")
            stimuli.extend(pair_stimulus(p, a, wb_type, split, version, occupations)
                           for p, a in zip(pro_lines, anti_lines))
    return stimuli


DATASETS = (DatasetInfo(
    name="winobias",
    strata=("attrs.type", "stereotype"),
    loader=load_winobias,
    licence="MIT",
    description="WinoBias type 1+2, dev+test: one stimulus per pro/anti line pair (1,584); he/she options in the "
                "slot's case, gold = pro-stereotypical pronoun",
    files={
        "data/anti_stereotyped_type1.txt.dev": "a4e0ebae344e78b56f657a42e8ae684b9db7747d177c5e7149c0907ebb7f3bf6",
        "data/anti_stereotyped_type1.txt.test": "331db5bd74bfefebf146a60b67645152a4a1991570d2a56f57154103ac361dd2",
        "data/anti_stereotyped_type2.txt.dev": "763ad829ad724f9a85ead689ba8ca69072020cb1238def6210f0fc6a47b97e59",
        "data/anti_stereotyped_type2.txt.test": "336571ac1ea8c06cd2aba8e5dd2bd98e00acc0c48da3e4ec5ec7e54eb2633a8f",
        "data/pro_stereotyped_type1.txt.dev": "dd55a0d220fe4c0ceb63dd4648223fb4fe1a58d5ad95c116a002ad24b0e292a5",
        "data/pro_stereotyped_type1.txt.test": "db7838907238a758eeb5779e48f38c013b892910d6fe864456c59f04245c6689",
        "data/pro_stereotyped_type2.txt.dev": "8f0250de723cea9328e3eaf7169e07936f01aa5909ce7aa580db66eb803f4e86",
        "data/pro_stereotyped_type2.txt.test": "ea1c1fd94fa612e3cc44d7fa3cc4cb76021bb63fdf94f9826f430051e9052438",
        "data/male_occupations.txt": "6b82d88847b69d56d207a0c396e9830b031890de585e916e6b4e9bc50672657e",
        "data/female_occupations.txt": "693bff12286c2c1d46c7d4d45a44a631574710c30b39c1a3001bb7bdebb44ed8",
    },
    options={"subset": "all"},
    url="https://github.com/uclanlp/corefBias/tree/0bce984dd081bbc10b0622f326727a024c607895/WinoBias/wino/data",
    sources={rel: Upstream(github_raw("uclanlp/corefBias", "0bce984dd081bbc10b0622f326727a024c607895",
                                      f"WinoBias/wino/{rel}"))
             for rel in all_files()},
),)
