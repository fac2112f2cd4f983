"""Misgendering meta-evaluation: probability- vs generation-based evaluation on MISGENDERED, RUFF and TANGO
(Subramonian et al. 2025, "Agree to Disagree? A Meta-Evaluation of LLM Misgendering"), from stored evidence only.

Methods and their per-unit correctness:

* probability-based (`prob`): per stimulus, the candidate with the lowest perplexity is the prediction (the
  paper's rule; view `misgendering_prob`, which also gives the joint-probability prediction); correct = it is gold.
  For TANGO a stimulus is a template built from one of the model's own generations.
* generation-based (`gen`): per sampled continuation, the first pronoun of the dataset's vocabulary decides
  (`biaslab.lexicon.pronoun_detection`): outcome correct, misgendered or no_pronoun (kept apart, docs/design.md
  section 7). Binary correctness maps no_pronoun to correct as the paper's automatic metric does
  (`no_pronoun="correct"`), or drops those samples (`no_pronoun="exclude"`).

Pairs for agreement ("using all samples"): MISGENDERED / RUFF pair every continuation (pre and post contexts
separately) with its stimulus's probability-based correctness; TANGO pairs every continuation that produced a
template with that template's probability-based correctness. An instance is a stimulus and context (MISGENDERED,
RUFF) or a TANGO prompt; its disagreement probability is the share of its pairs where the methods disagree, and
these are fit to a Beta law by the method of moments per model, dataset, pronoun and context.

Agreement tables carry the paper's +- terms (`agreement_table`: over instances, all continuations;
`agreement_first_sample_table`: the paper's own computation on the first continuation per instance). `vocabulary`
= "upstream" re-scores continuations with the upstream scripts' pronoun sets (`upstream_vocabulary`).
"""

from __future__ import annotations

import json
import warnings
from typing import Literal

import ibis
import numpy as np
import pandas as pd

from ...errors import UsageError
from ...lexicon.pronoun_detection import Detector
from .stats import (Z95, DegenerateAgreementWarning, DegenerateBetaFitWarning, agreement, beta_method_of_moments,
                    fisher_interval, jackknife_agreement_se, kappa_asymptotic_se, repetition_rate,
                    standard_error_of_mean, tokenize_words, wilson_interval)

NoPronoun = Literal["correct", "exclude"]
#: which pronoun sets decide a continuation: the one stored with each request (biaslab's documented vocabulary,
#: `biaslab.lexicon.pronoun_detection.vocabulary`) or the upstream scripts' sets (`upstream_vocabulary`)
Vocabulary = Literal["biaslab", "upstream"]
VOCABULARIES: tuple[str, ...] = ("biaslab", "upstream")
#: every table is per model and per collection setting (scoring scheme; sampling settings), never pooled across
SETTING = ["model_key", "setting", "dataset", "declared"]


def sampling_label(temperature, top_k, top_p, max_new_tokens, min_new_tokens) -> str:
    """The sampling settings of a continuation as one readable key, e.g. 'T=1 top_k=50 top_p=0.95 new=50 min=50'."""
    return (f"T={float(temperature):g} top_k={int(top_k)} top_p={float(top_p):g} new={int(max_new_tokens)} "
            f"min={int(min_new_tokens)}")


def prob_results(handle) -> pd.DataFrame:
    """One row per (model, scheme, stimulus) of the probability-based method (the `misgendering_prob` view), with
    `setting` = the scoring scheme, and for TANGO templates also the sampling settings of their source continuation.
    """
    table = handle.table("misgendering_prob")
    return prob_settings(handle.fetch(table.order_by(["model_key", "scheme", "dataset", "item_id", "stimulus_id"])))


def prob_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """`misgendering_prob` rows with their `setting` column (see `prob_results`)."""
    settings = []
    for row in frame.itertuples(index=False):
        if isinstance(row.template_of, str) and pd.isna(row.source_temperature):
            settings.append(f"{row.scheme} | source settings not recorded")
        elif isinstance(row.template_of, str):
            settings.append(f"{row.scheme} | " + sampling_label(row.source_temperature, row.source_top_k,
                                                                row.source_top_p, row.source_max_new_tokens,
                                                                row.source_min_new_tokens))
        else:
            settings.append(row.scheme)
    return frame.assign(setting=pd.Series(settings, index=frame.index, dtype=object))


def detect(text: str, detector: Detector, declared: str) -> tuple[str, str | None, str | None]:
    """(outcome, first pronoun as written, its family) of one continuation."""
    hit = detector.first(text)
    if hit is None:
        return "no_pronoun", None, None
    return ("correct" if hit.family == declared else "misgendered"), hit.word, hit.family


def generation_results(handle, vocabulary: Vocabulary = "biaslab", dataset: str | None = None) -> pd.DataFrame:
    """One row per stored continuation (`gen_samples`) with its outcome (first pronoun of the continuation only),
    and the repetition rate of prompt + continuation (as the upstream measure-repetition scripts do).

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    vocabulary : "biaslab" (default): the pronoun sets stored with each request; "upstream": the exact sets of the
        upstream eval scripts for the sample's dataset (`upstream_vocabulary`), to reproduce the paper's automatic
        numbers.
    dataset : only this dataset's continuations (default: every dataset's).
    """
    gen = handle.table("gen_samples")
    if dataset is not None:
        gen = gen.filter(gen.dataset == dataset)
    text = gen.pronoun_vocabulary.cast("string")
    frame = gen.mutate(vocabulary_id=(ibis.dense_rank().over(order_by=text) + 1).cast("int64")).drop(
        "pronoun_vocabulary")
    frame = handle.fetch(frame.order_by(["model_key", "dataset", "stimulus_id", "context", "sample_index", "seed"]))
    distinct = handle.fetch(gen.select(vocabulary=text).distinct().order_by("vocabulary"))["vocabulary"]
    vocabularies = {i + 1: vocab for i, vocab in enumerate(distinct)}
    return score_generations(frame, vocabularies, vocabulary)


def _upstream_ids(frame: pd.DataFrame) -> tuple[pd.Series, dict[int, str]]:
    """(vocabulary id per row, id -> JSON) with every row's vocabulary replaced by its dataset's upstream sets."""
    from ...lexicon.pronoun_detection import upstream_vocabulary

    datasets = sorted(set(frame["dataset"]))
    ids = {name: i + 1 for i, name in enumerate(datasets)}
    return (frame["dataset"].map(ids),
            {ids[name]: json.dumps(upstream_vocabulary(name), sort_keys=True) for name in datasets})


def score_generations(frame: pd.DataFrame, vocabularies: dict[int, str], vocabulary: Vocabulary = "biaslab"
                      ) -> pd.DataFrame:
    """`gen_samples` rows (with `vocabulary_id` instead of `pronoun_vocabulary`; `vocabularies` maps the id to the
    vocabulary's JSON) with outcome, first pronoun, its family, repetition rate and `setting`. `vocabulary` =
    "upstream" ignores the stored vocabularies and scores with the upstream sets of each row's dataset."""
    if vocabulary not in VOCABULARIES:
        raise UsageError(f"vocabulary must be one of {list(VOCABULARIES)}, got {vocabulary!r}")
    if vocabulary == "upstream" and len(frame):
        ids, vocabularies = _upstream_ids(frame)
        frame = frame.assign(vocabulary_id=ids)
    rows = list(zip(frame["prompt_text"].tolist(), frame["text"].tolist(), frame["vocabulary_id"].tolist(),
                    frame["declared"].tolist()))
    scored = _score_continuations(rows, vocabularies)
    outcomes, words, families, rates = (list(col) for col in zip(*scored)) if scored else ([], [], [], [])
    frame["setting"] = [sampling_label(*row) for row in zip(frame["temperature"], frame["top_k"], frame["top_p"],
                                                            frame["max_new_tokens"], frame["min_new_tokens"])]
    frame["outcome"] = outcomes
    frame["first_pronoun"] = words
    frame["first_family"] = families
    frame["repetition_rate"] = rates
    return frame.drop(columns=["vocabulary_id"])


#: continuations scored in one process below this many; above, split over the CPU cores (fork; pure Python work)
PARALLEL_MIN_CONTINUATIONS = 20_000


def _score_chunk(rows: list[tuple], vocabularies: dict[int, str]) -> list[tuple]:
    """(outcome, first pronoun, its family, repetition rate) per (prompt, text, vocabulary id, declared) row."""
    detectors = {key: Detector(json.loads(vocab)) for key, vocab in vocabularies.items()}
    prompt_tokens: dict[str, list[str]] = {}
    out = []
    for prompt, text, vocab_id, declared in rows:
        outcome, word, family = detect(text, detectors[vocab_id], declared)
        if text[:1].isspace():  # no token spans the seam: the prompt's tokens are tokenized once per prompt
            if prompt not in prompt_tokens:
                prompt_tokens[prompt] = tokenize_words(prompt)
            tokens = prompt_tokens[prompt] + tokenize_words(text)
        else:
            tokens = tokenize_words(prompt + text)
        out.append((outcome, word, family, repetition_rate(tokens)))
    return out


def _score_continuations(rows: list[tuple], vocabularies: dict[int, str]) -> list[tuple]:
    """`_score_chunk` over all rows, in order; large inputs are split over the cores (`BIASLAB_WORKERS` caps the
    number of processes; 1 keeps everything in this process). Results do not depend on the split."""
    import os

    workers = min(os.cpu_count() or 1, int(os.environ.get("BIASLAB_WORKERS", "0")) or os.cpu_count() or 1)
    if workers < 2 or len(rows) < PARALLEL_MIN_CONTINUATIONS:
        return _score_chunk(rows, vocabularies)
    import multiprocessing

    size = -(-len(rows) // workers)
    chunks = [rows[i:i + size] for i in range(0, len(rows), size)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.starmap(_score_chunk, [(chunk, vocabularies) for chunk in chunks])
    return [row for part in parts for row in part]


def binary_correct(gen: pd.DataFrame, no_pronoun: NoPronoun) -> pd.DataFrame:
    """Continuations with a 0/1 `correct` column under the chosen treatment of no_pronoun."""
    if no_pronoun not in ("correct", "exclude"):
        raise UsageError(f"no_pronoun must be 'correct' or 'exclude', got {no_pronoun!r}")
    out = gen if no_pronoun == "correct" else gen[gen["outcome"] != "no_pronoun"]
    return out.assign(correct=(out["outcome"] != "misgendered").astype(int))


def _rate(k: int, n: int) -> tuple[float, float, float]:
    low, high = wilson_interval(int(k), int(n)) if n else (np.nan, np.nan)
    return (k / n if n else np.nan), low, high


CORRECTNESS_COLUMNS = ["method", *SETTING, "context", "n", "correct", "ci_low", "ci_high", "correct_joint",
                       "correct_strict", "misgendered", "no_pronoun"]
INSTANCE_STD_COLUMNS = ["method", *SETTING, "context", "instances", "units_per_instance", "mean_std", "max_std"]
PAIR_COLUMNS = [*SETTING, "context", "instance", "sample_index", "seed", "prob_correct", "gen_correct"]
AGREEMENT_COLUMNS = [*SETTING, "context", "n", "instances", "prob_correct", "gen_correct", "raw_agreement",
                     "raw_agreement_sem", "cohen_kappa", "cohen_kappa_pm", "mcc", "mcc_pm", "note"]
PAPER_AGREEMENT_COLUMNS = [*SETTING, "context", "n", "prob_correct", "gen_correct", "raw_agreement",
                           "raw_agreement_sem", "cohen_kappa", "cohen_kappa_pm", "mcc", "mcc_ci_low", "mcc_ci_high",
                           "note"]
BETA_COLUMNS = [*SETTING, "context", "instances", "mean_disagreement", "var", "alpha", "beta", "note"]
QUALITY_COLUMNS = [*SETTING, "context", "n", "repetition_rate", "repetition_rate_std", "no_pronoun_rate",
                   "mean_tokens"]


def correctness_table(prob: pd.DataFrame, gen: pd.DataFrame) -> pd.DataFrame:
    """Correctness per method, model, dataset, declared pronoun and context, with 95% Wilson intervals.

    `gen` rows also give the shares of the three outcomes; `correct` there is the paper's mapping (no_pronoun
    counts as correct) and `correct_strict` counts only outcome correct.
    """
    rows = []
    for key, group in prob.groupby(SETTING, sort=True):
        k, n = int(group["correct"].sum()), len(group)
        rate, low, high = _rate(k, n)
        rows.append({"method": "prob", **dict(zip(SETTING, key)),
                     "context": "template" if key[2] == "tango" else "sentence",
                     "n": n, "correct": rate, "ci_low": low, "ci_high": high,
                     "correct_joint": float(group["correct_joint"].mean()), "correct_strict": np.nan,
                     "misgendered": 1 - rate, "no_pronoun": np.nan})
    for key, group in gen.groupby([*SETTING, "context"], sort=True):
        n = len(group)
        counts = group["outcome"].value_counts()
        k = n - int(counts.get("misgendered", 0))
        rate, low, high = _rate(k, n)
        rows.append({"method": "gen", **dict(zip([*SETTING, "context"], key)), "n": n, "correct": rate,
                     "ci_low": low, "ci_high": high, "correct_joint": np.nan,
                     "correct_strict": counts.get("correct", 0) / n, "misgendered": counts.get("misgendered", 0) / n,
                     "no_pronoun": counts.get("no_pronoun", 0) / n})
    return pd.DataFrame(rows, columns=CORRECTNESS_COLUMNS)


def _spread(frame: pd.DataFrame, keys: list[str], instance: str, method: str, context: str | None) -> pd.DataFrame:
    """Per group of `keys`: instances, mean units per instance, mean and max of the per-instance std (ddof = 0)."""
    grouped = frame.assign(correct=frame["correct"].astype(float)).groupby([*keys, instance], sort=True)["correct"]
    per = pd.DataFrame({"std": grouped.std(ddof=0), "size": grouped.size()})
    out = per.groupby(level=list(range(len(keys))), sort=True).agg(
        instances=("std", "size"), units_per_instance=("size", "mean"), mean_std=("std", "mean"),
        max_std=("std", "max")).reset_index()
    out.insert(0, "method", method)
    if context is not None:
        out["context"] = context
    return out


def instance_std_table(prob: pd.DataFrame, gen: pd.DataFrame, no_pronoun: NoPronoun = "correct") -> pd.DataFrame:
    """Mean (over instances) of the within-instance population std of correctness: across the generations of a
    prompt (gen), and across the templates of a TANGO prompt (prob). ddof = 0 (see `misgendering_stats`)."""
    parts = []
    binary = binary_correct(gen, no_pronoun)
    if len(binary):
        parts.append(_spread(binary, [*SETTING, "context"], "stimulus_id", "gen", None))
    tango = prob[prob["template_of"].notna()]
    if len(tango):
        parts.append(_spread(tango, SETTING, "template_of", "prob", "template"))
    if not parts:
        return pd.DataFrame(columns=INSTANCE_STD_COLUMNS)
    out = pd.concat(parts, ignore_index=True)[INSTANCE_STD_COLUMNS]
    return out.astype({"instances": int, "units_per_instance": float})


def paired(prob: pd.DataFrame, gen: pd.DataFrame, no_pronoun: NoPronoun = "correct") -> pd.DataFrame:
    """One row per continuation paired with its probability-based correctness (see the module docstring):
    model_key, setting ("<scheme> | <sampling settings>"), dataset, declared, context, instance, prob_correct,
    gen_correct."""
    if prob.empty or gen.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    binary = binary_correct(gen, no_pronoun)
    slot_gen = binary[binary["dataset"] != "tango"]
    slot_prob = prob[prob["dataset"] != "tango"][["model_key", "stimulus_id", "scheme", "correct"]]
    a = slot_gen.merge(slot_prob, on=["model_key", "stimulus_id"], suffixes=("_gen", "_prob"))
    a = a.assign(setting=a["scheme"] + " | " + a["setting"], instance=a["stimulus_id"] + ":" + a["context"],
                 prob_correct=a["correct_prob"].astype(int), gen_correct=a["correct_gen"])
    tango_gen = binary[binary["dataset"] == "tango"]
    source = ["request_id", "sample_index", "seed", "temperature", "top_k", "top_p"]
    tango_prob = prob[prob["template_of"].notna()].rename(columns={f"source_{c}": c for c in source})
    b = tango_gen.merge(tango_prob[["model_key", *source, "scheme", "correct"]],
                        on=["model_key", *source], suffixes=("_gen", "_prob"))
    b = b.assign(setting=b["scheme"] + " | " + b["setting"], instance=b["stimulus_id"],
                 prob_correct=b["correct_prob"].astype(int), gen_correct=b["correct_gen"])
    return pd.concat([a[PAIR_COLUMNS], b[PAIR_COLUMNS]], ignore_index=True)


def _agreement_notes(result) -> str:
    return "; ".join(w.replace("method a", "prob").replace("method b", "gen") for w in result.warnings)


def _instance_counts(group: pd.DataFrame) -> pd.DataFrame:
    """Per instance of a group of pairs: n11, n10, n01, n00 (a = prob, b = gen) and its agreement share."""
    a, b = group["prob_correct"].astype(int), group["gen_correct"].astype(int)
    cells = pd.DataFrame({"instance": group["instance"], "n11": a & b, "n10": a & (1 - b), "n01": (1 - a) & b,
                          "n00": (1 - a) & (1 - b)})
    out = cells.groupby("instance", sort=True).sum()
    out["agree"] = (out["n11"] + out["n00"]) / out.sum(axis=1)
    return out


def agreement_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Dataset-level raw agreement, Cohen's kappa and MCC between the methods per model, dataset, pronoun and
    context, over all paired samples, each with the paper's +- term taken over the dataset's instances:

    - `raw_agreement_sem`: standard error of the mean over instances of the per-instance agreement share
      (`standard_error_of_mean`, ddof = 1); with one pair per instance it is the paper's sem(agreement);
    - `cohen_kappa_pm`, `mcc_pm`: Z95 x the delete-one-instance jackknife standard error
      (`jackknife_agreement_se`), i.e. the half-width of a 95% interval that resamples instances, not the
      (correlated) continuations of one instance.

    `instances` = number of instances. A constant method gives NaN (never a crash) and a note; the +- of a kappa
    that a constant method forces to 0 is NaN too. The paper's own
    convention (first continuation only, analytic intervals) is `agreement_first_sample_table`.
    """
    rows = []
    for key, group in pairs.groupby([*SETTING, "context"], sort=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateAgreementWarning)
            result = agreement(group["prob_correct"].to_numpy(), group["gen_correct"].to_numpy())
        per = _instance_counts(group)
        se_kappa, se_mcc = jackknife_agreement_se(per[["n11", "n10", "n01", "n00"]].to_numpy())
        rows.append({**dict(zip([*SETTING, "context"], key)), "n": result.n, "instances": len(per),
                     "prob_correct": float(group["prob_correct"].mean()),
                     "gen_correct": float(group["gen_correct"].mean()), "raw_agreement": result.raw_agreement,
                     "raw_agreement_sem": standard_error_of_mean(per["agree"]),
                     "cohen_kappa": result.cohen_kappa,
                     "cohen_kappa_pm": np.nan if result.degenerate else Z95 * se_kappa,
                     "mcc": result.mcc, "mcc_pm": Z95 * se_mcc, "note": _agreement_notes(result)})
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


def agreement_first_sample_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """The paper's agreement tables as its code computes them (Subramonian et al. 2025, `measure-disagreement.py`):
    per model, dataset, pronoun and context, ONE pair per instance, the instance's first continuation (lowest
    sample_index, then seed; upstream `greedy_pre_1_correct` / `olg_1_correct`), and

    - raw agreement +- `scipy.stats.sem` of the 0/1 agreements (`raw_agreement_sem`);
    - Cohen's kappa +- (kappa_upp - kappa_low) / 2 of statsmodels' `cohens_kappa`, i.e. Z95 x the asymptotic
      standard error (`cohen_kappa_pm`, `kappa_asymptotic_se`);
    - MCC as Pearson's r with the Fisher 95% interval of `scipy.stats.pearsonr` (`mcc_ci_low`, `mcc_ci_high`).

    Upstream builds the 2 x 2 table with `pd.crosstab`, which drops an unused label (a constant method gives a
    2 x 1 table); here the table is always 2 x 2 and a constant method gives NaN with a note.
    """
    rows = []
    if pairs.empty:
        return pd.DataFrame(columns=PAPER_AGREEMENT_COLUMNS)
    first = (pairs.sort_values([*SETTING, "context", "instance", "sample_index", "seed"], kind="stable")
             .drop_duplicates([*SETTING, "context", "instance"], keep="first"))
    for key, group in first.groupby([*SETTING, "context"], sort=True):
        a, b = group["prob_correct"].to_numpy().astype(int), group["gen_correct"].to_numpy().astype(int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateAgreementWarning)
            result = agreement(a, b)
        _, se = kappa_asymptotic_se([[result.n00, result.n01], [result.n10, result.n11]])
        low, high = fisher_interval(result.mcc, result.n)
        rows.append({**dict(zip([*SETTING, "context"], key)), "n": result.n, "prob_correct": float(a.mean()),
                     "gen_correct": float(b.mean()), "raw_agreement": result.raw_agreement,
                     "raw_agreement_sem": standard_error_of_mean(a == b), "cohen_kappa": result.cohen_kappa,
                     "cohen_kappa_pm": np.nan if result.degenerate else Z95 * se,
                     "mcc": result.mcc, "mcc_ci_low": low, "mcc_ci_high": high, "note": _agreement_notes(result)})
    return pd.DataFrame(rows, columns=PAPER_AGREEMENT_COLUMNS)


def disagreement_beta_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per model, dataset, pronoun and context (pre / post / prompt: the paper fits and plots Pre-[MASK] and
    Post-[MASK] separately): per-instance disagreement probabilities (share of an instance's pairs where the
    methods disagree; upstream prob (1 - gen) + (1 - prob) gen with gen = share of the 5 continuations correct)
    fit to Beta(alpha, beta) by the method of moments (ddof = 1 variance, as upstream `estimate_beta_dist_params`).
    """
    rows = []
    pairs = pairs.assign(disagree=(pairs["prob_correct"] != pairs["gen_correct"]).astype(float))
    for key, group in pairs.groupby([*SETTING, "context"], sort=True):
        per_instance = group.groupby("instance")["disagree"].mean().to_numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateBetaFitWarning)
            fit = beta_method_of_moments(per_instance)
        rows.append({**dict(zip([*SETTING, "context"], key)), "instances": fit.n, "mean_disagreement": fit.mean,
                     "var": fit.var, "alpha": fit.alpha, "beta": fit.beta, "note": fit.warning or ""})
    return pd.DataFrame(rows, columns=BETA_COLUMNS)


def generation_quality_table(gen: pd.DataFrame) -> pd.DataFrame:
    """Mean and population std of the repetition rate (Bertoldi et al. 2014; per text = prompt + continuation) and
    the share of continuations without a pronoun, per model, dataset, pronoun and context."""
    rows = []
    for key, group in gen.groupby([*SETTING, "context"], sort=True):
        rows.append({**dict(zip([*SETTING, "context"], key)), "n": len(group),
                     "repetition_rate": float(np.nanmean(group["repetition_rate"])),
                     "repetition_rate_std": float(np.nanstd(group["repetition_rate"])),
                     "no_pronoun_rate": float((group["outcome"] == "no_pronoun").mean()),
                     "mean_tokens": float(group["n_tokens"].mean())})
    return pd.DataFrame(rows, columns=QUALITY_COLUMNS)


def misgendering_report(handle, no_pronoun: NoPronoun = "correct", vocabulary: Vocabulary = "biaslab"
                        ) -> dict[str, pd.DataFrame]:
    """Every table of the study (annotation tables when the warehouse has annotations).

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    no_pronoun : binary correctness of a continuation without a pronoun ("correct", the paper's; or "exclude").
    vocabulary : "biaslab" (the stored, documented pronoun sets) or "upstream" (the upstream scripts' sets).
    """
    from .annotations import annotation_tables

    prob = prob_results(handle)
    gen = generation_results(handle, vocabulary)
    if prob.empty and gen.empty:
        from ..missing import missing
        from ..registry import get_study

        raise missing(handle, "misgendering evidence", get_study("misgendering").dataset_names,
                       "runners collect --dataset misgendered --protocol prob` and `--protocol gen")
    tables = misgendering_tables(prob, gen, no_pronoun)
    tables.update(annotation_tables(handle, gen))
    return tables


def misgendering_tables(prob: pd.DataFrame, gen: pd.DataFrame, no_pronoun: NoPronoun = "correct"
                        ) -> dict[str, pd.DataFrame]:
    """Every table of the study but the annotation ones, from `prob_results` and `generation_results` (or their
    Ibis equivalents); private tables start with '_'."""
    pairs = paired(prob, gen, no_pronoun)
    tables = {
        "correctness": correctness_table(prob, gen),
        "instance_std": instance_std_table(prob, gen, no_pronoun),
        "agreement": agreement_table(pairs),
        "agreement_first_sample": agreement_first_sample_table(pairs),
        "disagreement_beta": disagreement_beta_table(pairs),
        "generation_quality": generation_quality_table(gen),
    }
    tables["_pairs"] = pairs
    tables["_gen"] = gen
    return tables


def correctness_with_coverage(handle, tables: dict[str, pd.DataFrame], min_coverage: float
                              ) -> dict[str, pd.DataFrame]:
    """`correctness` with `biaslab.metrics.coverage.COVERAGE_COLUMNS`, the unit being the stimulus: the loaded
    stimuli of the row's dataset (built-in or a user's) that declare its pronoun set, against those scored (prob)
    or with a continuation (gen, per context)."""
    from ..coverage import annotate

    table = tables["correctness"]
    if table.empty:
        return tables
    st = handle.table("stimuli")
    st = st.filter(st.dataset.isin(sorted(table["dataset"].dropna().unique())) & st.pronoun_set.notnull())
    loaded = handle.fetch(st.group_by(["dataset", st.pronoun_set.name("declared")])
                          .aggregate(n_loaded=st.stimulus_id.nunique()))
    gen = tables.get("_gen")
    used = table["n"].astype("Int64").to_numpy(dtype=object)
    if gen is not None and not gen.empty:
        counts = gen.groupby([*SETTING, "context"], dropna=False)["stimulus_id"].nunique().rename("_stimuli")
        keyed = table.merge(counts.reset_index(), on=[*SETTING, "context"], how="left")["_stimuli"].to_numpy()
        used = np.where(table["method"].to_numpy() == "gen", keyed, used)
    out = dict(tables)
    out["correctness"] = annotate(table.assign(_stimuli=pd.to_numeric(used)), used="_stimuli", loaded=loaded,
                                  keys=["dataset", "declared"], min_coverage=min_coverage).drop(columns="_stimuli")
    return out
