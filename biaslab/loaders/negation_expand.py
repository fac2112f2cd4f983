"""Algorithmic expansion of negation-bias root items (Wang, Sommerauer and Bloem): replace the category noun with
each listed synonym and rephrase context + description in four sentence structures. Input and output are in the
`negation` loader's column format (biaslab/loaders/negation.py), so the output file loads as
`<data-dir>/negation/negation_bias.csv`.

Synonyms file: a CSV with the header `noun,synonym` and one row per synonym, e.g.

    noun,synonym
    priest,clergyman
    priest,pastor
    junkie,addict

`noun` is matched against the `group` column of the root rows (case-insensitively, after trimming spaces).
A noun may be listed for several roots; a (noun, synonym) pair may occur once; a synonym may not equal its noun.

What one expansion does. A root item is the set of input rows sharing an `item_id` (up to the four conditions
SA/SN/NA/NN; the stereotype-consistent and -inconsistent rows usually name different groups, e.g. priest /
junkie). For every noun of the root (in order of first appearance), every synonym of that noun, and every
structure, one new item is produced with id `f"{root}-{slug(synonym)}-{structure}"` (slug: lower case, every
run of characters other than a-z and 0-9 becomes "_"), holding one row per condition of the root:

1. Noun replacement: in the rows whose `group` is the noun, every whole-word occurrence of the noun in
   `context_sentence` and `description` (case-insensitive; not inside a longer word, so "priest" does not match
   "priests", but "priest's" becomes "clergyman's") is replaced by the synonym. The synonym's first letter is
   upper-cased where the replaced occurrence started with a capital; an indefinite article right before the
   noun is re-chosen by spelling ("a"/"an" before a consonant/vowel letter a, e, i, o, u; the article's own
   capitalization is kept). `group` becomes the synonym. Rows of the root with the other noun are rephrased
   unchanged, so every new item keeps all the root's conditions (the model's random slope for context needs
   both contexts inside an item).
2. Rephrasing, with X = the (replaced) context sentence and Y = the (replaced) description. "Body" is the
   clause with its final run of . ! ? removed and surrounding spaces trimmed; the final punctuation of the new
   sentence is that of the clause that ends it ("." when that clause had none). "Lower-casing" a clause lowers
   its first letter only when its first word is a determiner (the, a, an, this, that, these, those, every, each,
   some, no, one, my, your, his, her, its, our, their), so proper nouns, "I" and acronyms keep their capital.
   * `because`:     "<body X> because <lowered body Y><punct Y>"
                     The priest brings the found money to the police because the priest is truly honest.
   * `who`:         "<body X>, who <Y without its subject><punct Y>", where Y must start with its subject:
                     an optional determiner followed by the group noun ("The priest is truly honest." ->
                     "is truly honest.")
                     The priest brings the found money to the police, who is truly honest.
                     (This is the literal "X, who Y": the relative clause follows X's last word, which may be
                     another noun, e.g. "the police".)
   * `which_means`: "<body X>, which means <lowered body Y><punct Y>"
                     The priest brings the found money to the police, which means the priest is truly honest.
   * `thats_why`:   "<body Y, first letter upper-cased>, that's why <lowered body X><punct X>" (ASCII apostrophe)
                     The priest is truly honest, that's why the priest brings the found money to the police.

Columns of the output. The loader checks `sentence == context_sentence + " " + description`; the rephrased
sentence is one sentence, not a context sentence followed by a description, so each output row splits it at
the space before the connective: `context_sentence` = the leading clause (with its comma, if any) and
`description` = the connective plus the trailing clause, e.g. "The priest brings the found money to the police,"
and "who is truly honest.". For `thats_why` the leading clause is the description (Y) and the trailing clause
the context (X). The unsplit clauses are kept in the extra columns `clause_context` (X) and
`clause_description` (Y), next to `root_item`, `noun` (the replaced root noun), `synonym` and `structure`; the
loader ignores extra columns. Options: `keep_roots` also emits the root rows unchanged (structure "original",
original item ids); `rephrase_roots` also emits the four structures with the original nouns (item id
`f"{root}-{structure}"`, synonym empty).

Errors are `DataError`s naming the file, line and field: invalid root rows (the loader's own checks), a
description that does not start with its group noun, a noun missing from the context sentence it should be
replaced in, bad synonym rows, and expanded item ids that collide.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..errors import DataError, UsageError
from .negation import COLUMNS, check_condition, check_sentence
from .readers import Record, read_table

STRUCTURES = ("because", "who", "which_means", "thats_why")
SYNONYM_COLUMNS = ("noun", "synonym")
EXTRA_COLUMNS = ("root_item", "noun", "synonym", "structure", "clause_context", "clause_description")
OUTPUT_COLUMNS = COLUMNS + EXTRA_COLUMNS
DETERMINERS = frozenset("the a an this that these those every each some no one my your his her its our their"
                        .split())
_END = re.compile(r"[.!?]+$")


# --------------------------------------------------------------------------------------------------- text helpers


def split_end(clause: str) -> tuple[str, str]:
    """(body, final punctuation) of a clause: its last run of . ! ? ("." when there is none)."""
    clause = clause.strip()
    match = _END.search(clause)
    if not match:
        return clause, "."
    return clause[:match.start()].rstrip(), match.group(0)


def lower_first(clause: str) -> str:
    """Lower-case the first letter when the first word is a determiner ("The priest" -> "the priest")."""
    first = clause.split(maxsplit=1)[0] if clause.strip() else ""
    if first.casefold() in DETERMINERS:
        return clause[0].lower() + clause[1:]
    return clause


def upper_first(clause: str) -> str:
    return clause[:1].upper() + clause[1:]


def slug(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.casefold()).strip("_")


def _noun_pattern(noun: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(noun) + r"(?!\w)", re.IGNORECASE)


_ARTICLE = re.compile(r"(?<!\w)(a|an)(\s+)$", re.IGNORECASE)


def replace_noun(text: str, noun: str, synonym: str) -> tuple[str, int]:
    """`text` with every whole-word occurrence of `noun` replaced by `synonym` (capital kept, a/an re-chosen);
    returns the new text and the number of replacements."""
    out: list[str] = []
    last = 0
    count = 0
    for match in _noun_pattern(noun).finditer(text):
        before = text[last:match.start()]
        article = _ARTICLE.search(before)
        if article:
            old = article.group(1)
            new = "an" if synonym[:1].casefold() in "aeiou" else "a"
            new = upper_first(new) if old[:1].isupper() else new
            before = before[:article.start(1)] + new + article.group(2)
        word = upper_first(synonym) if match.group(0)[:1].isupper() else synonym
        out += [before, word]
        last = match.end()
        count += 1
    out.append(text[last:])
    return "".join(out), count


def strip_subject(description: str, group: str) -> str | None:
    """The description without its leading subject ("The priest is truly honest." -> "is truly honest."), or None
    when it does not start with an optional determiner followed by the group noun."""
    det = "|".join(sorted(DETERMINERS, key=len, reverse=True))
    match = re.match(rf"\s*(?:(?:{det})\s+)?{re.escape(group)}(?!\w)\s+(?=\S)", description, re.IGNORECASE)
    return description[match.end():] if match else None


def rephrase(structure: str, context_sentence: str, description: str, group: str) -> tuple[str, str] | None:
    """(leading clause, connective + trailing clause) of one structure; None when `who` finds no subject."""
    x_body, x_end = split_end(context_sentence)
    y_body, y_end = split_end(description)
    if structure == "because":
        return x_body, f"because {lower_first(y_body)}{y_end}"
    if structure == "who":
        rest = strip_subject(y_body, group)
        return None if rest is None else (f"{x_body},", f"who {rest}{y_end}")
    if structure == "which_means":
        return f"{x_body},", f"which means {lower_first(y_body)}{y_end}"
    if structure == "thats_why":
        return f"{upper_first(y_body)},", f"that's why {lower_first(x_body)}{x_end}"
    raise UsageError(f"unknown structure {structure!r}; use one of {STRUCTURES}")


# --------------------------------------------------------------------------------------------------- synonyms


def read_synonyms(path: str | Path) -> dict[str, list[str]]:
    """noun -> synonyms (in file order) from a `noun,synonym` CSV; `DataError` for empty cells, a synonym equal to
    its noun, or a repeated (noun, synonym) pair."""
    path = Path(path)
    out: dict[str, list[str]] = {}
    first_line: dict[tuple[str, str], int] = {}
    # exact repeats: refused below with the (noun, synonym) pair named
    for rec in read_table(path, SYNONYM_COLUMNS, allow_duplicates=True, multiline=False):
        noun, synonym = rec.get("noun").strip(), rec.get("synonym").strip()
        key = (noun.casefold(), synonym.casefold())
        if key[0] == key[1]:
            raise rec.error(f"synonym {synonym!r} is the noun itself", "synonym")
        if not slug(synonym):
            raise rec.error(f"synonym {synonym!r} has no letter or digit to build an item id from", "synonym")
        if key in first_line:
            raise rec.error(f"{noun!r} -> {synonym!r} is listed twice (first on line {first_line[key]})", "synonym")
        first_line[key] = rec.line
        out.setdefault(noun, []).append(synonym)
    return out


def _synonym_index(synonyms: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for noun, values in synonyms.items():
        bucket = index.setdefault(noun.strip().casefold(), [])
        for value in values:
            value = value.strip()
            if not value or not slug(value):
                raise DataError(f"synonym {value!r} of {noun!r} has no letter or digit")
            if value.casefold() == noun.strip().casefold():
                raise DataError(f"synonym {value!r} is the noun itself")
            if value.casefold() not in {v.casefold() for v in bucket}:
                bucket.append(value)
    return index


# --------------------------------------------------------------------------------------------------- expansion


def _records(rows: Iterable[Mapping[str, str] | Record], source: str) -> list[Record]:
    """Records with a file and line: `Record`s as given; mappings get `source` and line = position + 2 (the line
    each would occupy in a CSV with one header line)."""
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, Record):
            out.append(row)
        else:
            values = {k: ("" if v is None else str(v)) for k, v in dict(row).items()}
            out.append(Record(Path(source), i + 2, values))
    return out


def _row(item_id: str, rec: Record, group: str, lead: str, tail: str, *, root: str, noun: str, synonym: str,
         structure: str, x: str, y: str) -> dict[str, str]:
    return {"item_id": item_id, "condition": rec.get("condition").strip(), "context": rec.get("context").strip(),
            "form": rec.get("form").strip(), "group": group, "context_sentence": lead, "description": tail,
            "sentence": f"{lead} {tail}", "root_item": root, "noun": noun, "synonym": synonym,
            "structure": structure, "clause_context": x, "clause_description": y}


def _roots(records: list[Record]) -> dict[str, list[Record]]:
    """The root items: item id -> its rows in input order, after the loader's checks of every row and a check that
    no item has a condition twice."""
    roots: dict[str, list[Record]] = {}
    seen: dict[str, int] = {}
    for rec in records:
        missing = [c for c in COLUMNS if c not in rec.values]
        if missing:
            raise rec.error(f"missing column (row has {sorted(rec.values)})", missing[0])
        item = rec.get("item_id").strip()
        condition, _, _ = check_condition(rec)
        check_sentence(rec)
        rec.get("group")
        key = f"{item}.{condition}"
        if key in seen:
            raise rec.error(f"item {item} has condition {condition} twice (first on line {seen[key]})", "condition")
        seen[key] = rec.line
        roots.setdefault(item, []).append(rec)
    return roots


def _claim(made: dict[str, tuple[str, int]], item_id: str, what: str, rec: Record) -> None:
    """Record that `what` produces `item_id` (from `rec`'s line); `DataError` when another expansion already did."""
    if item_id in made:
        raise rec.error(f"expanded item id {item_id!r} of {what} was already produced by {made[item_id][0]} "
                        f"(line {made[item_id][1]}); make the synonyms' ids distinct", "group")
    made[item_id] = (what, rec.line)


def _original_rows(root: str, recs: list[Record]) -> list[dict[str, str]]:
    """The root's rows unchanged (structure "original"), with the extra columns filled in."""
    return [{**{c: rec.get(c, required=False) for c in COLUMNS}, "item_id": root, "root_item": root, "noun": "",
             "synonym": "", "structure": "original", "clause_context": rec.get("context_sentence"),
             "clause_description": rec.get("description")} for rec in recs]


def _variant(root: str, recs: list[Record], item_id: str, structure: str, noun: str,
             synonym: str) -> list[dict[str, str]]:
    """The rows of one expanded item: every row of the root with `noun` replaced by `synonym` (no replacement when
    `synonym` is empty) and rephrased in `structure`."""
    out = []
    for rec in recs:
        group = rec.get("group").strip()
        x, y = rec.get("context_sentence").strip(), rec.get("description").strip()
        if synonym and group.casefold() == noun.casefold():
            x, n_x = replace_noun(x, group, synonym)
            if n_x == 0:
                raise rec.error(f"group noun {group!r} does not occur in the context sentence, so it cannot "
                                f"be replaced by {synonym!r}", "context_sentence")
            y, n_y = replace_noun(y, group, synonym)
            if n_y == 0:
                raise rec.error(f"group noun {group!r} does not occur in the description, so it cannot be "
                                f"replaced by {synonym!r}", "description")
            group = synonym
        parts = rephrase(structure, x, y, group)
        if parts is None:
            raise rec.error(f"description must start with its subject, an optional determiner and the group "
                            f"noun {group!r} (e.g. 'The {group} is ...'), for the 'who' structure", "description")
        out.append(_row(item_id, rec, group, *parts, root=root, noun=noun if synonym else "", synonym=synonym,
                        structure=structure, x=x, y=y))
    return out


def _nouns(recs: list[Record]) -> dict[str, Record]:
    """The group nouns of a root in order of first appearance, each with the first row naming it."""
    nouns: dict[str, Record] = {}
    for rec in recs:
        nouns.setdefault(rec.get("group").strip(), rec)
    return nouns


def expand(rows: Iterable[Mapping[str, str] | Record], synonyms: Mapping[str, Sequence[str]], *,
           keep_roots: bool = False, rephrase_roots: bool = False, source: str = "<rows>") -> list[dict[str, str]]:
    """Expanded rows (dicts with `OUTPUT_COLUMNS`) of the root rows, in root order, then noun, synonym, structure
    and the root's row order (see the module docstring for exactly what is done).

    `rows`: the loader's columns (dicts, or `Record`s from `read_table` for exact line numbers; dicts are located
    as `source`:position + 2). `synonyms`: noun -> synonyms (see `read_synonyms`).
    """
    records = _records(rows, source)
    index = _synonym_index(synonyms)
    roots = _roots(records)

    out: list[dict[str, str]] = []
    made: dict[str, tuple[str, int]] = {}
    for root, recs in roots.items():
        if keep_roots:
            _claim(made, root, f"root {root}", recs[0])
            out += _original_rows(root, recs)
        if rephrase_roots:
            for structure in STRUCTURES:
                item_id = f"{root}-{structure}"
                _claim(made, item_id, f"root {root} rephrased ({structure})", recs[0])
                out += _variant(root, recs, item_id, structure, "", "")
        for noun, first in _nouns(recs).items():
            for synonym in index.get(noun.casefold(), []):
                for structure in STRUCTURES:
                    item_id = f"{root}-{slug(synonym)}-{structure}"
                    _claim(made, item_id, f"root {root}, {noun!r} -> {synonym!r} ({structure})", first)
                    out += _variant(root, recs, item_id, structure, noun, synonym)
    return out


def expand_files(in_path: str | Path, synonyms_path: str | Path, out_path: str | Path, *,
                 keep_roots: bool = False, rephrase_roots: bool = False) -> dict:
    """Read root rows (the loader's CSV) and a `noun,synonym` CSV, write the expansion to `out_path` (CSV, header
    `OUTPUT_COLUMNS`; nothing is written when an error is found) and return a summary: counts of roots, input and
    output rows and items, `roots_without_synonyms` and `unused_nouns` (synonym nouns that name no root's group)."""
    in_path, synonyms_path, out_path = Path(in_path), Path(synonyms_path), Path(out_path)
    records = read_table(in_path, COLUMNS, multiline=False)
    synonyms = read_synonyms(synonyms_path)
    rows = expand(records, synonyms, keep_roots=keep_roots, rephrase_roots=rephrase_roots, source=str(in_path))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(OUTPUT_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    groups: dict[str, set[str]] = {}
    for rec in records:
        groups.setdefault(rec.get("item_id").strip(), set()).add(rec.get("group").strip().casefold())
    listed = {noun.strip().casefold(): noun for noun in synonyms}
    used = set().union(*groups.values()) if groups else set()
    return {
        "roots": len(groups),
        "rows_in": len(records),
        "rows_out": len(rows),
        "items_out": len({r["item_id"] for r in rows}),
        "roots_without_synonyms": [root for root, nouns in groups.items() if not nouns & set(listed)],
        "unused_nouns": [noun for key, noun in listed.items() if key not in used],
        "out": str(out_path),
    }
