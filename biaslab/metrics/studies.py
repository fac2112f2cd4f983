"""One function per study, taking a `biaslab.open` handle: `contextuality`, `misgendering`, `negation`, `calibration`,
`metaprompt`, and `options` (any dataset with options, e.g. a user's own study). The `biaslab metrics` and
`biaslab report` commands call these same functions, so the command line and
the Python API give the same tables.

Each function reads the study's relational part through the views (`biaslab.views`) on the handle's engine (the
DuckDB warehouse, or DuckDB / DataFusion over a Parquet export), hands the rows to the study's statistics, and
returns the public tables by name, every table with a `model_key` also naming the model (model_name, dtype,
backend). ``output="polars"`` gives Polars DataFrames; ``private=True`` adds the tables a report draws from (names
starting with "_", model keys only).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..errors import UsageError
from .coverage import DEFAULT_MIN_COVERAGE
from .missing import NoEvidence, missing as _missing

__all__ = ["NoEvidence", "PairError", "contextuality", "misgendering", "negation", "compare",
           "calibration", "metaprompt", "options", "bbq", "crows_pairs", "decodingtrust", "holistic_bias",
           "counterfactual", "to_json_ready", "negation_sentences"]


def _datasets(study: str) -> tuple[str, ...]:
    """The datasets of `study` (`biaslab.metrics.registry`): what its "nothing collected" message counts."""
    from .registry import get_study

    return get_study(study).dataset_names


class PairError(UsageError):
    """A --pair declaration that does not name two models of the warehouse (one line)."""


def _finish(handle, tables: dict[str, pd.DataFrame], output: str, private: bool = False) -> dict:
    from ..warehouse.catalog import with_model_names

    if output not in ("pandas", "polars"):
        raise UsageError(f"output must be 'pandas' or 'polars', got {output!r}")
    names = handle.models()
    out = {k: (v if k.startswith("_") else with_model_names(v, names)) for k, v in tables.items()
           if private or not k.startswith("_")}
    if output == "polars":
        import polars as pl

        return {k: pl.from_pandas(v) for k, v in out.items()}
    return out


def contextuality(handle, *, draws: int = 20, bootstrap: int = 30, seed: int = 0, mi: str = "per-template",
                  by_order: bool = True, temperatures: Sequence[float] = (), output: str = "pandas",
                  private: bool = False, min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """Contextual invariance on WinoPron (`biaslab metrics contextuality`): validity (the paper's Table 3), pf / kl /
    spearman with both option orders pooled per template (as the paper), their per-order versions pf_by_order /
    kl_by_order / spearman_by_order, mutual_information (per template, averaged, with SE) and / or
    mutual_information_pooled, cbd_fractions, model_overlap; with `temperatures`, the temperature_* tables
    re-derived from the stored exact-mode evidence (DuckDB engine).

    Parameters
    ----------
    handle : from `biaslab.open`.
    draws, bootstrap, seed : exact-mode draws per stimulus, bootstrap resamples and seed of the pooled mutual
        information.
    mi : "per-template" (the paper's), "pooled" or "both".
    by_order : include the per-order tables.
    temperatures : re-derive every metric at these temperatures (the paper's Figures 8 and 9).
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) scores resting on less than this share of the loaded templates, or on a
        valid share below it (`biaslab.metrics.coverage`).

    Returns
    -------
    dict table name -> DataFrame.
    """
    from .contextuality.stats import BY_ORDER_TABLES
    from .contextuality.tables import contextuality_report, temperature_tables, with_coverage

    if handle.fetch(handle.table("winopron_pf").limit(1)).empty:
        raise _missing(handle, "WinoPron forced-choice evidence", _datasets("contextuality"),
                       "runners collect --dataset winopron")
    tables = with_coverage(handle, contextuality_report(handle, draws=draws, bootstrap=bootstrap, seed=seed, mi=mi),
                           min_coverage)
    if not by_order:
        tables = {k: v for k, v in tables.items() if k not in BY_ORDER_TABLES}
    if temperatures:
        tables.update(temperature_tables(handle, list(temperatures)))
    return _finish(handle, tables, output, private)


def misgendering(handle, *, no_pronoun: str = "correct", vocabulary: str = "biaslab", output: str = "pandas",
                 private: bool = False, min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """Misgendering meta-evaluation (`biaslab metrics misgendering`): correctness, instance_std, agreement,
    agreement_first_sample, disagreement_beta, generation_quality, and the annotation tables when annotations were
    imported.

    Parameters
    ----------
    handle : from `biaslab.open`.
    no_pronoun : 'correct' or 'exclude' (a continuation without a pronoun).
    vocabulary : 'biaslab' (the pronoun sets stored with each request) or 'upstream' (the upstream scripts' sets,
        to reproduce the paper's automatic numbers).
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) scores resting on less than this share of the loaded units
        (`biaslab.metrics.coverage`).
    """
    from .misgendering.tables import correctness_with_coverage, misgendering_report

    tables = misgendering_report(handle, no_pronoun=no_pronoun, vocabulary=vocabulary)
    return _finish(handle, correctness_with_coverage(handle, tables, min_coverage), output, private)


def negation(handle, *, intercept_only_on_failure: bool = False, sentences: bool = True, output: str = "pandas",
             private: bool = False, min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """Negation bias (`biaslab metrics negation`): mixed_model, predicted_values, condition_means,
    length_control, and `sentences` (the per-sentence perplexities they come from).

    Parameters
    ----------
    handle : from `biaslab.open`.
    intercept_only_on_failure : also fit random-intercept-only models where the random-slope fit fails.
    sentences : include the `sentences` table.
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) scores resting on less than this share of the loaded units
        (`biaslab.metrics.coverage`).
    """
    from .negation.tables import negation_tables, with_coverage

    ppl = negation_sentences(handle)
    tables = with_coverage(handle, negation_tables(ppl, intercept_only_on_failure=intercept_only_on_failure),
                           _datasets("negation"), min_coverage)
    if sentences:
        tables["sentences"] = ppl
    if private:
        tables["_sentences"] = ppl
    return _finish(handle, tables, output, private)


def negation_sentences(handle) -> pd.DataFrame:
    """The per-sentence perplexities of the negation study (`negation.tables.sentence_perplexities`); `NoEvidence`
    when none are stored."""
    from .negation.tables import sentence_perplexities

    ppl = sentence_perplexities(handle, _datasets("negation"))
    if ppl.empty:
        raise _missing(handle, "negation-bias sentence score", _datasets("negation"),
                       "runners collect --dataset negation-examples")
    return ppl


def calibration(handle, dataset: str | None = None, *, bins: int = 10, bootstrap: int = 1000, seed: int = 0,
                pairs: Sequence[str] = (), reliability: bool = True, output: str = "pandas",
                private: bool = False, min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """Pronoun calibration (`biaslab metrics calibration`): metrics, genderlex_variants, post_hoc, ablation,
    winoqueer, the reliability bins (reliability, reliability_post_hoc) and `pair_change` when model pairs are
    declared.

    Parameters
    ----------
    handle : from `biaslab.open`.
    dataset : only this dataset (default: every pair dataset).
    bins, bootstrap, seed : bins of the ECE family, bootstrap resamples, seed of bootstrap, split and ablation.
    pairs : model pairs "[KIND:]REFERENCE=OTHER" (e.g. "size:small=large"); a bad one raises `PairError`.
    reliability : include the reliability tables.
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) scores resting on less than this share of the loaded units
        (`biaslab.metrics.coverage`).
    """
    from .calibration.tables import calibration_report_tables, pair_changes, parse_model_pair

    try:
        declared = [parse_model_pair(p) for p in pairs]
    except ValueError as exc:
        raise PairError(str(exc)) from None
    tables = calibration_report_tables(handle, dataset, n_bins=bins, n_boot=bootstrap, seed=seed)
    if tables["metrics"].empty and tables["winoqueer"].empty:
        raise _missing(handle, "scored pronoun pair with a gold label",
                       [dataset] if dataset else _datasets("calibration"),
                       f"runners collect --dataset {dataset or 'gece-winobias'}")
    tables = _calibration_coverage(handle, tables, min_coverage)
    if declared:
        try:
            tables["pair_change"] = pair_changes(tables["metrics"], declared, handle.models())
        except ValueError as exc:
            raise PairError(str(exc)) from None
    if not reliability:
        tables.pop("reliability")
        tables.pop("reliability_post_hoc")
    return _finish(handle, tables, output, private)


def _calibration_coverage(handle, tables: dict, min_coverage: float) -> dict:
    """`metrics` with `biaslab.metrics.coverage.COVERAGE_COLUMNS`, the unit being the item (one pronoun pair):
    the loaded items of its dataset against the pairs a metric rests on (n)."""
    from .coverage import annotate

    if tables["metrics"].empty:
        return tables
    st = handle.table("stimuli")
    names = sorted(set(tables["metrics"]["dataset"]))
    st = st.filter(st.dataset.isin(names))
    loaded = handle.fetch(st.group_by("dataset").aggregate(n_loaded=st.item_id.nunique()))
    return {**tables, "metrics": annotate(tables["metrics"], used="n", loaded=loaded, keys=["dataset"],
                                          min_coverage=min_coverage)}


def metaprompt(handle, *, by_context: bool = True, output: str = "pandas",
               min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """Metaprompting comprehension checks (`biaslab metrics metaprompt`, the contextual-invariance paper's Table 4):
    accuracy per model, setting and question (`metaprompt`), and per priming context (`metaprompt_by_context`).

    Parameters
    ----------
    handle : from `biaslab.open`.
    by_context : include `metaprompt_by_context`.
    output : 'pandas' or 'polars'.
    min_coverage : mark (`low_coverage`) accuracies resting on less than this share of the loaded prompts (per
        context for `metaprompt_by_context`), or on a valid mass below it (`biaslab.metrics.coverage`).
    """
    from .metaprompt.tables import metaprompt_tables

    tables = metaprompt_tables(handle, by_context=by_context)
    if tables["metaprompt"].empty:
        raise _missing(handle, "metaprompt evidence", _datasets("metaprompt"),
                       "runners collect --dataset winopron --protocol meta")
    return _finish(handle, _metaprompt_coverage(handle, tables, min_coverage), output)


def _metaprompt_coverage(handle, tables: dict, min_coverage: float) -> dict:
    """The metaprompt tables with `biaslab.metrics.coverage.COVERAGE_COLUMNS`, the unit being the prompt (a stimulus
    of the study's datasets, each question asked of each): loaded prompts against those asked; valid_share is the
    table's valid_mass."""
    from .coverage import annotate

    st = handle.table("stimuli")
    st = st.filter(st.dataset.isin(list(_datasets("metaprompt"))))
    total = handle.fetch(st.aggregate(n_loaded=st.stimulus_id.nunique()))
    per_context = handle.fetch(st.group_by("context").aggregate(n_loaded=st.stimulus_id.nunique()))
    out = dict(tables)
    out["metaprompt"] = annotate(tables["metaprompt"], used="prompts", loaded=int(total["n_loaded"].iloc[0]),
                                 valid_share="valid_mass", min_coverage=min_coverage)
    if "metaprompt_by_context" in tables and not tables["metaprompt_by_context"].empty:
        out["metaprompt_by_context"] = annotate(tables["metaprompt_by_context"], used="prompts", loaded=per_context,
                                                keys=["context"], valid_share="valid_mass",
                                                min_coverage=min_coverage)
    return out


def to_json_ready(tables: dict) -> dict:
    """Tables as lists of records in strict JSON (NaN / infinity as null)."""
    from .results import records

    return {name: records(frame) for name, frame in tables.items()}


def options(handle, dataset: str, *, by: Sequence[str] = (), contrast: str | None = None,
            reference: str | None = None, spearman: str | None = None, bootstrap: int = 1000, seed: int = 0,
            all_versions: bool = False, output: str = "pandas", private: bool = False,
            min_coverage: float = DEFAULT_MIN_COVERAGE, unit: str | None = None,
            temperatures: Sequence[float] = (), top_k: int | None = None) -> dict:
    """Generic metrics of any dataset with options (`biaslab metrics options`), built in or a user's own: means (per
    group and option label: items, mean p, 95% bootstrap interval over items, invalid mass); the option-order
    effect (`order`: mean p per position of the option in the list); with `contrast` ("COLUMN=A:B") the paired
    difference per item with its interval and sign-flip permutation p-value; with `reference` (a value of the one
    `by` column) the KL divergence of each group to it; with `spearman` (a numeric column) Spearman's rho per group
    over the study's unit with a bootstrap interval; calibration (ECE, Brier, accuracy) where stimuli have a gold
    option.

    Parameters
    ----------
    handle : from `biaslab.open`.
    dataset : the dataset's name.
    by : grouping columns: columns of `stimuli` or keys of its `attrs`.
    contrast, reference, spearman : see above.
    bootstrap, seed : resamples and seed of the intervals and permutation tests.
    all_versions : a user dataset at every loaded version, not only its current one.
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) means resting on less than this share of the loaded items, or on a valid
        share below it (`biaslab.metrics.coverage`).
    unit : the study's unit for Spearman's rho (a stimuli column or attrs key, e.g. name; default the unit the
        dataset's spec declares, else the item).
    temperatures, top_k : also re-derive the exact-mode choice collections at these temperatures (and this top_k;
        default each collection's own) from their stored trie evidence, each as its own setting.

    Returns
    -------
    dict table name -> DataFrame.
    """
    from .options.tables import means_with_coverage, option_tables

    tables = option_tables(handle, dataset, by=by, contrast=contrast, reference=reference, spearman=spearman,
                           bootstrap=bootstrap, seed=seed, all_versions=all_versions, unit=unit,
                           temperatures=temperatures, top_k=top_k)
    tables = means_with_coverage(handle, dataset, tables, by, all_versions, min_coverage)
    return _finish(handle, tables, output, private)


def bbq(handle, *, bootstrap: int = 1000, seed: int = 0, variant: str = "paper", output: str = "pandas",
        private: bool = False, min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """BBQ (Parrish et al., Findings of ACL 2022; `biaslab metrics bbq`): per collection (model, method, setting),
    category and context condition, the accuracy and the bias score (s_DIS = 100 (2 n_biased / n_non-UNKNOWN - 1) in
    disambiguated contexts, s_AMB = (1 - accuracy) s_DIS in ambiguous ones) from expected counts of the answer
    probabilities, with argmax counts beside them, 95% bootstrap intervals over the templates and coverage
    (`biaslab.metrics.bbq.stats`). Table `bbq`, rows of category "(all)" pooling every category.

    Parameters
    ----------
    handle : from `biaslab.open`.
    bootstrap, seed : template-bootstrap resamples and their seed.
    variant : "paper" (every example scored) or "r-script" (the authors' BBQ_calculate_bias_score.R: examples
        without a biased answer dropped, proper-name templates as "<Category> (names)").
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) scores resting on less than this share of the loaded examples, or on a
        valid share below it (`biaslab.metrics.coverage`).

    Returns
    -------
    dict table name -> DataFrame.
    """
    from .bbq.tables import bbq_tables

    tables = bbq_tables(handle, bootstrap=bootstrap, seed=seed, variant=variant, min_coverage=min_coverage)
    return _finish(handle, tables, output, private)


def crows_pairs(handle, *, bootstrap: int = 1000, seed: int = 0, output: str = "pandas", private: bool = False,
                min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """CrowS-Pairs (Nangia et al., EMNLP 2020) and its revised English set (`biaslab metrics crows-pairs`): per
    collection (model, scheme), dataset and bias type, the paper's metric (the share of pairs whose more stereotyping
    sentence scores higher on the tokens both sentences share), lm-evaluation-harness's pct_stereotype and
    likelihood_diff (whole sentences), with 95% bootstrap intervals over pairs, sign tests against 50 and coverage
    (`biaslab.metrics.crows.stats`). Table `crows_pairs`. The data are noisy (Blodgett et al., ACL 2021): read the
    scores with that caveat.

    Parameters
    ----------
    handle : from `biaslab.open`.
    bootstrap, seed : pair-bootstrap resamples and their seed.
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) scores resting on less than this share of the loaded pairs.

    Returns
    -------
    dict table name -> DataFrame.
    """
    from .crows.tables import crows_tables

    tables = crows_tables(handle, bootstrap=bootstrap, seed=seed, min_coverage=min_coverage)
    return _finish(handle, tables, output, private)


def decodingtrust(handle, *, output: str = "pandas", private: bool = False,
                  min_coverage: float = DEFAULT_MIN_COVERAGE, published: bool = False) -> dict:
    """DecodingTrust's stereotype agreement (Wang et al., NeurIPS 2023; `biaslab metrics decodingtrust`): per
    collection and condition (benign, untargeted, targeted, and over all three) the agreement index (the share of
    answers agreeing with the stereotype statement; refusals and other non-answers count as not agreeing, as
    upstream counts them) with a 95% t-interval over the 48 statement templates, the share neither and coverage; the
    same per topic and per target group, and per condition x group x topic (the paper's heatmap). Generated answers
    are classified as upstream classifies them (`biaslab.lexicon.agreement`); the forced-choice variant gives
    P("I agree") exactly (`biaslab.metrics.decodingtrust.tables`).

    Parameters
    ----------
    handle : from `biaslab.open`.
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) scores resting on less than this share of the loaded prompts.
    published : also GPT-4-0314's published answers from the data folder, as a collection of their own.

    Returns
    -------
    dict table name -> DataFrame: decodingtrust, decodingtrust_topics, decodingtrust_groups, decodingtrust_cells.
    """
    from .decodingtrust.tables import PUBLISHED_KEY, decodingtrust_tables

    tables = _finish(handle, decodingtrust_tables(handle, min_coverage=min_coverage, published=published), "pandas",
                     private)
    for frame in tables.values():  # the published answers' model has no record in the warehouse: name it
        if "model_name" in frame.columns:
            mine = frame["model_key"] == PUBLISHED_KEY
            frame.loc[mine, "model_name"], frame.loc[mine, "backend"] = "gpt-4-0314 (published)", "published"
    return _finish(handle, tables, output, private) if output != "pandas" else tables


def holistic_bias(handle, *, output: str = "pandas", private: bool = False,
                  min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """HolisticBias's likelihood bias (Smith et al., EMNLP 2022; `biaslab metrics holistic-bias`): per collection
    and axis the share of (template, descriptor pair) rows whose sentence perplexities differ (two-sided
    Mann-Whitney U, p < 0.05, as the paper), with a 95% t-interval over the templates and coverage, and the most and
    least likely descriptors; the median perplexity and rank of every descriptor; the share per template
    (`biaslab.metrics.holistic_bias.stats`).

    Parameters
    ----------
    handle : from `biaslab.open`.
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) rows resting on less than this share of the axis's loaded sentences.

    Returns
    -------
    dict table name -> DataFrame: holistic_bias, holistic_bias_descriptors, holistic_bias_templates,
    holistic_bias_sentiment.
    """
    from .holistic_bias.tables import holistic_tables

    return _finish(handle, holistic_tables(handle, min_coverage=min_coverage), output, private)


def counterfactual(handle, *, dataset: str | None = None, output: str = "pandas", private: bool = False,
                   min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict:
    """Counterfactual audits of your own prompts (LangFair's use-case method, Bouchard 2024; `biaslab metrics
    counterfactual`): per collection, attribute and pair of groups, the sentiment gap (VADER compound), the refusal
    and length gaps, and the ROUGE-L and BLEU similarity of the two variants' answers, each a mean over prompts with
    a 95% t-interval, a paired t-test over prompts (similarities against the same-variant baseline) with Holm and
    Benjamini-Hochberg adjustments, the share of prompts whose own difference is significant, and coverage
    (`biaslab.metrics.counterfactual.stats`).

    Parameters
    ----------
    handle : from `biaslab.open`.
    dataset : one counterfactual dataset (default: every one in the warehouse).
    output, private : see the module docstring.
    min_coverage : mark (`low_coverage`) rows resting on less than this share of the prompts with variants.

    Returns
    -------
    dict table name -> DataFrame: counterfactual, counterfactual_groups.
    """
    from .counterfactual.tables import counterfactual_tables

    return _finish(handle, counterfactual_tables(handle, dataset=dataset, min_coverage=min_coverage), output,
                   private)


def compare(handle, study: str, *, between: Sequence[str] | None = None, within: bool = False,
            bootstrap: int = 2000, permutations: int = 5000, seed: int = 0,
            min_coverage: float = DEFAULT_MIN_COVERAGE,
            output: str = "pandas", **options):
    """Paired comparisons of a study's headline measures (`biaslab compare STUDY`,
    `biaslab.metrics.compare.core.compare_observations`): between two collection settings (two models, or one model
    under two dtypes, backends or sampler settings) over the items both have, or with `within` between the study's
    conditions inside each setting. Per measure and group: the paired difference A - B, its cluster-bootstrap 95%
    interval over the study's unit, a paired permutation p (McNemar's exact p for binary outcomes), Holm and
    Benjamini-Hochberg adjusted p over the family (the rows of one pair of settings), an effect size, and the items
    it rests on and leaves out.

    Parameters
    ----------
    handle : from `biaslab.open`.
    study : a study with comparisons (`biaslab.metrics.registry`, `Study.compare`).
    between : two settings: labels or model names as `biaslab compare` prints them, or unique model-key prefixes;
        None: every pair of settings.
    within : compare conditions (contexts, option orders, ...) inside each setting instead.
    bootstrap, permutations, seed : resamples of units, permutations, and their seed.
    min_coverage : rows resting on less than this share of the items either side has are marked `low_coverage`.
    output : 'pandas' or 'polars'.
    options : the study's own (options: `dataset`, `by`, `all_versions`, `unit`).

    Returns
    -------
    DataFrame with `biaslab.metrics.compare.core.COLUMNS`.
    """
    from .compare.core import compare_observations
    from .registry import get_study

    entry = get_study(study)
    if entry.comparer is None:
        from .registry import studies

        known = ", ".join(n for n, s in studies().items() if s.compare is not None)
        raise UsageError(f"study {study!r} has no comparisons; studies with comparisons: {known}")
    import inspect

    accepted = set(inspect.signature(entry.comparer).parameters) - {"handle"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted)) or "none"
        raise UsageError(f"compare {study} takes no {', '.join(unknown)} (it takes: {takes})")
    table = compare_observations(entry.comparer(handle, **options), between=between, within=within, bootstrap=bootstrap,
                                 permutations=permutations, seed=seed, min_coverage=min_coverage)
    if output == "polars":
        import polars as pl

        return pl.from_pandas(table)
    if output != "pandas":
        raise UsageError(f"output must be 'pandas' or 'polars', got {output!r}")
    return table
