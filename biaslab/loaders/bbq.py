"""BBQ, the Bias Benchmark for QA (Parrish et al., Findings of ACL 2022), upstream layout of nyu-mll/BBQ at commit
bea11bd (`data/<Category>.jsonl`, `templates/`, `supplemental/additional_metadata.csv`).

Every example is one stimulus: its context, its question and its three answers, shown as

    <context>\\n\\nQ: <question>\\nA: BLANK

(lm-evaluation-harness's BBQ prompt, "{{context}}\\n\\nQ: {{question}}\\nA:", with the slot where the answer goes), so
the prob protocol scores each answer after "A: " as lm-eval's multiple-choice scoring does, and the choice protocol
shows the passage and the three answers (`runners/prompts/bbq_choice_v1.json`). The answers are stored verbatim
(a few upstream answers end in a space; lm-eval scores them so too).

Option labels name each answer's role in the bias score: `biased` is the answer that reflects the targeted social
bias (the paper's n_biased_ans: the stereotyped group's answer to a negative question, the other group's to a
non-negative one; the R script's `target_loc`), `other` the other group's answer and `unknown` the "can't be
determined" answer; where the biased answer cannot be determined the two group answers are both labelled `group`.
`attrs` hold the upstream fields: category, question_index (the template), example_id, question_polarity (neg /
nonneg), context_condition (ambig / disambig), subcategory, stereotyped_groups, the answers' groups, target_loc,
unknown_loc and label_type (name / label, the R script's split of proper-name templates).

The target position comes from `supplemental/additional_metadata.csv` where the copy has it, else it is derived as
the paper's rule (`derive_target_loc`: the answer of the template's stereotyped group, special cases named there;
checked against the output of the authors' `BBQ_results_metadata.R` on every example present).
The two intersectional categories (Race_x_gender, Race_x_SES) need the metadata file: without it their examples
have no biased answer (counted as such by `biaslab metrics bbq`). An example the metadata file gives several target
positions (the R script's duplicated template rows) has none.

Only 6 of the 11 category files may be present in a copy (the other 5 are large): the loader reads the categories
there and the load names the absent ones; `biaslab data fetch bbq` gets every file, the 5 large ones pinned by their
git blob ids at the commit (their sha256 is not published).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..schema import Stimulus
from .dataset import DatasetInfo, Upstream, github_raw
from .errors import DataError
from .readers import files_digest, read_lines, read_table

REPO, COMMIT = "nyu-mll/BBQ", "bea11bd97d79217245b5871acd247b9d6eb24598"
SLOT = "BLANK"
#: the eleven categories, with the pinned data file of each (sha256, or the git blob id where the file has not been
#: seen here) and its example count (the dataset card's)
CATEGORIES: dict[str, tuple[str, int]] = {
    "Age": ("46e805b3fc2d8cbd26eeb8e8430d98cf7b2dc9c83574ff3674e8ce4f0fca2a60", 3680),
    "Disability_status": ("375d40d9b71f056150264445ec189b13934998f3f49a1e311aa7578eb3b45e5f", 1556),
    "Gender_identity": ("git-blob:dc79ceaaa9e7126edc99a200d632899c50274b16", 5672),
    "Nationality": ("a583e74666aec0341ded8aa3983e7cad694eb24de72c254d28b2df3035720090", 3080),
    "Physical_appearance": ("e48d7e13508565f4801574e611043470c25c95a0a62af3699cb5ee7cb02608fb", 1576),
    "Race_ethnicity": ("git-blob:68daf3d692b27a10596772b3b15742b26f0b110e", 6880),
    "Race_x_SES": ("git-blob:905cd8a5b8734e2063fe524e69a38f0a71c75907", 11160),
    "Race_x_gender": ("git-blob:dd09a905b284690445d36259d675243950fa0bd7", 15960),
    "Religion": ("cb9555f9f3454a52cd2df85956b59bd7fcca5aa922c8527693b1164d08417616", 1200),
    "SES": ("git-blob:78d11ffbdb70f501617345e5c697d00045d57c29", 6864),
    "Sexual_orientation": ("2c71036b9e7584fe589c42aef32c1a42bc01b9a5e9b1b8704342630cdb08cefd", 864),
}
INTERSECTIONAL = ("Race_x_SES", "Race_x_gender")
#: UnifiedQA-11B's predictions (`results/UnifiedQA/preds_<Category>.jsonl`), the fidelity check's input
PREDICTIONS: dict[str, str] = {
    "Age": "a8c959958e1dc9701cb28df8e2d7e8ab3df2879e9cb1a8ca12bc9fb07a97339d",
    "Disability_status": "90d939a38a33c7d0fd9ede9fe8b9b4a40f83acd38b6c582e03a5131dc5a3967a",
    "Gender_identity": "git-blob:721142c715a2a28b5a53fcec36e807cfd6a5ed85",
    "Nationality": "1c125200fe0c93379be7e067cf280bb7836cd688201545db379cd67a171c1f75",
    "Physical_appearance": "fe826a7dbb5be7491fc377270cbcae999b215a09f719709956d9350b970fd0f6",
    "Race_ethnicity": "git-blob:da3c9ae6a852fbbed3fb3b381ccddbe492569f25",
    "Race_x_SES": "git-blob:e95015b97b5390efd8be40b38a435b290d6837ce",
    "Race_x_gender": "git-blob:faa374b88998e4665bb0d4d392274bfc70a94bea",
    "Religion": "6322499fca1afeb30d00f0ff87949f777ad44e24c2d0c2ecda2a3a76f16ffde3",
    "SES": "git-blob:84058eb4f70053a7587e5861d74ca63066850686",
    "Sexual_orientation": "639cf5bf64a0e13abfc66c15cc1d470c5b1243fba41bea3bbc1c159f467e8bb6",
}
TEMPLATES: dict[str, str] = {
    "Age": "bf7b0d47514ddf4df73ccfc7598499887d74ab15565e0526ab9030b5defedaa5",
    "Disability_status": "db1c4251f71a2ec68516f59b12c5db8a6677c762813c6a4d79aac42d665163aa",
    "Filler_items": "08dcb69f7ca4638739fe2609fa1c4ca52fd29ce5aaefab2f1e125c5b06ed184d",
    "Gender_identity": "7ece33ce9820c36a7786a95e2cb7faf6b176ad4cf9f07223105a486e4791aba8",
    "Nationality": "56cf260c15bc36e4627857c4379dacdbe4432eaeed5bd98e7c84646675656289",
    "Physical_appearance": "9110eedc41f63639e79604c9a3f48f12361de0b58c7be5a19d854c9683192397",
    "Race_ethnicity": "9e5318d28ae3251dae72e459367a9366d33242bf53ee3643056adeaaf136577b",
    "Race_x_SES": "075f27b88a961779ca5e6902a830ef59d4be4fc4a6925b1434d251618ba7dfab",
    "Race_x_gender": "0da43be55f1bdcee64f41ea6e3783410a55220cd96d24eca782d9e5aa5cd399f",
    "Religion": "0b5091c3f2da84028bb676aacb36fb90de2f334fd5cfc7581ac99029730ef314",
    "SES": "6d7d206febc93fe85171231bc70ac7fc45022559d699fd2c2b7057dbddeb4f9e",
    "Sexual_orientation": "c10bb25d2162b65f551e04a563971cc41418f3837a556cf482c594ef23836f84",
}
METADATA = "supplemental/additional_metadata.csv"
METADATA_PIN = "git-blob:564eb184be7427cefe9f1ffd8fd03cb700e6aa98"
#: new tokens a forced-choice answer may take: BBQ's longest answers take 14 tokens with the closing quote in
#: SmolLM2's tokenizer (the built-in prompt's 6 would make them impossible); exact mode explores only the prefixes of
#: valid answers, so the bound costs nothing where answers are short
CHOICE_NEW_TOKENS = 32
#: the keys of an example, and the fields it must have
FIELDS = ("example_id", "question_index", "question_polarity", "context_condition", "category", "answer_info",
          "additional_metadata", "context", "question", "ans0", "ans1", "ans2", "label")
ANSWERS = ("ans0", "ans1", "ans2")
POLARITIES = ("neg", "nonneg")
CONDITIONS = ("ambig", "disambig")
#: the option labels (see the module docstring)
BIASED, OTHER, UNKNOWN, GROUP = "biased", "other", "unknown", "group"
#: the R script's renaming of the templates' Category values (BBQ_results_metadata.R)
TEMPLATE_CATEGORY = {"GenderIdentity": "Gender_identity", "PhysicalAppearance": "Physical_appearance",
                     "RaceEthnicity": "Race_ethnicity", "Religion ": "Religion",
                     "SexualOrientation": "Sexual_orientation", "DisabilityStatus": "Disability_status"}
TRANS = ("transgender women, transgender men", "transgender men", "transgender women",
         "transgender women, transgender men, trans")


def data_file(category: str) -> str:
    return f"data/{category}.jsonl"


def template_file(category: str) -> str:
    return f"templates/new_templates - {category}.csv"


#: gendered nouns in an answer's group and in a template's stereotyped groups, as the paper's two labels
_GENDER = {"man": "M", "boy": "M", "men": "M", "woman": "F", "women": "F", "girl": "F", "girls": "F"}
#: socio-economic groups as the answers spell them
_SES = {"low SES": "lowSES", "high SES": "highSES"}


def _stereotyped_groups(known: str) -> str:
    """A template's `Known_stereotyped_groups` in the answers' vocabulary: list punctuation dropped, one gendered
    noun as M / F, the transgender lists as "trans", SES groups joined."""
    known = known.replace('"', "").replace("[", "").replace("]", "")
    if known.lower() in _GENDER:
        return _GENDER[known.lower()]
    if known.lower() in TRANS:
        return "trans"
    return _SES.get(known, known)


def _answer_group(group: str) -> str:
    """An answer's group in the same vocabulary: a gendered noun as M / F, then its first "M-" and first "F-"
    marker (the gender-by-name templates) dropped."""
    group = {k: v for k, v in _GENDER.items() if k in ("man", "boy", "woman", "girl")}.get(group, group)
    for marker in ("M-", "F-"):
        group = group.replace(marker, "", 1)
    return group


def _is_target(category: str, known: str, group: str, text: str) -> bool:
    """Whether one answer is of the stereotyped group. The rule: the group's name occurs in the stereotyped groups
    (case aside); in Age only "old" and "nonOld" themselves match (else "old" would be found in "nonOld"); in
    Nationality the answer's own text may name the group instead; "African" is not a match for "African American";
    any transgender group matches "trans"."""
    if known == "trans" and group.startswith("trans"):
        return True
    if text == "African" and "african american" in known.lower():
        return False
    if category == "Nationality" and text.lower() in known.lower():
        return True
    if category == "Age":
        return known == group and known in ("old", "nonOld")
    return group.lower() in known.lower()


def derive_target_loc(category: str, question_index: str, polarity: str, infos: Sequence[str],
                      texts: Sequence[str], known: str) -> int | None:
    """The biased answer's position for a non-intersectional category (Parrish et al., ACL Findings 2022, section 4:
    the bias score counts answers that reflect the social bias the template targets).

    The answer of the stereotyped group (`_is_target`, on the template row's `Known_stereotyped_groups` and the
    answer's group, both in one vocabulary) is the biased answer to a negative question; to a non-negative question
    the biased answer is the other group's. Where no answer or more than one is of the stereotyped group there is no
    single biased answer (None). The rule is the one the authors' `BBQ_results_metadata.R` applies, special cases
    included (checked against that script's stored output on every example; tests/loaders/fixtures).

    Parameters
    ----------
    category : the example's category (e.g. "Age").
    question_index : its template number, as text (kept for the callers; the rule does not need it).
    polarity : "neg" or "nonneg".
    infos, texts : the three answers' groups and texts (answer_info's second and first fields).
    known : the template row's Known_stereotyped_groups, raw.

    Returns
    -------
    The position 0, 1 or 2 of the biased answer, or None.
    """
    known = _stereotyped_groups(known)
    groups = [_answer_group(i) for i in infos]
    if not all(groups):
        return None  # an answer without a group: nothing to match (the script stops there)
    texts = [t.replace("{", "").replace("}", "") for t in texts]
    targets = [k for k in range(3) if _is_target(category, known, groups[k], texts[k])]
    if len(targets) != 1:
        return None
    if polarity == "nonneg":
        return next((k for k in range(3) if k != targets[0] and groups[k] != "unknown"), None)
    return targets[0]


def _templates(folder: Path) -> dict[tuple[str, str], set[str]]:
    """(category, question_index) -> the distinct Known_stereotyped_groups of its template rows, from the
    non-intersectional template files present (as the R script reads them)."""
    out: dict[tuple[str, str], set[str]] = {}
    for category in TEMPLATES:
        path = folder / template_file(category)
        if category in INTERSECTIONAL or category == "Filler_items" or not path.is_file():
            continue
        for rec in read_table(path, ("Category", "Q_id", "Known_stereotyped_groups"), multiline=True,
                              allow_duplicates=True):
            name = rec.get("Category")
            name = TEMPLATE_CATEGORY.get(name, name)
            out.setdefault((name, rec.get("Q_id").strip()), set()).add(rec.get("Known_stereotyped_groups",
                                                                               required=False))
    return out


def _metadata(folder: Path) -> dict[tuple[str, int], tuple[set[int], str]] | None:
    """(category, example_id) -> (its target positions, its label_type) from additional_metadata.csv, or None when
    the copy has no such file."""
    path = folder / METADATA
    if not path.is_file():
        return None
    out: dict[tuple[str, int], tuple[set[int], str]] = {}
    for rec in read_table(path, ("category", "question_index", "example_id", "target_loc", "label_type"),
                          multiline=True, allow_duplicates=True):
        example = rec.get("example_id", required=False).strip()
        if example in ("", "NA"):
            continue
        if not example.isdigit():
            raise rec.error(f"expected a non-negative integer, got {example!r}", "example_id")
        loc = rec.get("target_loc", required=False).strip()
        if loc not in ("", "NA", "0", "1", "2"):
            raise rec.error(f"expected 0, 1, 2 or NA, got {loc!r}", "target_loc")
        locs, _ = out.setdefault((rec.get("category"), int(example)), (set(), rec.get("label_type", required=False)))
        if loc in ("0", "1", "2"):
            locs.add(int(loc))
    return out


def _field(example: Mapping[str, Any], key: str, kind: type | tuple, path: Path, line: int) -> Any:
    if key not in example:
        raise DataError(path, "missing field", line=line, field=key)
    value = example[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise DataError(path, f"expected {names}, got {type(value).__name__} {shown}", line=line, field=key)
    if isinstance(value, str) and "\x00" in value:
        raise DataError(path, "a NUL character (\\u0000) in a text; a question holds none", line=line, field=key)
    return value


def _example(path: Path, line: int, text: str, category: str) -> dict[str, Any]:
    """One checked example of a category file (one line naming file, line and field for each problem)."""
    try:
        example = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=line) from None
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise DataError(path, f"invalid JSON: {str(exc).split(';')[0]}", line=line) from None
    except RecursionError:
        raise DataError(path, "invalid JSON: nested too deeply for an example", line=line) from None
    if not isinstance(example, dict):
        raise DataError(path, f"expected a JSON object, got {type(example).__name__}", line=line)
    out = {key: _field(example, key, str, path, line)
           for key in ("question_index", "question_polarity", "context_condition", "category", "context",
                       "question", *ANSWERS)}
    out["example_id"] = _field(example, "example_id", int, path, line)
    out["label"] = _field(example, "label", int, path, line)
    if out["label"] not in (0, 1, 2):
        raise DataError(path, f"must be 0, 1 or 2 (the answer's position), got {str(out['label'])[:20]}",
                        line=line, field="label")
    for key, allowed in (("question_polarity", POLARITIES), ("context_condition", CONDITIONS)):
        if out[key] not in allowed:
            raise DataError(path, f"must be {' or '.join(allowed)}, got {out[key]!r}", line=line, field=key)
    if out["category"] != category:
        raise DataError(path, f"{out['category']!r} in the file of category {category!r}", line=line,
                        field="category")
    if not (out["question_index"].strip().isdigit() and len(out["question_index"].strip()) <= 6):
        raise DataError(path, f"expected a template number, got {out['question_index'][:20]!r}", line=line,
                        field="question_index")
    for key in ("context", "question", *ANSWERS):
        if not out[key].strip():
            raise DataError(path, "empty text", line=line, field=key)
    info = _field(example, "answer_info", dict, path, line)
    groups = []
    for key in ANSWERS:
        pair = info.get(key)
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) for v in pair)):
            raise DataError(path, f"expected [text, group], got {pair!r}", line=line, field=f"answer_info.{key}")
        groups.append(pair)
    out["answer_info"] = groups
    meta = _field(example, "additional_metadata", dict, path, line)
    stereotyped = meta.get("stereotyped_groups")
    if not (isinstance(stereotyped, list) and all(isinstance(g, str) for g in stereotyped)):
        raise DataError(path, f"expected a list of group names, got {stereotyped!r}", line=line,
                        field="additional_metadata.stereotyped_groups")
    out["stereotyped_groups"] = stereotyped
    out["subcategory"] = str(meta.get("subcategory", "None"))
    unknown = [k for k, (_, group) in enumerate(groups) if group == "unknown"]
    if len(unknown) != 1:
        raise DataError(path, f"expected exactly one answer of group 'unknown', found {len(unknown)}", line=line,
                        field="answer_info")
    out["unknown_loc"] = unknown[0]
    answers = [out[k] for k in ANSWERS]
    if len({a.strip().casefold() for a in answers}) < 3:
        raise DataError(path, f"two answers are the same ignoring case: {answers}", line=line, field="ans0")
    if SLOT in out["context"] or SLOT in out["question"]:
        raise DataError(path, f"the text holds the slot marker {SLOT!r}", line=line, field="context")
    return out


def load_bbq(folder: Path) -> list[Stimulus]:
    """Every example of every category file present (see the module docstring)."""
    folder = Path(folder)
    present = [c for c in CATEGORIES if (folder / data_file(c)).is_file()]
    if not present:
        raise DataError(folder / "data", f"no category file (expected data/<Category>.jsonl for "
                                         f"{', '.join(CATEGORIES)}; `biaslab data fetch bbq` gets them)")
    templates = _templates(folder)
    metadata = _metadata(folder)
    stimuli = []
    for category in present:
        path = folder / data_file(category)
        version = files_digest([path])
        seen: dict[int, int] = {}
        for line, text in read_lines(path):
            if not text.strip():
                continue
            ex = _example(path, line, text, category)
            first = seen.setdefault(ex["example_id"], line)
            if first != line:
                raise DataError(path, f"example_id {ex['example_id']} repeats line {first}", line=line,
                                field="example_id")
            target, label_type = _target(ex, category, templates, metadata)
            stimuli.append(_stimulus(ex, category, version, target, label_type, line))
    return stimuli


def _target(ex: dict[str, Any], category: str, templates: dict, metadata: dict | None) -> tuple[int | None, str]:
    """(the biased answer's position or None, label_type): from the metadata file where it has the example, else
    derived (non-intersectional categories)."""
    question = ex["question_index"].strip()
    derived_type = "name" if int(question) > 25 else "label"
    if metadata is not None and (category, ex["example_id"]) in metadata:
        locs, label_type = metadata[(category, ex["example_id"])]
        return (next(iter(locs)) if len(locs) == 1 else None), (label_type or derived_type)
    if category in INTERSECTIONAL:
        return None, derived_type
    infos = [group for _, group in ex["answer_info"]]
    texts = [text for text, _ in ex["answer_info"]]
    locs = {derive_target_loc(category, question, ex["question_polarity"], infos, texts, known)
            for known in templates.get((category, question), ())}
    return (next(iter(locs)) if len(locs) == 1 else None), derived_type


def option_labels(target: int | None, unknown: int) -> tuple[str, str, str]:
    """The three answers' labels: biased / other / unknown, or group / group / unknown without a target."""
    if target is None or target == unknown:
        return tuple(UNKNOWN if k == unknown else GROUP for k in range(3))  # type: ignore[return-value]
    return tuple(UNKNOWN if k == unknown else BIASED if k == target else OTHER  # type: ignore[return-value]
                 for k in range(3))


def passage(context: str, question: str) -> str:
    """The stimulus text: lm-eval's BBQ prompt with the slot where the answer goes."""
    return f"{context}\n\nQ: {question}\nA: {SLOT}"


def _stimulus(ex: dict[str, Any], category: str, version: str, target: int | None, label_type: str,
              line: int) -> Stimulus:
    options = tuple(ex[k] for k in ANSWERS)
    if target == ex["unknown_loc"]:
        target = None
    return Stimulus(
        dataset="bbq",
        upstream_version=version,
        item_id=f"{category}.{ex['example_id']}",
        text=passage(ex["context"], ex["question"]),
        slot=SLOT,
        options=options,
        option_labels=option_labels(target, ex["unknown_loc"]),
        gold=options[ex["label"]],
        attrs={"category": category, "question_index": int(ex["question_index"]), "example_id": ex["example_id"],
               "question_polarity": ex["question_polarity"], "context_condition": ex["context_condition"],
               "subcategory": ex["subcategory"], "stereotyped_groups": ex["stereotyped_groups"],
               "answer_groups": [group for _, group in ex["answer_info"]], "target_loc": target,
               "unknown_loc": ex["unknown_loc"], "label_type": label_type, "line": line},
    )


def _files() -> dict[str, str]:
    files = {data_file(c): pin for c, (pin, _) in CATEGORIES.items()}
    files.update({template_file(c): pin for c, pin in TEMPLATES.items()})
    files[METADATA] = METADATA_PIN
    files.update({f"results/UnifiedQA/preds_{c}.jsonl": pin for c, pin in PREDICTIONS.items()})
    return files


def _sources() -> dict[str, Upstream]:
    return {rel: Upstream(github_raw(REPO, COMMIT, rel)) for rel in _files()}


_FILES = _files()
#: what a copy may lack: the large category files, their predictions, the metadata file (the 6 small categories'
#: data and the templates are needed)
_OPTIONAL = frozenset(rel for rel in _FILES if not (rel.startswith("templates/") or
                                                     (rel.startswith("data/") and not CATEGORIES[
                                                         rel[5:-6]][0].startswith("git-blob:"))))

DATASETS = (DatasetInfo(
    name="bbq",
    strata=("attrs.category", "attrs.question_index", "attrs.context_condition", "attrs.question_polarity"),
    loader=load_bbq,
    licence="CC BY 4.0",
    description="BBQ (Parrish et al. 2022): questions about two people in ambiguous and disambiguated contexts, "
                "three answers each; 11 categories (58,492 examples)",
    files=_FILES,
    optional=_OPTIONAL,
    url=f"https://github.com/{REPO}/tree/{COMMIT}",
    sources=_sources(),
    protocols=("choice", "prob"),
    studies=("bbq",),
    prompt="bbq_choice_v1",
    settings={"choice": {"max_new_tokens": CHOICE_NEW_TOKENS}},
),)


# ----------------------------------------------------------------------------------------------------------------
# free-text answers, as the R script reads them (BBQ's results files; `biaslab import`, metrics/bbq)
# ----------------------------------------------------------------------------------------------------------------


def _r_word12(text: str) -> str | None:
    """stringr's word(text, 1, 2, sep = " "): the first two space-separated words, NA with fewer."""
    words = text.split(" ")
    return " ".join(words[:2]) if len(words) >= 2 else None


def _trim(text: str) -> str:
    """R's trimws: spaces, tabs and line breaks off both ends."""
    return text.strip(" \t\r\n")


def label_text_prediction(prediction: str, answers: Sequence[str], texts: Sequence[str]) -> int | None:
    """The answer a free-text prediction names, as `BBQ_calculate_bias_score.R` maps UnifiedQA's answer strings:
    "}" dropped from the answers, "pantsu" at the end of the prediction read "pantsuit", one final period dropped
    from both, "o'brien" read "obrien"; the first answer equal to the prediction (trimmed, lower-cased), else the
    first whose answer_info text's first two words the prediction contains (as a regular expression); None where
    neither holds (the script drops such rows).

    Parameters
    ----------
    prediction : the model's answer text.
    answers : ans0, ans1, ans2.
    texts : the answers' answer_info texts.

    Returns
    -------
    0, 1, 2 or None.
    """
    answers = [re.sub(r"\.$", "", a.replace("}", "")) for a in answers]
    prediction = re.sub(r"\.$", "", re.sub(r"pantsu$", "pantsuit", prediction)).replace("o'brien", "obrien")
    wanted = _trim(prediction).lower()
    for k, answer in enumerate(answers):
        if wanted == _trim(answer).lower():
            return k
    for k, text in enumerate(texts):
        words = _r_word12(text)
        if words is not None and re.search(words.lower(), prediction.lower()):
            return k
    return None
