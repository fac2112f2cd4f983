"""WinoQueer (Felkner et al. 2023, "WinoQueer: A Community-in-the-Loop Benchmark for Anti-LGBTQ+ Bias in Large
Language Models", ACL), upstream `data/winoqueer_final.csv` of katyfelkner/winoqueer (MIT), "last-cloze" subset.

Upstream format (NOT verified against the file, which is not available here): the upstream README and evaluation
code (`code/metric_autoregressive.py`) document the columns `Gender_ID_x` (bias target category), `Gender_ID_y`
(counterfactual category), `sent_x` (biased / stereotyping sentence about the queer group) and `sent_y` (the
counterfactual sentence about the straight / cis group): "x is always queer, y is always straight". Scripts that use
the file read it with a leading unnamed pandas index column (`Unnamed: 0`); that column is optional here and, when
present, recorded as attrs `index`. Columns are found by name; 45,540 rows are reported upstream. If the real file
differs, `read_table` stops with a `DataError` naming the missing column.

"Last-cloze" subset (the calibration study's WinoQueer subset, 1,488 pairs in the paper; count not checked here):
the pairs whose two sentences differ ONLY in their last word, so the differing identity term is the final word a
causal model predicts. Each sentence is split into prefix + last word + trailing sentence punctuation / whitespace
(the last word is the last whitespace-delimited token without trailing `.,!?;:"')]` characters, so "non-binary" and
"LGBTQ+" are single words); a pair is kept when the prefixes and the trailing parts are identical and the last
words differ. Other rows are skipped (they are not errors).

Mapping: one stimulus per kept pair: `text` = prefix + `BLANK` + trailing part; `options` = (last word of sent_x,
last word of sent_y) as written; `option_labels` = ("queer", "nonqueer"); `gold` = the sent_x word with
`stereotype` = "pro": gold names the stereotype-consistent reading, as for WinoBias (WinoQueer has no human label);
`item_id` = the 0-based data row in the full file (stable across subsets); attrs `gender_id_x`, `gender_id_y`,
`row`, `line`, `index` (when present).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UsageError
from ..schema import Stimulus
from .readers import Record, files_digest, read_table, unnamed_index
from .dataset import DatasetInfo

SLOT = "BLANK"
LABELS = ("queer", "nonqueer")
FILE = "winoqueer_final.csv"
COLUMNS = ("Gender_ID_x", "Gender_ID_y", "sent_x", "sent_y")
SUBSETS = ("last-cloze",)
LAST_WORD_RE = re.compile(r"^(.*?)(\S+?)([.,!?;:\"'\u2019\u201d)\]]*\s*)$", re.DOTALL)


def split_last_word(sentence: str) -> tuple[str, str, str] | None:
    """(prefix, last word, trailing punctuation and whitespace), or None for a sentence without a word."""
    m = LAST_WORD_RE.match(sentence)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def last_cloze(rec: Record) -> tuple[str, str, str] | None:
    """(text with BLANK, word of sent_x, word of sent_y) when the pair differs only in its last word, else None."""
    x, y = split_last_word(rec.get("sent_x")), split_last_word(rec.get("sent_y"))
    if x is None or y is None:
        return None
    (prefix_x, word_x, tail_x), (prefix_y, word_y, tail_y) = x, y
    if prefix_x != prefix_y or tail_x != tail_y or word_x == word_y:
        return None
    return prefix_x + SLOT + tail_x, word_x, word_y


def load_winoqueer(folder: Path, subset: str | None = "last-cloze") -> list[Stimulus]:
    """One stimulus per pair of the subset (only "last-cloze"; see the module docstring)."""
    if (subset or "last-cloze") not in SUBSETS:
        raise UsageError(f"winoqueer: subset must be one of {list(SUBSETS)}, got {subset!r}")
    path = folder / FILE
    records = read_table(path, COLUMNS, multiline=False)
    version = files_digest([path])
    stimuli = []
    for row, rec in enumerate(records):
        pair = last_cloze(rec)
        if pair is None:
            continue
        text, word_x, word_y = pair
        attrs = {"gender_id_x": rec.get("Gender_ID_x"), "gender_id_y": rec.get("Gender_ID_y"), "row": row,
                 "line": rec.line, **unnamed_index(rec)}
        stimuli.append(Stimulus(
            dataset="winoqueer",
            upstream_version=version,
            item_id=str(row),
            text=text,
            slot=SLOT,
            stereotype="pro",
            options=(word_x, word_y),
            option_labels=LABELS,
            gold=word_x,
            attrs=attrs,
        ))
    return stimuli


DATASETS = (DatasetInfo(
    name="winoqueer",
    studies=("calibration",),
    loader=load_winoqueer,
    licence="MIT",
    description="WinoQueer last-cloze subset: pairs differing only in the last word; options (queer term, "
                "counterfactual term), gold = the stereotyped sent_x term",
    files={FILE: None},
    options={"subset": "last-cloze"},
    url="https://github.com/katyfelkner/winoqueer/blob/main/data/winoqueer_final.csv",
    no_source="no pinned upstream commit or checksum (only the moving 'main' branch is known); download "
              "data/winoqueer_final.csv from katyfelkner/winoqueer yourself into <data-dir>/winoqueer/",
),)
