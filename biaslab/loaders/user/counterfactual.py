"""A counterfactual audit of your own prompts: `biaslab data load --file prompts.csv --kind counterfactual --name NAME`.

The file (CSV, TSV, JSONL or Parquet) holds one prompt a row:

* `prompt` (required): the prompt as a user would send it;
* `id` (optional): the prompt's id (default: its line or row number), unique in the file;
* `ATTRIBUTE:GROUP` columns (optional, e.g. `gender:female`, `gender:male`): the variants written out; a row that
  fills one of an attribute's columns fills them all. An attribute with such columns takes its variants from them
  alone (nothing is detected for it: a row that leaves them empty has no variants of it), so its groups are the
  columns'; an attribute that is not built in (`dialect:aave`, `dialect:sae`) works this way only;
* every other column is metadata (`attrs`), never shown to the model.

For each attribute asked (`--attributes`, default every built-in one: `lexicon.counterfactual.ATTRIBUTES`), a
prompt's words of that attribute are detected and swapped into every group (`lexicon.counterfactual.variants`).
Each variant is a stimulus: item id `<id>.<attribute>` (a prompt's variants of one attribute form one item, so every
comparison between groups is paired), text the variant, template the prompt as written, attrs `prompt_id`,
`attribute`, `group`, `variants` ("detected" or "given"), the system prompt (`--system`, when given) and the
metadata. The stimulus ids hash the attributes too (the declaration's identity "all"): two groups whose variants
read alike stay two stimuli.

A prompt without any word of an attribute has no variants for it: it is counted per attribute, stored with the
declaration (`counterfactual.without`) and reported by `data load` and `metrics counterfactual`, never dropped
silently. A file none of whose prompts has a variant is refused (the word lists swap nothing in it).

Bad input is one line naming file, line (or row) and field, before anything is stored: an empty file, no `prompt`
column, an empty prompt, a prompt of more than `MAX_PROMPT` characters, a NUL byte, a repeated id, a row that fills
only some of an attribute's columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...lexicon.counterfactual import ATTRIBUTES, variants
from ...schema import Stimulus
from ..errors import DataError
from .dataset import UserDataset, _declaration, _sha, user_name
from .expand import MAX_STIMULI
from .files import check_size, file_format, table_rows

__all__ = ["MAX_PROMPT", "audit_lines", "from_prompts", "parse_attributes"]

#: characters of one prompt at most (a chat request's user message)
MAX_PROMPT = 100_000
#: ids of prompts without variants kept per attribute (the count is whole)
SHOWN_IDS = 20
#: the columns that are not metadata
ID, PROMPT = "id", "prompt"


def parse_attributes(value: str | None) -> tuple[str, ...] | None:
    """`--attributes gender,race` as a tuple (None: every built-in attribute and every given one)."""
    if value is None:
        return None
    items = tuple(a.strip() for a in value.split(",") if a.strip())
    if not items:
        raise DataError(f"--attributes: name at least one ({', '.join(ATTRIBUTES)}, or a column ATTRIBUTE:GROUP's)")
    return items


def _given_columns(header: list[str], where: Path) -> dict[str, list[str]]:
    """attribute -> its groups, from the `ATTRIBUTE:GROUP` columns."""
    out: dict[str, list[str]] = {}
    for column in header:
        attribute, sep, group = column.partition(":")
        if not sep:
            continue
        if not attribute.strip() or not group.strip():
            raise DataError(where, f"column {column!r}: variant columns are named ATTRIBUTE:GROUP (gender:female)",
                            field=column)
        out.setdefault(attribute.strip(), []).append(group.strip())
    for attribute, groups in out.items():
        if len(groups) < 2:
            raise DataError(where, f"attribute {attribute!r} has one variant column ({attribute}:{groups[0]}); a "
                                   "comparison needs two groups or more", field=f"{attribute}:{groups[0]}")
    return out


def _text(value: Any, where: Path, number: int, unit: str, field: str, required: bool) -> str | None:
    """A cell as text: checked for NUL bytes and length; empty is None (or refused where `required`)."""
    text = None if value is None else str(value)
    if text is None or not text.strip():
        if required:
            raise DataError(where, "empty prompt", field=field, **{unit: number})
        return None
    if "\x00" in text:
        raise DataError(where, "holds a NUL byte", field=field, **{unit: number})
    if len(text) > MAX_PROMPT:
        raise DataError(where, f"{len(text):,} characters; a prompt is at most {MAX_PROMPT:,}", field=field,
                        **{unit: number})
    return text


def _row_variants(raw: dict, attribute: str, given: dict[str, list[str]], prompt: str, where: Path, number: int,
                  unit: str) -> tuple[dict[str, str] | None, str]:
    """(group -> variant or None, "given" / "detected") of one row for one attribute."""
    groups = given.get(attribute, [])
    cells = {g: _text(raw.get(f"{attribute}:{g}"), where, number, unit, f"{attribute}:{g}", False) for g in groups}
    filled = [g for g, text in cells.items() if text is not None]
    if filled and len(filled) < len(groups):
        empty = next(g for g in groups if cells[g] is None)
        raise DataError(where, f"fills {len(filled)} of the {len(groups)} {attribute} variants; fill all or none",
                        field=f"{attribute}:{empty}", **{unit: number})
    if filled:
        return {g: cells[g] for g in groups}, "given"
    if not groups and attribute in ATTRIBUTES:
        return variants(prompt, attribute), "detected"
    return None, "detected"


def _prompts(path: Path, max_rows: int) -> tuple[list[tuple[int, str, dict]], str]:
    """The rows (number, unit, raw values) of the prompt file, after its size bound; the unit word."""
    check_size(path, max_rows)
    rows = [(number, raw, unit) for number, raw, unit in table_rows(path, file_format(path), (PROMPT,))]
    if not rows:
        raise DataError(path, "holds no prompt (an empty file, or a header alone)")
    if PROMPT not in rows[0][1]:
        raise DataError(path, f"no {PROMPT!r} column (columns: {', '.join(map(str, rows[0][1])) or 'none'})",
                        field=PROMPT, **{rows[0][2]: rows[0][0]})
    return rows, rows[0][2]


def _stimuli(path: Path, name: str, rows, attributes, given, system) -> tuple[list[Stimulus], dict]:
    """The variants' stimuli and the per-attribute counts (prompts with variants, without, given)."""
    version = "sha256:" + _sha(path)[:12]
    seen: dict[str, int] = {}
    out: list[Stimulus] = []
    counts = {a: {"with": 0, "without": 0, "given": 0, "without_ids": []} for a in attributes}
    for number, raw, unit in rows:
        prompt = _text(raw.get(PROMPT), path, number, unit, PROMPT, True)
        pid = str(raw.get(ID)).strip() if raw.get(ID) not in (None, "") else str(number)
        if pid in seen:
            raise DataError(path, f"repeats the id of {unit} {seen[pid]}", field=ID, **{unit: number})
        seen[pid] = number
        meta = {k: v for k, v in raw.items() if k not in (ID, PROMPT) and ":" not in str(k) and v not in (None, "")}
        for attribute in attributes:
            found, how = _row_variants(raw, attribute, given, prompt, path, number, unit)
            if found is None:
                counts[attribute]["without"] += 1
                if len(counts[attribute]["without_ids"]) < SHOWN_IDS:
                    counts[attribute]["without_ids"].append(pid)
                continue
            counts[attribute]["with"] += 1
            counts[attribute]["given"] += how == "given"
            for group, text in found.items():
                attrs = {**meta, "prompt_id": pid, "attribute": attribute, "group": group, "variants": how}
                if system is not None:
                    attrs["system_prompt"] = system
                out.append(Stimulus(dataset=name, upstream_version=version, item_id=f"{pid}.{attribute}", text=text,
                                    template=prompt, attrs=attrs))
    return out, counts


def from_prompts(path: Path, name: str | None, *, attributes: tuple[str, ...] | None = None,
                 system: str | None = None, description: str = "", max_stimuli: int = MAX_STIMULI) -> UserDataset:
    """The counterfactual dataset of a prompt file (see the module docstring), validated before anything is stored.

    Parameters
    ----------
    path : the prompt file (CSV, TSV, JSONL or Parquet).
    name : the dataset's name.
    attributes : the attributes to vary (default: every built-in one and every one with variant columns).
    system : a system prompt sent before every variant (default: none; the model's chat template decides).
    max_stimuli : refuse a file of more prompt rows, or whose variants make more stimuli.

    Returns
    -------
    UserDataset: the declaration (kind "counterfactual", protocol gen, identity "all", the counts per attribute in
    `counterfactual`) and the stimuli.
    """
    path = Path(path)
    name = user_name(name, path)
    rows, _ = _prompts(path, max_stimuli)
    given = _given_columns(list(rows[0][1]), path)
    asked = attributes if attributes is not None else (*ATTRIBUTES, *(a for a in given if a not in ATTRIBUTES))
    unknown = [a for a in asked if a not in ATTRIBUTES and a not in given]
    if unknown:
        raise DataError(path, f"attribute(s) {unknown} are neither built in ({', '.join(ATTRIBUTES)}) nor given as "
                              f"ATTRIBUTE:GROUP columns", field="attributes")
    if system is not None and "\x00" in system:
        raise DataError(path, "the system prompt holds a NUL byte", field="system")
    stimuli, counts = _stimuli(path, name, rows, asked, given, system)
    if not stimuli:
        raise DataError(path, f"none of its {len(rows):,} prompts holds a word of {', '.join(asked)}: the word lists "
                              "swap nothing in it; give the variants as ATTRIBUTE:GROUP columns (gender:female, "
                              "gender:male, ...)")
    if len(stimuli) > max_stimuli:
        raise DataError(path, f"its variants make {len(stimuli):,} stimuli, above the bound of {max_stimuli:,}; raise "
                              "it with --max-stimuli if you mean it")
    audit = {"attributes": list(asked), "prompts": len(rows), "system_prompt": system,
             "groups": {a: list(given.get(a) or ATTRIBUTES[a]["groups"]) for a in asked}, "counts": counts}
    decl = _declaration(path, name=name, source="file", path=str(path), file_sha256=_sha(path),
                        description=description, protocols=("gen",), identity="all", kind="counterfactual",
                        counterfactual=audit)
    return UserDataset(decl, stimuli)


def audit_lines(audit: dict) -> list[str]:
    """One line per attribute of a counterfactual declaration: the prompts with variants (given or detected), the
    groups, and the prompts without any word of it (with their first ids)."""
    lines = []
    for attribute in audit["attributes"]:
        c = audit["counts"][attribute]
        given = f", {c['given']} given in columns" if c["given"] else ""
        line = (f"{attribute}: {c['with']} of {audit['prompts']} prompts varied over "
                f"{' / '.join(audit['groups'][attribute])}{given}")
        if c["without"]:
            ids = ", ".join(c["without_ids"]) + (", ..." if c["without"] > len(c["without_ids"]) else "")
            verbs = ("holds", "has") if c["without"] == 1 else ("hold", "have")
            line += (f"; {c['without']} {verbs[0]} no {attribute} word and {verbs[1]} no {attribute} variants "
                     f"(ids {ids})")
        lines.append(line)
    return lines
