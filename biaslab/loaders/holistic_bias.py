"""HolisticBias (Smith et al., EMNLP 2022, "I'm sorry to hear that": Finding New Biases in Language Models with a
Holistic Descriptor Dataset; the dataset CC BY-SA 4.0), v1.1, from `<data-dir>/holistic_bias/dataset/v1.1/` (its
PROVENANCE.md: the files, their pins, the sentences the upstream generator makes and the metric's rules).

The sentences are generated here from the four JSON files by the rules the paper and PROVENANCE.md state (written
for biaslab from those rules, not taken from the upstream code):

1. **Noun phrases**, each with 11 fields (`NOUN_PHRASE_COLUMNS`):
   - every noun alone ("a woman" / "women"): axis `null`, no descriptor (`(none)`), type `noun`;
   - every descriptor of every axis and bucket (a string, or an object with `descriptor` and optional `gender`,
     `article`, `preference`) alone ("Deaf"), type `descriptor`, and before every noun of a compatible gender
     ("a Deaf woman" / "Deaf women"; a gendered descriptor takes the nouns of its gender only), type
     `descriptor_noun`; the article is the object's own, else "an" before a vowel letter and "a" otherwise;
   - every standalone phrase of an axis: one with `{noun}` filled with every noun ("a woman with a disability"; its
     descriptor is the phrase without article and noun, left-stripped only), type `noun_descriptor`; one without, as
     written, type `fixed_phrase` (noun gender `neutral`);
   missing fields are `(none)` (preference: `no_data`). The phrases are sorted by the 11 fields in order.
2. **Sentences**: every noun phrase, in that order, in every sentence template in the file's order (a template
   marked `must_be_noun` only where the phrase has a noun), filled with the phrase, or with its plural where the
   template asks `{plural_noun_phrase}`; each row is the text, the phrase's 11 fields, the template and its two
   flags (`SENTENCE_COLUMNS`).

v1.1 gives 566,625 rows, 563,195 distinct texts; written as CSV (`write_sentences_csv`: the columns as header,
minimal quoting, LF, flags as True/False) the bytes are the upstream generator's `sentences.csv`, sha256
`SENTENCES_SHA256` (a test holds it). The likelihood-bias measure compares only phrases of a descriptor and a noun
(types `descriptor_noun`, `noun_descriptor`) whose descriptor has no gender (`likelihood_subset`): 549,120 rows,
656 descriptors, 32 sentences (one per noun) per axis, template and descriptor.

Everything here streams: `sentences` yields one row at a time (the noun phrases, 22,029, are held and sorted).
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..schema import Stimulus
from .dataset import DatasetInfo, Upstream, github_raw
from .errors import DataError
from .readers import files_digest, read_text

__all__ = ["DATASET", "DATASETS", "FOLDER", "NOUN_PHRASE_COLUMNS", "SENTENCE_COLUMNS", "SENTENCES_ROWS",
           "SENTENCES_SHA256", "likelihood_subset", "load_stimuli", "noun_phrases", "sentences",
           "write_sentences_csv"]

DATASET = "holistic-bias"
FOLDER = "holistic_bias"
VERSION = "v1.1"
FILES = ("descriptors.json", "nouns.json", "standalone_noun_phrases.json", "sentence_templates.json")
NONE = "(none)"
NO_PREFERENCE = "no_data"
NOUN_PHRASE_COLUMNS = ("axis", "bucket", "descriptor", "descriptor_gender", "descriptor_preference", "noun",
                       "plural_noun", "noun_gender", "noun_phrase", "plural_noun_phrase", "noun_phrase_type")
SENTENCE_COLUMNS = ("text", *NOUN_PHRASE_COLUMNS, "template", "first_turn_only", "must_be_noun")
#: the upstream generator's output on v1.1 (PROVENANCE.md): rows, distinct texts, sha256 of its sentences.csv
SENTENCES_ROWS, SENTENCES_DISTINCT = 566_625, 563_195
SENTENCES_SHA256 = "8812b73fcf52ffc8219a22e5bb1fa8d1b4c640b39bb873d6c35505e19bcf37f8"
#: the phrase types the likelihood-bias measure compares (a descriptor with a noun)
LIKELIHOOD_TYPES = ("descriptor_noun", "noun_descriptor")
#: where a sentence row holds its phrase type and its descriptor's gender
_TYPE, _GENDER = SENTENCE_COLUMNS.index("noun_phrase_type"), SENTENCE_COLUMNS.index("descriptor_gender")


def _path(folder: Path, name: str) -> Path:
    """Where the dataset's file `name` (one of FILES) is."""
    return Path(folder) / "dataset" / VERSION / name


def _read(folder: Path, name: str) -> Any:
    """A JSON file of the dataset (`readers.read_text`: inside a dataset load, checked against its pin)."""
    path = _path(folder, name)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(path, f"not JSON ({exc.msg} at line {exc.lineno})") from None


def article(word: str) -> str:
    """The indefinite article the dataset's rule gives `word`: "an" before a vowel letter (a, e, i, o, u, either
    case), else "a" (so "a LGBT person", as upstream; a descriptor object may name its own)."""
    return "an" if word[0].lower() in "aeiou" else "a"


def _nouns(folder: Path) -> list[tuple[str, str, str]]:
    """(gender, noun, plural) of nouns.json, in its order."""
    path = _path(folder, "nouns.json")
    out = []
    for gender, pairs in _read(folder, "nouns.json").items():
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(w, str) and w for w in pair)):
                raise DataError(path, f"{gender}[{i}] is not a [singular, plural] pair of words")
            out.append((gender, pair[0], pair[1]))
    return out


def _descriptor_phrases(folder: Path, nouns) -> Iterator[tuple[str, ...]]:
    path = _path(folder, "descriptors.json")
    for axis, buckets in _read(folder, "descriptors.json").items():
        for bucket, entries in buckets.items():
            for i, entry in enumerate(entries):
                entry = {"descriptor": entry} if isinstance(entry, str) else entry
                if not isinstance(entry, dict) or not isinstance(entry.get("descriptor"), str) \
                        or not entry["descriptor"]:
                    raise DataError(path, f"{axis}.{bucket}[{i}] has no descriptor string")
                word = entry["descriptor"]
                gender = entry.get("gender", NONE)
                own = entry.get("article", article(word))
                preference = entry.get("preference", NO_PREFERENCE)
                head = (axis, bucket, word, gender, preference)
                yield (*head, NONE, NONE, NONE, word, word, "descriptor")
                for noun_gender, noun, plural in nouns:
                    if gender in (NONE, noun_gender):
                        yield (*head, noun, plural, noun_gender, f"{own} {word} {noun}", f"{word} {plural}",
                               "descriptor_noun")


def _standalone_phrases(folder: Path, nouns) -> Iterator[tuple[str, ...]]:
    path = _path(folder, "standalone_noun_phrases.json")
    for axis, entries in _read(folder, "standalone_noun_phrases.json").items():
        for i, entry in enumerate(entries):
            entry = {"noun_phrase": entry} if isinstance(entry, str) else entry
            if not isinstance(entry, dict) or not isinstance(entry.get("noun_phrase"), str):
                raise DataError(path, f"{axis}[{i}] has no noun_phrase string")
            phrase = entry["noun_phrase"]
            plural = entry.get("plural_noun_phrase", phrase)
            preference = entry.get("preference", NO_PREFERENCE)
            if "{noun}" not in phrase:
                yield (axis, NONE, phrase, NONE, preference, NONE, NONE, "neutral", phrase, plural, "fixed_phrase")
                continue
            descriptor = phrase.format(article="", noun="").lstrip()
            for noun_gender, noun, plural_noun in nouns:
                yield (axis, NONE, descriptor, NONE, preference, noun, plural_noun, noun_gender,
                       phrase.format(article=article(noun), noun=noun),
                       plural.format(article="", noun=plural_noun).lstrip(), "noun_descriptor")


def noun_phrases(folder: Path) -> list[tuple[str, ...]]:
    """Every noun phrase (rule 1 of the module docstring), as tuples of `NOUN_PHRASE_COLUMNS`, sorted."""
    nouns = _nouns(folder)
    bare = [("null", NONE, NONE, NONE, NONE, noun, plural, gender, f"{article(noun)} {noun}", plural, "noun")
            for gender, noun, plural in nouns]
    return sorted([*bare, *_descriptor_phrases(folder, nouns), *_standalone_phrases(folder, nouns)])


def _templates(folder: Path) -> list[tuple[str, bool, bool, str]]:
    """(template, first_turn_only, must_be_noun, the phrase field it takes) of sentence_templates.json."""
    path = _path(folder, "sentence_templates.json")
    out = []
    for template, flags in _read(folder, "sentence_templates.json").items():
        field = ("noun_phrase" if "{noun_phrase}" in template else
                 "plural_noun_phrase" if "{plural_noun_phrase}" in template else None)
        if field is None or not isinstance(flags, dict):
            raise DataError(path, f"template {template!r} names neither {{noun_phrase}} nor {{plural_noun_phrase}}")
        out.append((template, bool(flags.get("first_turn_only", False)), bool(flags.get("must_be_noun", False)),
                    field))
    return out


def sentences(folder: Path) -> Iterator[tuple]:
    """Every sentence (rule 2 of the module docstring), one tuple of `SENTENCE_COLUMNS` at a time, in the upstream
    generator's order."""
    templates = _templates(folder)
    at = {"noun_phrase": NOUN_PHRASE_COLUMNS.index("noun_phrase"),
          "plural_noun_phrase": NOUN_PHRASE_COLUMNS.index("plural_noun_phrase")}
    noun = NOUN_PHRASE_COLUMNS.index("noun")
    for phrase in noun_phrases(folder):
        for template, first_turn_only, must_be_noun, field in templates:
            if must_be_noun and phrase[noun] == NONE:
                continue
            yield (template.replace("{" + field + "}", phrase[at[field]]), *phrase, template, first_turn_only,
                   must_be_noun)


def likelihood_subset(row: tuple) -> bool:
    """Whether a sentence row is one the likelihood-bias measure compares: a descriptor with a noun, the descriptor
    without gender."""
    return row[_TYPE] in LIKELIHOOD_TYPES and row[_GENDER] == NONE


def write_sentences_csv(folder: Path, out) -> tuple[int, int, str]:
    """Write every sentence as CSV to the text stream `out` (header `SENTENCE_COLUMNS`, minimal quoting, LF); return
    (rows, distinct texts, sha256 of the bytes written, UTF-8)."""
    digest = hashlib.sha256()

    class Hashing:
        def write(self, text: str) -> None:
            digest.update(text.encode("utf-8"))
            if out is not None:
                out.write(text)

    writer = csv.writer(Hashing(), lineterminator="\n")
    writer.writerow(SENTENCE_COLUMNS)
    rows, texts = 0, set()
    for row in sentences(folder):
        writer.writerow(row)
        rows += 1
        texts.add(row[0])
    return rows, len(texts), digest.hexdigest()


def load_stimuli(folder: Path, axes: str | None = None) -> list[Stimulus]:
    """The likelihood subset's 549,120 sentences as stimuli (the sentences the measure compares; the rest of the
    566,625 are descriptors without a noun, nouns alone, fixed phrases and gendered descriptors). The item is
    (axis, descriptor): a limited run takes a descriptor whole (26 templates x 32 nouns), spread over the axes.
    `attrs`: axis, bucket, descriptor, preference, noun, noun_gender, phrase_type (descriptor_noun or
    noun_descriptor) and template; the text is the sentence (no options: the prob protocol scores it whole).

    Parameters
    ----------
    folder : the dataset's folder.
    axes : `--option axes=A,B`: only these axes' sentences (whole axes, so coverage per axis is unchanged; the ids
        are the same as in a full load). None: all 13.
    """
    folder = Path(folder)
    version = files_digest([_path(folder, name) for name in FILES])
    wanted = _axes(folder, axes)
    out = []
    for row in sentences(folder):
        if not likelihood_subset(row) or (wanted is not None and row[1] not in wanted):
            continue
        text, axis, bucket, descriptor, _, preference, noun, _, noun_gender, _, _, kind, template = row[:13]
        out.append(Stimulus(dataset=DATASET, upstream_version=version, item_id=f"{axis}.{descriptor}", text=text,
                            template=template,
                            attrs={"axis": axis, "bucket": bucket, "descriptor": descriptor, "preference": preference,
                                   "noun": noun, "noun_gender": noun_gender, "phrase_type": kind,
                                   "template": template}))
    return out


def _axes(folder: Path, axes: str | None) -> set[str] | None:
    """The axes of `--option axes=...` (comma-separated), checked against descriptors.json's; None for all."""
    if axes is None or not str(axes).strip():
        return None
    known = list(_read(folder, "descriptors.json"))
    wanted = {a.strip() for a in str(axes).split(",") if a.strip()}
    unknown = sorted(wanted - set(known))
    if unknown:
        raise UsageError(f"--option axes: no axis {', '.join(unknown)} in HolisticBias (axes: {', '.join(known)})")
    return wanted


REPO, COMMIT = "facebookresearch/ResponsibleNLP", "0ec714eb084217f44cd9ac466d9e988c795302f9"
PINS = {f"dataset/{VERSION}/descriptors.json": "c1328f0edfdeefb76302d360a01878df3db55f18026f4ea1956b4a0f52daf943",
        f"dataset/{VERSION}/nouns.json": "9bbe15bf01ea8827fd5d68a81ee2b05e04bd5f79478d9027efec0b4dbd232ee6",
        f"dataset/{VERSION}/sentence_templates.json":
            "8b1cf8fc3c9a10b12cf77902e8c2ff3d80e3fcfff2f177a00256925acb4f53a5",
        f"dataset/{VERSION}/standalone_noun_phrases.json":
            "bac592574f81df55e8c8d8e3919a866d43cbd8df5ae9376a68d95e7b83dbebac"}

DATASETS = (DatasetInfo(
    name=DATASET,
    folder=FOLDER,
    loader=load_stimuli,
    licence="CC BY-SA 4.0",
    description="HolisticBias v1.1 (Smith et al. 2022): 549,120 sentences of 656 descriptors on 13 axes x 26 "
                "templates x 32 nouns; does the model find some descriptors less likely than others?",
    files=PINS,
    url=f"https://github.com/{REPO}/tree/{COMMIT}/holistic_bias",
    sources={rel: Upstream(github_raw(REPO, COMMIT, f"holistic_bias/{rel}")) for rel in PINS},
    protocols=("prob",),
    studies=("holistic-bias",),
    strata=("attrs.axis",),
    options={"axes": None},
),)
