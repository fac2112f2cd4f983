"""TANGO misgendering prompts (Ovalle et al., FAccT 2023, "'I'm fully who I am': Towards Centering Transgender and
Non-Binary Voices to Measure Biases in Open Language Generation"), upstream `amazon-science/tango`
`misgendering_prompts.csv`.

TANGO is generation-based: a model continues each prompt and the pronouns of the continuation are checked against
the prompt's pronoun family. One upstream row -> one stimulus:

* `text` = the prompt (`template` column, verbatim and lower-case as upstream); no options, no slot; `context` None.
* `pronoun_set` = `pronoun_family`; `name` = `ante` (a name, or a distal antecedent such as "the janitor at my
  school", whose `referent_role` is "other" instead of "name"); `attrs`: `template_idx`, `ante_type` and
  `pronoun_forms`, the family's forms by case.
* The `pronouns` option selects families: "core" (default) keeps he, she, they, xe (4 x 480 = 1,920 stimuli, the
  meta-evaluation's subset); "all" keeps all six (he, she, they, xe, ey, fae: 2,880); a comma-separated list keeps
  those families.

Pronoun forms are derived from the data, not assumed: for each prompt the he- and she-versions of the same
template and antecedent are aligned word by word with every family's version; the he/she pair at a position names
the case (he/she nom, him/her acc, his/her poss_dep, his/hers poss_indep, himself/herself refl) and the family's word
there is its form. TANGO spells xe as xe/xir/xir/xirs/xirself (RUFF and MISGENDERED use xe/xem/xyr); a family with
two forms for one case is an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..schema import Stimulus
from .errors import DataError
from ..lexicon.pronouns import PAIR_CASE
from .readers import Record, files_digest, read_table
from .dataset import DatasetInfo, Upstream, github_blob, github_raw

PROMPTS_FILE = "misgendering_prompts.csv"
COLUMNS = ("template_idx", "ante", "ante_type", "pronoun_family", "template")
FAMILIES = ("he", "she", "they", "xe", "ey", "fae")
CORE = ("he", "she", "they", "xe")
ANTE_TYPES = ("ante_nongendered", "ante_gendered_female", "ante_gendered_male", "distal")
_WORD = re.compile(r"[a-z]+(?:[-'][a-z]+)*|[^a-z\s]")


def select_families(pronouns: Any) -> tuple[str, ...]:
    """'core', 'all', or families as a comma-separated string or a sequence."""
    if isinstance(pronouns, str):
        key = pronouns.strip().lower()
        if key == "core":
            return CORE
        if key == "all":
            return FAMILIES
        chosen: Iterable[str] = [p.strip() for p in key.split(",") if p.strip()]
    else:
        chosen = [str(p).strip().lower() for p in pronouns]
    chosen = tuple(dict.fromkeys(chosen))
    unknown = [p for p in chosen if p not in FAMILIES]
    if unknown or not chosen:
        raise UsageError(f"option pronouns: expected 'core', 'all' or families among {list(FAMILIES)}, "
                         f"got {pronouns!r}")
    return chosen


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def derive_pronoun_forms(path: Path, records: list[Record]) -> dict[str, dict[str, str]]:
    """family -> case -> form, read off the prompts by aligning every family's prompt with the he/she prompts."""
    by_key = {(r.get("template_idx"), r.get("ante"), r.get("ante_type"), r.get("pronoun_family")): r for r in records}
    forms: dict[str, dict[str, tuple[str, Record]]] = {}
    for (idx, ante, ante_type, family), rec in by_key.items():
        he, she = by_key.get((idx, ante, ante_type, "he")), by_key.get((idx, ante, ante_type, "she"))
        if he is None or she is None:
            continue
        he_words, she_words, own = words(he.get("template")), words(she.get("template")), words(rec.get("template"))
        if not len(he_words) == len(she_words) == len(own):
            continue  # prompts that do not align word by word say nothing about forms
        for h, s, w in zip(he_words, she_words, own):
            case = PAIR_CASE.get((h, s))
            if case is None:
                continue
            known = forms.setdefault(family, {}).get(case)
            if known is None:
                forms[family][case] = (w, rec)
            elif known[0] != w:
                raise rec.error(f"family {family!r} has two {case} forms: {known[0]!r} (line {known[1].line}) "
                                f"and {w!r}", "template")
    missing = [f for f in FAMILIES if f not in forms]
    if missing:
        raise DataError(path, f"could not derive pronoun forms of families {missing}", field="template")
    return {family: {case: form for case, (form, _) in sorted(cases.items())} for family, cases in forms.items()}


def read_prompts(path: Path) -> list[Record]:
    records = read_table(path, COLUMNS, multiline=False)
    seen: dict[tuple[str, ...], int] = {}
    for rec in records:
        family = rec.get("pronoun_family")
        if family not in FAMILIES:
            raise rec.error(f"unknown pronoun family {family!r}; expected one of {list(FAMILIES)}", "pronoun_family")
        if rec.get("ante_type") not in ANTE_TYPES:
            raise rec.error(f"unknown antecedent type {rec.get('ante_type')!r}", "ante_type")
        if not rec.get("template_idx").strip().isdigit():
            raise rec.error(f"template_idx is not an integer: {rec.get('template_idx')!r}", "template_idx")
        key = (rec.get("template_idx"), rec.get("ante"), rec.get("ante_type"), family)
        if key in seen:
            raise rec.error(f"duplicate prompt (same template_idx, ante, ante_type, family as line {seen[key]})")
        seen[key] = rec.line
    return records


def load_tango(folder: Path, pronouns: Any = "core") -> list[Stimulus]:
    families = select_families(pronouns)
    path = folder / PROMPTS_FILE
    records = read_prompts(path)
    forms = derive_pronoun_forms(path, records)
    version = files_digest([path])
    stimuli = []
    for rec in records:
        family = rec.get("pronoun_family")
        if family not in families:
            continue
        idx, ante, ante_type = int(rec.get("template_idx")), rec.get("ante"), rec.get("ante_type")
        stimuli.append(Stimulus(
            dataset="tango",
            upstream_version=version,
            item_id=f"{idx}.{ante_type}.{ante}.{family}",
            text=rec.get("template"),
            pronoun_set=family,
            referent_role="other" if ante_type == "distal" else "name",
            name=ante,
            attrs={"template_idx": idx, "ante_type": ante_type, "pronoun_forms": forms[family], "line": rec.line},
        ))
    return stimuli


#: the upstream repository and commit of the prompts file
REPO, COMMIT = "amazon-science/tango", "bbaf0bb22a3fc391e2e7247a2d25c6850625013b"

INFO = DatasetInfo(
    name="tango",
    strata=("pronoun_set", "attrs.ante_type"),
    studies=("misgendering",),
    pronoun_vocabulary="tango",
    protocols=("gen", "prob"),
    prob_from="gen",  # its prob protocol scores templates built from the model's own generations
    loader=load_tango,
    licence="CC BY-SA 4.0",
    description="TANGO misgendering prompts for open generation: 12 templates x 40 antecedents x pronoun families "
                "(core he/she/they/xe: 1,920; all six: 2,880)",
    files={PROMPTS_FILE: "dfa0d72b927939e63885a0219d8b3de5af837a50a50b5161c24aef0cfeee6ed7"},
    options={"pronouns": "core"},
    url=github_blob(REPO, COMMIT, PROMPTS_FILE),
    sources={PROMPTS_FILE: Upstream(github_raw(REPO, COMMIT, PROMPTS_FILE))},
)
DATASETS = (INFO,)
