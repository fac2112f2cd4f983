"""Gender-ECE data (Sabir et al. 2026, "The Confidence Trap", repository ahmedssabir/GECE, `data/`): the GenderLex
minimal pairs (Sabir et al., "Exploring Gender Bias Beyond Occupational Titles") with their "The person" and
"Someone" variants, and the GECE versions of WinoBias (type 2, first occupation replaced by "The person") and
Winogender.

Five datasets, one upstream CSV each under `gece_data/`:
`gece-winobias` (winobias.csv, 771 rows), `gece-winogender` (winogender.csv, 178), `genderlex` (genderLex.csv, 837),
`genderlex-person` (genderLex_person.csv, 837), `genderlex-someone` (genderLex_someone.csv, 837).
Columns are found by name (orders differ; winobias.csv has a leading unnamed pandas index column; `bias_type` is
absent from the person / someone files).

Mapping: each row (`sent_more`, `sent_less`, `y`) is ONE stimulus.
* Both sentences are split into word tokens and single non-word characters (`\\w+|\\W`), so the differing word of
  "... slapped him." / "... slapped her." is "him" / "her" without the period. The sentences must have the same
  token count and differ somewhere; the differing tokens must be a male pronoun in `sent_more` and a female one in
  `sent_less` (upstream: sent_more always holds he/him/his). Anything else is a `DataError` naming file, line, field.
* `text` = the shared sentence with the (first) differing word replaced by `BLANK`; `options` = (male word, female
  word) exactly as written (capitalization kept); `option_labels` = ("male", "female");
  `grammatical_case` from the pair (he/she nom, him/her acc, his/her poss_dep, ...; None for a mixed pair).
* Rows that repeat an earlier row exactly are an error naming both lines (`readers.read_table`), except in the three
  GenderLex files, which repeat 17-18 rows upstream: there each row stays one stimulus, as upstream counts them.
* `gold` = the option of the human bias label `y` (1 -> the male word, 0 -> the female word; other values are a
  `DataError`). attrs: `y` (int), `bias_type` (None when the file has no such column), `row` (0-based data row,
  also the item_id), `line` (physical line), `index` (the unnamed index column, when present).
* Real rows that differ in more than one place: 3 rows of winobias.csv repeat the pronoun swap later in the
  sentence ("liked him less after being yelled at him", "praised him for him outstanding work", "told him someone
  was calling for him"). They are accepted when EVERY differing position is the same kind of male/female pronoun
  swap: the slot is the first one and `option_texts` = (sent_more, sent_less), so each option still fills back to
  its sentence exactly; attrs `n_differences` counts the swapped positions (1 for all other rows).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..schema import Stimulus
from ..lexicon.pronouns import FORM_GENDER, PAIR_CASE
from .readers import Record, files_digest, read_table, unnamed_index
from .dataset import DatasetInfo, Upstream, file_loader, github_raw

SLOT = "BLANK"
LABELS = ("male", "female")
FOLDER = "genderlex_gece"
COLUMNS = ("sent_more", "sent_less", "y")
TOKEN_RE = re.compile(r"\w+|\W")
#: upstream files with exact repeated rows (837 rows each; 17 repeats in genderLex.csv, 18 in genderLex_person.csv
#: and in genderLex_someone.csv). Each row stays one stimulus, so repeats are allowed in these files only.
REPEATED_ROWS = frozenset({"genderLex.csv", "genderLex_person.csv", "genderLex_someone.csv"})


def differing_tokens(rec: Record, more: str, less: str) -> tuple[list[str], list[str], list[int]]:
    """Tokens of both sentences and the indices where they differ; unalignable pairs are a DataError."""
    a, b = TOKEN_RE.findall(more), TOKEN_RE.findall(less)
    if len(a) != len(b):
        raise rec.error(f"sent_more and sent_less do not align token by token ({len(a)} vs {len(b)} tokens)",
                        "sent_less")
    diffs = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if not diffs:
        raise rec.error("sent_more and sent_less are identical", "sent_less")
    return a, b, diffs


def check_swap(rec: Record, male: str, female: str) -> None:
    """A differing position must be a male pronoun in sent_more against a female pronoun in sent_less."""
    if FORM_GENDER.get(male.lower()) != "male":
        raise rec.error(f"differing word {male!r} is not a male pronoun", "sent_more")
    if FORM_GENDER.get(female.lower()) != "female":
        raise rec.error(f"differing word {female!r} is not a female pronoun", "sent_less")


def minimal_pair(rec: Record) -> tuple[str, str, str, tuple[str, str] | None, int]:
    """(text with BLANK, male word, female word, option_texts or None, number of differing positions)."""
    more, less = rec.get("sent_more"), rec.get("sent_less")
    a, b, diffs = differing_tokens(rec, more, less)
    first = diffs[0]
    for i in diffs:
        if (a[i].lower(), b[i].lower()) != (a[first].lower(), b[first].lower()):
            raise rec.error(f"sentences differ in {len(diffs)} places with different words "
                            f"({a[first]!r}/{b[first]!r} and {a[i]!r}/{b[i]!r})", "sent_less")
    check_swap(rec, a[first], b[first])
    text = "".join(a[:first]) + SLOT + "".join(a[first + 1:])
    option_texts = (more, less) if len(diffs) > 1 else None
    return text, a[first], b[first], option_texts, len(diffs)


def gold_label(rec: Record) -> int:
    y = rec.get("y").strip()
    if y not in ("0", "1"):
        raise rec.error(f"y must be 1 (male) or 0 (female), got {y!r}", "y")
    return int(y)


def load_gece_file(folder: Path, *, dataset: str, file: str) -> list[Stimulus]:
    """One stimulus per minimal pair of `gece_data/<file>`, named `dataset` (see the module docstring)."""
    path = folder / "gece_data" / file
    records = read_table(path, COLUMNS, allow_duplicates=file in REPEATED_ROWS, multiline=False)
    version = files_digest([path])
    stimuli = []
    for row, rec in enumerate(records):
        text, male, female, option_texts, n_diff = minimal_pair(rec)
        y = gold_label(rec)
        attrs = {"y": y, "bias_type": rec.values.get("bias_type"), "row": row, "line": rec.line,
                 "n_differences": n_diff, **unnamed_index(rec)}
        stimuli.append(Stimulus(
            dataset=dataset,
            upstream_version=version,
            item_id=str(row),
            text=text,
            slot=SLOT,
            grammatical_case=PAIR_CASE.get((male.lower(), female.lower())),
            options=(male, female),
            option_labels=LABELS,
            option_texts=option_texts,
            gold=male if y == 1 else female,
            attrs=attrs,
        ))
    return stimuli


GECE_REPO, GECE_COMMIT = "ahmedssabir/GECE", "ce7d8b63c24164a0a2bbc1c54e883451e58cb65e"
URL = f"https://github.com/{GECE_REPO}/tree/{GECE_COMMIT}/data"
LICENCE = "none found (local research use only)"

#: name -> (file, pinned sha256, rows, description)
FILES = {
    "gece-winobias": ("winobias.csv", "12810d1641a162d94a9a5e066b231bc98bbcf644ee6ea292b504c9b49a937509", 771,
                      "GECE WinoBias type-2 pairs ('The person ...'), gold = human label y"),
    "gece-winogender": ("winogender.csv", "056ed7eec5eeb168ccf663d88a73827878f8755770323e4a95c725f78002f1df", 178,
                        "GECE Winogender he/she pairs, gold = human label y"),
    "genderlex": ("genderLex.csv", "cf7a015225497fee57a7584b8cdea4ff4f8c2ff1f40a07117895b6a1dc2a0acb", 837,
                  "GenderLex him/her pairs (GECE copy), gold = human label y"),
    "genderlex-person": ("genderLex_person.csv", "c53cdabd8d6696a479300bc0facbbe3c52b4d4e6890ebb7e06ddc193e2e2aeae",
                         837, "GenderLex with 'The person' as subject, gold = human label y"),
    "genderlex-someone": ("genderLex_someone.csv",
                          "0be770e83164c9c7084ca1585d2fbd9d2b37fecab11f6f14ba6024e7b81b91f7", 837,
                          "GenderLex with 'Someone' as subject, gold = human label y"),
}

DATASETS = tuple(DatasetInfo(
    name=_name,
    studies=("calibration",),
    folder=FOLDER,
    loader=file_loader(load_gece_file, _name, _file, shown=f"gece_data/{_file}"),
    licence=LICENCE,
    description=f"{_description} ({_rows} pairs, one stimulus each)",
    files={f"gece_data/{_file}": _sha},
    url=URL,
    sources={f"gece_data/{_file}": Upstream(github_raw(GECE_REPO, GECE_COMMIT, f"data/{_file}"))},
) for _name, (_file, _sha, _rows, _description) in FILES.items())
