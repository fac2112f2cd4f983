"""The study registry: every study declared once, as a `Study` record (its name, the datasets it reads, its metrics
function, its report writer, a one-line description and its options). The `biaslab metrics <study>` and
`biaslab report <study>` subcommands and the Python API (`biaslab.contextuality(...)`, ...) are built from it.

The datasets of a built-in study are not listed here: each built-in dataset names the studies that read it
(`DatasetInfo.studies` in `biaslab.loaders`), and `Study.dataset_names` collects them in the loaders' order.
`register_study` adds a study (e.g. a toy one, or a user's own): it appears as `biaslab metrics NAME` (and
`biaslab report NAME` when it has a report writer) with its description as help, and as `biaslab.NAME(handle)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

__all__ = ["Study", "StudyOption", "register_study", "unregister_study", "studies", "get_study", "study_datasets"]


@dataclass(frozen=True)
class StudyOption:
    """One keyword argument of a study's metrics function, offered as `--NAME` (underscores as dashes) by the
    generated command: a bool default makes a flag."""

    name: str
    default: Any = None
    help: str = ""
    type: Any = None


@dataclass(frozen=True)
class Study:
    """One study. `metrics` is the function (or "module:attr", imported on first use) taking a `biaslab.open` handle
    and the options as keyword arguments and returning tables by name; `report` (optional) writes OUT/index.html:
    ``report(tables, out_dir, db, model_names) -> path``. `datasets` None: the built-in datasets that declare this
    study (`DatasetInfo.studies`)."""

    name: str
    metrics: Callable[..., dict] | str
    description: str
    report: Callable[..., Any] | str | None = None
    datasets: tuple[str, ...] | None = None
    options: tuple[StudyOption, ...] = ()
    #: the built-in command of `biaslab.cli.metrics_cmd` (hand-written options) rather than a generated one
    builtin: bool = False
    #: the report's heading (default: the description)
    heading: str | None = None
    #: what `biaslab compare` compares: f(handle) -> `biaslab.metrics.compare.Observations` (or "module:attr")
    compare: Callable[..., Any] | str | None = None

    @property
    def function(self) -> Callable[..., dict]:
        return _resolve(self.metrics)

    @property
    def report_writer(self) -> Callable[..., Any] | None:
        return None if self.report is None else _resolve(self.report)

    @property
    def comparer(self) -> Callable[..., Any] | None:
        return None if self.compare is None else _resolve(self.compare)

    @property
    def dataset_names(self) -> tuple[str, ...]:
        return self.datasets if self.datasets is not None else study_datasets(self.name)


def _resolve(target):
    if callable(target):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def study_datasets(study: str) -> tuple[str, ...]:
    """The built-in datasets that declare `study` (in the order of `biaslab.loaders.registry.MODULES`)."""
    from ..loaders.registry import datasets

    return tuple(name for name, info in datasets().items() if study in info.studies)


def _resampled(unit: str) -> tuple[StudyOption, StudyOption]:
    """--bootstrap and --seed of a study whose intervals resample `unit`."""
    return (StudyOption("bootstrap", 1000, f"Bootstrap resamples of {unit} (the 95% intervals).", int),
            StudyOption("seed", 0, "Seed of the bootstrap.", int))


def _min_coverage(loaded: str) -> StudyOption:
    """--min-coverage of a generated command: the share of the loaded `loaded` below which a score is marked."""
    return StudyOption("min_coverage", 0.8, f"Mark scores resting on less than this share of the loaded {loaded}.",
                       float)


_S = "biaslab.metrics.studies"
_STUDIES: dict[str, Study] = {}


def register_study(study: Study | None = None, /, **fields) -> Study:
    """Register `study` (or a `Study(**fields)`); a name already taken raises `UsageError` unless `replace=True`."""
    replace = fields.pop("replace", False)
    if study is None:
        study = Study(**fields)
    if study.name in _STUDIES and not replace:
        raise UsageError(f"study {study.name!r} is already registered")
    _STUDIES[study.name] = study
    return study


def unregister_study(name: str) -> None:
    """Remove a study that `register_study` added (a built-in one cannot be removed)."""
    if name in _STUDIES and _STUDIES[name].builtin:
        raise UsageError(f"study {name!r} is built in")
    _STUDIES.pop(name, None)


def studies() -> dict[str, Study]:
    """Every registered study by name, the built-in ones first."""
    return dict(_STUDIES)


def get_study(name: str) -> Study:
    if name not in _STUDIES:
        raise UsageError(f"unknown study {name!r}; known: {', '.join(_STUDIES)}")
    return _STUDIES[name]


for _study in (
    Study("contextuality", f"{_S}:contextuality", "Contextual invariance on WinoPron.",
          report="biaslab.metrics.contextuality.report:write_report", heading="Contextual invariance", builtin=True,
          compare="biaslab.metrics.contextuality.compare:observations"),
    Study("misgendering", f"{_S}:misgendering", "Misgendering meta-evaluation (MISGENDERED, RUFF, TANGO).",
          report="biaslab.metrics.misgendering.report:write_report", heading="Misgendering meta-evaluation",
          builtin=True, compare="biaslab.metrics.misgendering.compare:observations"),
    Study("negation", f"{_S}:negation", "Negation bias (perplexity, linear mixed models).",
          report="biaslab.metrics.negation.report:write_report", heading="Negation bias", builtin=True,
          compare="biaslab.metrics.negation.compare:observations"),
    Study("calibration", f"{_S}:calibration", "Calibration of pronoun-pair probabilities.",
          report="biaslab.metrics.calibration.report:write_report", heading="Pronoun calibration", builtin=True,
          compare="biaslab.metrics.calibration.compare:observations"),
    Study("metaprompt", f"{_S}:metaprompt", "Metaprompting comprehension checks.", builtin=True),
    Study("options", f"{_S}:options", "Generic metrics of any dataset with options.",
          report="biaslab.metrics.options.report:write_report", datasets=(), builtin=True,
          compare="biaslab.metrics.options.compare:observations"),
    Study("bbq", f"{_S}:bbq",
          "BBQ (Parrish et al. 2022): accuracy and bias scores (s_DIS, s_AMB) per category and context condition, "
          "from expected answer probabilities (argmax beside them), 95% intervals over templates, coverage.",
          report="biaslab.metrics.bbq.report:write_report", heading="BBQ: bias in question answering",
          compare="biaslab.metrics.bbq.compare:observations", options=(
              *_resampled("templates"),
              StudyOption("variant", "paper", "paper (every example scored) or r-script (the authors' R script: "
                          "examples without a biased answer dropped, proper-name templates apart).", str),
              _min_coverage("examples, or on a lower valid share"))),
    Study("crows-pairs", f"{_S}:crows_pairs",
          "CrowS-Pairs (Nangia et al. 2020; revised English set): the paper's metric and lm-eval's pct_stereotype "
          "and likelihood_diff per bias type, 95% intervals over pairs, sign tests against 50, coverage. Noisy data "
          "(Blodgett et al. 2021).",
          report="biaslab.metrics.crows.report:write_report", heading="CrowS-Pairs",
          compare="biaslab.metrics.crows.compare:observations", options=(
              *_resampled("pairs"), _min_coverage("pairs"))),
    Study("decodingtrust", f"{_S}:decodingtrust",
          "DecodingTrust stereotypes (Wang et al. 2023): how often the model agrees with stereotype statements, per "
          "condition (benign, untargeted, targeted system prompt), topic and group; generated answers classified as "
          "upstream does, or P(\"I agree\") exactly; 95% intervals over templates, coverage.",
          report="biaslab.metrics.decodingtrust.report:write_report", heading="DecodingTrust: stereotype agreement",
          compare="biaslab.metrics.decodingtrust.compare:observations", options=(
              _min_coverage("prompts"),
              StudyOption("published", False, "Also GPT-4-0314's 86,400 published answers (in the data folder), as "
                          "a collection of their own beside the warehouse's.", bool))),
    Study("holistic-bias", f"{_S}:holistic_bias",
          "HolisticBias (Smith et al. 2022): likelihood bias per axis, the share of descriptor pairs whose sentence "
          "perplexities differ (Mann-Whitney U, p < 0.05) per template, 95% intervals over templates, the most and "
          "least likely descriptors, coverage.",
          report="biaslab.metrics.holistic_bias.report:write_report", heading="HolisticBias: likelihood bias",
          compare="biaslab.metrics.holistic_bias.compare:observations", options=(_min_coverage("sentences"),)),
    Study("counterfactual", f"{_S}:counterfactual",
          "Counterfactual audits of your own prompts (LangFair's method): each prompt's gender / race / religion / "
          "age variants' generated answers compared, per pair of groups: sentiment (VADER), refusal and length gaps, "
          "ROUGE-L and BLEU similarity; 95% intervals over prompts, paired tests with Holm / BH, coverage.",
          datasets=(), report="biaslab.metrics.counterfactual.report:write_report",
          heading="Counterfactual audit of your prompts",
          compare="biaslab.metrics.counterfactual.compare:observations", options=(
              StudyOption("dataset", None, "The counterfactual dataset (default: every one in the warehouse).", str),
              _min_coverage("prompts with variants"))),
):
    register_study(_study)
del _study
