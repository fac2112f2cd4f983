"""DecodingTrust's stereotype perspective (Wang et al., NeurIPS 2023 Datasets and Benchmarks; CC BY-SA 4.0), from
`<data-dir>/decodingtrust_stereotype/` (its PROVENANCE.md: the files, their pins and the metric's rules).

- `load_prompts`: the 1,152 user prompts (16 stereotype topics x 24 target groups x 3 templates; the fixed task
  description, then the statement) under the 3 system prompts (benign, untargeted, targeted; the targeted one names
  the group, lower-cased except for the proper nouns, as upstream fills it): 3,456 stimuli. The item is the
  statement (topic, group, template), so a limit takes all three conditions of it; `attrs` holds topic, group,
  template (its index 0-2 in the topic and its text), condition and the system prompt. A stimulus' text is the user
  prompt, a blank line and the slot BLANK, with the two options "I agree" and "I disagree" (labels agree /
  disagree): the gen protocol sends the text before the slot (the user prompt exactly, under the condition's system
  prompt), the forced-choice variant (`--protocol choice`) asks for one of the two options.
- `published_answers`: GPT-4-0314's 86,400 published answers (25 per prompt and condition), each cell of the CSVs a
  Python dict literal (`{'agreeability_num': ..., 'output': '...'}`) read with `ast.literal_eval`, which evaluates
  literals only (a file someone sent is data, never code). Returned as rows, for scoring as evidence of that model.

Damaged rows are one line naming file, line and field (`readers.read_table`); nothing is half-read.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from ..schema import Stimulus
from .dataset import DatasetInfo, Upstream, github_raw
from .errors import DataError
from .readers import files_digest, read_table

__all__ = ["DATASET", "FOLDER", "CONDITIONS", "OPTIONS", "SLOT", "load_prompts", "published_answers",
           "system_prompt"]

DATASET = "decodingtrust"
FOLDER = "decodingtrust_stereotype"
PROMPTS = "dataset/user_prompts.csv"
SYSTEM_PROMPTS = "dataset/system_prompts.csv"
CONDITIONS = ("benign", "untargeted", "targeted")
#: the published model whose answers the data folder holds, and how its files are named
PUBLISHED_MODEL = "gpt-4-0314"
#: groups upstream keeps capitalized when it fills the targeted system prompt (proper nouns)
PROPER_NOUNS = ("Muslims", "Asians", "Jews", "Mexicans", "Latin Americans", "Christians", "Canadians", "Europeans",
                "Americans", "Caucasians", "Buddhists")
#: answers per prompt and condition in the published generations
SAMPLES = 25
#: the forced-choice variant's two replies (the forms the task asks for, without their period) and their labels
OPTIONS = ("I agree", "I disagree")
LABELS = ("agree", "disagree")
SLOT = "BLANK"


def system_prompt(template: str, group: str) -> str:
    """A condition's system prompt for `group`: the targeted one names the group (lower-cased unless a proper
    noun)."""
    return template.replace("[target_group]", group if group in PROPER_NOUNS else group.lower())


def _system_prompts(folder: Path) -> dict[str, str]:
    path = folder / SYSTEM_PROMPTS
    prompts = {}
    for rec in read_table(path, ("type", "system_prompt"), multiline=False):
        kind = rec.get("type").strip()
        if kind not in CONDITIONS:
            raise rec.error(f"must be one of {', '.join(CONDITIONS)}, got {kind!r}", "type")
        prompts[kind] = rec.get("system_prompt")
    missing = [c for c in CONDITIONS if c not in prompts]
    if missing:
        raise DataError(path, f"no system prompt for {', '.join(missing)}")
    return prompts


def load_prompts(folder: Path) -> list[Stimulus]:
    """The 3,456 stimuli (1,152 user prompts x 3 conditions); see the module docstring."""
    folder = Path(folder)
    path = folder / PROMPTS
    systems = _system_prompts(folder)
    version = files_digest([path, folder / SYSTEM_PROMPTS])
    out, seen, index = [], {}, {}
    for rec in read_table(path, ("stereotype_topic", "target_group", "stereotype_template", "user_prompt"),
                          multiline=False):
        topic, group = rec.get("stereotype_topic").strip(), rec.get("target_group").strip()
        template, text = rec.get("stereotype_template"), rec.get("user_prompt")
        if "[target_group]" not in template:
            raise rec.error("a template names [target_group]", "stereotype_template")
        if not text.strip():
            raise rec.error("empty prompt", "user_prompt")
        k = index.setdefault((topic, group), [])
        k.append(template)
        item = f"{topic}.{group}.{len(k) - 1}"
        first = seen.setdefault(item, rec.line)
        if first != rec.line:
            raise rec.error(f"repeats the prompt of line {first}", "user_prompt")
        for condition in CONDITIONS:
            out.append(Stimulus(dataset=DATASET, upstream_version=version, item_id=item, text=f"{text}\n\n{SLOT}",
                                template=template, slot=SLOT, options=OPTIONS, option_labels=LABELS,
                                attrs={"topic": topic, "group": group, "template_index": len(k) - 1,
                                       "condition": condition, "system_prompt": system_prompt(systems[condition],
                                                                                              group),
                                       "line": rec.line}))
    return out


def _cell(path: Path, line: int, column: str, text: str) -> str:
    """The answer text of one published cell (a Python dict literal with an 'output' string)."""
    try:
        value: Any = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise DataError(path, "not a Python dict literal with an 'output'", line=line, field=column) from None
    if not isinstance(value, dict) or not isinstance(value.get("output"), str):
        raise DataError(path, "not a dict with an 'output' string", line=line, field=column)
    return value["output"]


def published_answers(folder: Path, topics: list[str] | None = None) -> list[dict[str, Any]]:
    """GPT-4-0314's published answers: one dict per answer (condition, topic, user_prompt, sample, text), from
    `generations/openai/<condition>/gpt-4-0314_<topic>.csv` (all 16 topics, or `topics`)."""
    folder = Path(folder)
    rows = []
    for condition in CONDITIONS:
        for path in sorted((folder / "generations" / "openai" / condition).glob(f"{PUBLISHED_MODEL}_*.csv")):
            topic = path.stem[len(PUBLISHED_MODEL) + 1:]
            if topics is not None and topic not in topics:
                continue
            columns = [f"gen_{i}" for i in range(SAMPLES)]
            for rec in read_table(path, ("model", "system_prompt", "user_prompt", *columns), multiline=False):
                for i, column in enumerate(columns):
                    rows.append({"condition": condition, "topic": topic, "user_prompt": rec.get("user_prompt"),
                                 "sample": i, "text": _cell(path, rec.line, column, rec.get(column))})
    if not rows:
        raise DataError(folder / "generations", f"no published answers ({PUBLISHED_MODEL}_<topic>.csv) found")
    return rows


REPO, COMMIT = "AI-secure/DecodingTrust", "161ae8321ced62f45fcd9ceb412e05b47c603cd4"
PINS = {PROMPTS: "761687d74aecb0fb2bee946b415d68f31131bf314d16a8c0a00b670cc73f9c06",
        SYSTEM_PROMPTS: "2a81124f684dda18506312d6df958f1883cb5c0815c8f9db0c9b59bc8d9cad71"}

#: the paper's generation settings (upstream bias_generation.py: 25 samples, temperature 1, max_tokens 150; the
#: OpenAI API truncates nothing else, hence no top-k (the whole vocabulary) and top-p 1); answers may stop early
GEN_SETTINGS = {"samples": SAMPLES, "temperature": 1.0, "top_k": 262_144, "top_p": 1.0, "max_new_tokens": 150,
                "min_new_tokens": 0}

#: the forced-choice variant: the model's own distribution at temperature 1, as the generations; exact mode keeps the
#: 64 most likely tokens at each step (its --k-store), so P("I agree") is of that top-64 sampler (the mass beyond it
#: at the reply's few tokens is what the valid share misses)
CHOICE_SETTINGS = {"temperature": 1.0, "top_k": 64, "top_p": 1.0}

DATASETS = (DatasetInfo(
    name=DATASET,
    folder=FOLDER,
    loader=load_prompts,
    licence="CC BY-SA 4.0",
    description="DecodingTrust stereotypes (Wang et al. 2023): 1,152 statements (16 topics x 24 groups x 3 "
                "templates) under 3 system prompts; does the model agree?",
    files=PINS,
    url=f"https://github.com/{REPO}/tree/{COMMIT}/data/stereotype",
    sources={rel: Upstream(github_raw(REPO, COMMIT, f"data/stereotype/{rel}")) for rel in PINS},
    protocols=("gen", "choice"),
    studies=("decodingtrust",),
    strata=("attrs.topic", "attrs.group"),
    prompt="decodingtrust_choice_v1",
    settings={"gen": GEN_SETTINGS, "choice": CHOICE_SETTINGS},
    gen_prompt="dialogue",
),)
