"""MISGENDERED (Hossain, Dev & Singh, ACL 2023, "MISGENDERED: Limits of Large Language Models in Understanding
Pronouns"), upstream `tamannahossainkay/misgendered-backend` layout, as used by the misgendering meta-evaluation
(Subramonian et al., "Agree to Disagree? A Meta-Evaluation of LLM Misgendering").

Only the explicit-declaration subset `{name}'s pronouns are {nom}/{acc}/{pos_ind}.` is loaded: it is the file
`templates/explicit_template_31.csv` (50 templates = 10 per form nom / acc / pos_dep / pos_ind / ref; the suffix
31 means "three declared forms, nom/acc/pos_ind"), the default `--eval_file` of the meta-evaluation.

Mapping from upstream rows to stimuli (50 templates x 15 names x 4 pronoun sets = 3,000 stimuli):

* Names: `names/{female,male,unisex}.txt` (100 + 100 + 300, one per line, in that order). For each template, in
  file order, 15 distinct names are drawn with one `random.Random(seed)` (`seed` option, default 0; the
  meta-evaluation instead draws a name per template and iteration with replacement under its global seed). The same
  15 names are used for the four pronoun sets, so pronoun sets are compared on the same items. The name's list
  (female / male / unisex) goes to `attrs["name_gender"]`, the seed to `attrs["seed"]`.
* Pronoun sets: he, she, they, xe rows of `pronouns.csv` (xe is xe/xem/xyr/xyrs/xemself there; they's reflexive is
  "themself"). Upstream form names map to cases: nom -> nom, acc -> acc, pos_dep -> poss_dep,
  pos_ind (column `pos_indep`) -> poss_indep, ref -> refl.
* Text: the template with `{name}` and the declared set's `{nom}/{acc}/{pos_dep}/{pos_ind}/{ref}` filled and the
  `{mask_token}` slot replaced by `BLANK`. The upstream stray slash in `{name}/'s` is removed by default
  (`keep_artifact=true` keeps it, as the upstream code and the meta-evaluation do). Other text is kept verbatim
  (including one template's trailing space and another's missing final period).
* Options: the four sets' forms in the template's case, in the order he, she, they, xe (`option_labels`), capitalized
  when the slot starts a sentence; `gold` is the declared set's form; `pronoun_set` the declared set.
  A nominative "they" takes plural verb agreement ("they were able"): then `option_texts` holds every option's text.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from .. import errors
from ..schema import Stimulus
from .errors import DataError
from .options import parse_bool, parse_int
from ..lexicon.pronouns import set_choice
from .readers import Record, files_digest, read_lines, read_table
from .dataset import DatasetInfo, Upstream, github_raw

SLOT = "BLANK"
PRONOUN_SETS = ("he", "she", "they", "xe")
NAMES_PER_TEMPLATE = 15
TEMPLATE_FILE = "templates/explicit_template_31.csv"
NAME_FILES = {"female": "names/female.txt", "male": "names/male.txt", "unisex": "names/unisex.txt"}
PRONOUNS_FILE = "pronouns.csv"
#: upstream template `form` -> (biaslab case, pronouns.csv column)
FORMS: dict[str, tuple[str, str]] = {
    "nom": ("nom", "nom"), "acc": ("acc", "acc"), "pos_dep": ("poss_dep", "pos_dep"),
    "pos_ind": ("poss_indep", "pos_indep"), "ref": ("refl", "ref"),
}
#: template placeholder -> pronouns.csv column (templates say {pos_ind}, the CSV says pos_indep)
DECLARATION_FIELDS = {"{nom}": "nom", "{acc}": "acc", "{pos_dep}": "pos_dep", "{pos_ind}": "pos_indep", "{ref}": "ref"}
ARTIFACT, CLEAN = "{name}/'s", "{name}'s"
DECLARATION = "{name}'s pronouns are {nom}/{acc}/{pos_ind}. "
MASK = "{mask_token}"


# -- reading ----------------------------------------------------------------------------------------------------------

def read_names(folder: Path) -> list[tuple[str, str]]:
    """(name, gender list) in file order: female, male, unisex; a name in two lists is an error."""
    names: list[tuple[str, str]] = []
    seen: dict[str, tuple[str, str, int]] = {}  # name -> (gender list, file, line)
    for gender, rel in NAME_FILES.items():
        path = folder / rel
        for number, raw in read_lines(path):
            name = raw.strip()
            if not name:
                continue
            if any(c in name for c in "{}/,"):
                raise DataError(path, f"unexpected character in name {name!r}", line=number)
            if name in seen:
                other, other_rel, other_line = seen[name]
                where = f"line {other_line}" if other_rel == rel else f"the {other} list ({other_rel}:{other_line})"
                raise DataError(path, f"name {name!r} is also on {where}", line=number)
            seen[name] = (gender, rel, number)
            names.append((name, gender))
    return names


def read_pronoun_sets(path: Path) -> dict[str, dict[str, str]]:
    """Set name -> pronouns.csv column -> form, for the four sets used here."""
    columns = ("gender", *dict.fromkeys(DECLARATION_FIELDS.values()))
    rows: dict[str, Record] = {}
    for rec in read_table(path, columns, multiline=False):
        gender = rec.get("gender").strip()
        if gender in rows:
            raise rec.error(f"pronoun set {gender!r} defined twice", "gender")
        rows[gender] = rec
    sets = {}
    for name in PRONOUN_SETS:
        if name not in rows:
            raise DataError(path, f"pronoun set {name!r} not found (have {sorted(rows)})", field="gender")
        sets[name] = {col: rows[name].get(col).strip() for col in columns[1:]}
    return sets


def read_templates(path: Path, keep_artifact: bool) -> list[tuple[Record, int, str, str]]:
    """(record, template_id, case, template) per row; the template has the artifact cleaned unless kept."""
    out = []
    ids: set[int] = set()
    for rec in read_table(path, ("form", "template", "template_id"), multiline=False):
        form = rec.get("form").strip()
        if form not in FORMS:
            raise rec.error(f"unknown form {form!r}; expected one of {sorted(FORMS)}", "form")
        raw_id = rec.get("template_id").strip()
        try:
            number = float(raw_id)
        except ValueError:
            raise rec.error(f"template_id is not a number: {raw_id!r}", "template_id") from None
        if number != int(number) or int(number) in ids:
            raise rec.error(f"template_id {raw_id!r} is not a new integer", "template_id")
        ids.add(int(number))
        template = rec.get("template")
        cleaned = template.replace(ARTIFACT, CLEAN)
        if not cleaned.startswith(DECLARATION):
            raise rec.error(f"template does not start with the declaration {DECLARATION.strip()!r}", "template")
        if template.count(MASK) != 1:
            raise rec.error(f"expected exactly one {MASK}, found {template.count(MASK)}", "template")
        out.append((rec, int(number), FORMS[form][0], template if keep_artifact else cleaned))
    return out


# -- realization ------------------------------------------------------------------------------------------------------

def realize(rec: Record, template: str, name: str, forms: dict[str, str]) -> str:
    """Fill the name and the declared forms, put the slot marker in place; leftover braces are an error."""
    text = template.replace("{name}", name)
    for placeholder, column in DECLARATION_FIELDS.items():
        text = text.replace(placeholder, forms[column])
    text = text.replace(MASK, SLOT)
    if re.search(r"\{[a-z_]+\}", text):
        raise rec.error(f"unknown placeholder left in {text!r}", "template")
    if text.count(SLOT) != 1:
        raise rec.error(f"the slot marker {SLOT!r} also occurs in the text itself", "template")
    return text


def draw_names(names: list[tuple[str, str]], n_templates: int, seed: int) -> list[list[tuple[str, str]]]:
    """NAMES_PER_TEMPLATE distinct names per template, in template order, from one seeded generator."""
    if len(names) < NAMES_PER_TEMPLATE:
        raise errors.DataError(f"need at least {NAMES_PER_TEMPLATE} names, have {len(names)}")
    rng = random.Random(seed)
    return [rng.sample(names, NAMES_PER_TEMPLATE) for _ in range(n_templates)]


def load_misgendered(folder: Path, seed: Any = 0, keep_artifact: Any = False) -> list[Stimulus]:
    """The 3,000 stimuli (50 templates x 15 seeded names x 4 pronoun sets; see the module docstring)."""
    seed = parse_int(seed, "seed")
    keep_artifact = parse_bool(keep_artifact, "keep_artifact")
    template_path = folder / TEMPLATE_FILE
    pronouns_path = folder / PRONOUNS_FILE
    name_paths = [folder / rel for rel in NAME_FILES.values()]
    templates = read_templates(template_path, keep_artifact)
    sets = read_pronoun_sets(pronouns_path)
    names = read_names(folder)
    version = files_digest([template_path, pronouns_path, *name_paths])
    draws = draw_names(names, len(templates), seed)
    stimuli = []
    for (rec, template_id, case, template), drawn in zip(templates, draws):
        column = next(col for c, col in FORMS.values() if c == case)
        for name, name_gender in drawn:
            for declared in PRONOUN_SETS:
                text = realize(rec, template, name, sets[declared])
                choice = set_choice(text, tuple(sets[s][column] for s in PRONOUN_SETS), PRONOUN_SETS, declared,
                                    case, SLOT)
                if len(set(choice["options"])) != len(choice["options"]):
                    raise rec.error(f"pronoun sets share a {case} form: {choice['options']}", "form")
                stimuli.append(Stimulus(
                    dataset="misgendered",
                    upstream_version=version,
                    item_id=f"{template_id}.{name}.{declared}",
                    template=rec.get("template"),
                    text=text,
                    **choice,
                    referent_role="name",
                    name=name,
                    attrs={"template_id": template_id, "name_gender": name_gender, "seed": seed,
                           "declaration": "explicit_31", "artifact_kept": keep_artifact, "line": rec.line},
                ))
    return stimuli


INFO = DatasetInfo(
    name="misgendered",
    strata=("pronoun_set", "attrs.declaration"),
    studies=("misgendering",),
    pronoun_vocabulary="misgendered",
    loader=load_misgendered,
    licence="CC BY 4.0",
    description="MISGENDERED explicit declaration {nom}/{acc}/{pos_ind}: 50 templates x 15 seeded names x "
                "he/she/they/xe; options he/she/they/xe in the slot's case",
    files={
        TEMPLATE_FILE: "f75d48e8b2fc322be0303a2ec74333684202ad7c07a2f1d33b5583c38e665540",
        PRONOUNS_FILE: "b89b108e78d47dc0a05d8a983d07d8dafd30e4a8b7d30058335f0128d4242fa6",
        "names/female.txt": "1c46d09389ef13b84a1e49a1e9259102bdf1f37459bcf41fcd7f9123d2b1ab7a",
        "names/male.txt": "ffd4b58884f66855c5ded3abb946b8bb76a7199eff7597d434f174bd7ad2e95c",
        "names/unisex.txt": "4835c1dd17d92aa08dc52fb285db13ef13f674c07ed9b45ae2c8eb5ffe0bfc51",
    },
    options={"seed": 0, "keep_artifact": False},
    url="https://github.com/tamannahossainkay/misgendered-backend/tree/383bb8c301371b21a4ec73d5310d3d2e9826636b",
    sources={rel: Upstream(github_raw("tamannahossainkay/misgendered-backend",
                                      "383bb8c301371b21a4ec73d5310d3d2e9826636b", rel))
             for rel in (TEMPLATE_FILE, PRONOUNS_FILE, *NAME_FILES.values())},
    protocols=("prob", "gen"),
)
DATASETS = (INFO,)
