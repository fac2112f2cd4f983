"""Negation bias (Wang, Sommerauer and Bloem, "The Negation Bias in Large Language Models"): sentence perplexity per
condition and a linear mixed model PPL ~ context * form with a random intercept and a random slope for context by
root item.

* `sentence_perplexities(wh)`: one row per (model, scheme, negation stimulus) from the `sequence_metrics` view:
  perplexity = exp(-sum_logprob / n_tokens). For a causal model (`scheme` = 'causal') that is the perplexity; for a
  masked model (`scheme` = 'original' or 'within_word_l2r') `sum_logprob` is the pseudo-log-likelihood, so the same
  formula gives the pseudo-perplexity (column `measure` says which).
* `fit_mixed_model(df)`: per model, scheme, protocol and dataset, statsmodels `MixedLM` (REML) of
  `perplexity ~ context * form`, `groups = item`, `re_formula = "~context"`, with the paper's coding
  stereotype-consistent context (stereo) = 1, inconsistent (nonstereo) = 0, affirmative = 1, negated = 0. One row per
  fixed-effect term in the paper's order (Intercept, context, form, context:form) with estimate, standard error, z,
  the Wald p-value (the paper's) and, side by side, the Satterthwaite degrees of freedom and t p-value (as lmerTest;
  `biaslab.metrics.satterthwaite`), the Wald 95% interval, plus the fit's status, a `singular` flag (also where
  statsmodels reports convergence short of a boundary optimum) and every warning raised or detected (never
  hidden; a failing fit is a row with status 'failed', never an exception). No silent fallback: the
  random-intercept-only model is fitted only on request and labelled as such.
* `prediction_table` / `model_predictions(df)` and `prediction_plot`: the model's predicted value per condition
  with Wald 95% intervals, drawn as the paper's Figure 2 (x = context, one line per form).
* `condition_means(df)` and `interaction_plot(means, path)`: observed mean PPL per condition with 95% t-intervals,
  laid out as Figure 2.
* `length_control(df)`: the share of root items whose four sentences have equal token counts, per tokenizer.
* `negation_tables(ppl)`: all public tables, each model fitted once (what `biaslab metrics negation` prints).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ...errors import DataError
from .satterthwaite import BOUNDARY_TOL, deviance_of_result, find_optimum, satterthwaite, varpar_from

#: Columns that identify one fit (those present in the frame are used).
GROUP = ["model_key", "scheme", "protocol", "dataset"]
#: Fixed-effect terms in the paper's table order.
TERMS = ["Intercept", "context", "form", "context:form"]
FORMULA = "perplexity ~ context * form"
RANDOM_SLOPE = "1 + context | item"
RANDOM_INTERCEPT = "1 | item"
#: Fit statuses, best first. 'singular' = converged on the boundary (reported, still the paper's model);
#: the last three count as a failure of the random-slope model.
STATUSES = ("ok", "warnings", "singular", "degenerate", "not converged", "failed")
FAILED = ("degenerate", "not converged", "failed")
#: The paper's coding.
CONTEXT_CODING = {"stereo": 1, "nonstereo": 0}
FORM_CODING = {"aff": 1, "neg": 0}
#: A fit is singular when |random-effect correlation| exceeds this ...
SINGULAR_CORRELATION = 0.99
#: ... or a random-effect variance is below this multiple of the residual variance.
SINGULAR_VARIANCE_RATIO = 1e-4
#: statsmodels' deviance this far above the best found here (-2 log-likelihood units) is warned about.
GAP_WARN = 1e-3
CONDITION_OF = {("stereo", "aff"): "SA", ("stereo", "neg"): "SN", ("nonstereo", "aff"): "NA",
                ("nonstereo", "neg"): "NN"}

def _code(values: pd.Series, coding: dict[str, int], name: str) -> pd.Series:
    """0/1 codes of a string column (or a column already coded 0/1)."""
    if pd.api.types.is_numeric_dtype(values) and set(values.dropna().unique()) <= {0, 1}:
        return values.astype(float)
    coded = values.map(coding)
    bad = sorted({str(v) for v, c in zip(values, coded) if pd.isna(c)})
    if bad:
        raise DataError(f"{name}: unknown value(s) {bad}; expected {sorted(coding)} (or 0/1 codes)")
    return coded.astype(float)


def model_frame(df: pd.DataFrame, response: str = "perplexity") -> pd.DataFrame:
    """The frame the mixed model is fitted on, in the input's row order: `perplexity` (the response), `context`
    (stereo = 1, nonstereo = 0), `form` (aff = 1, neg = 0) and `item` (the grouping factor, as text). Rows without a
    finite response are dropped."""
    for column in (response, "context", "form", "item"):
        if column not in df.columns:
            raise DataError(f"negation mixed model: the data frame has no column {column!r}")
    frame = pd.DataFrame({
        "perplexity": pd.to_numeric(df[response], errors="coerce").astype(float),
        "context": _code(df["context"], CONTEXT_CODING, "context"),
        "form": _code(df["form"], FORM_CODING, "form"),
        "item": df["item"].astype(str),
    }, index=df.index)
    return frame[np.isfinite(frame["perplexity"])]


def _group_columns(df: pd.DataFrame, by: Sequence[str] | None) -> list[str]:
    return [c for c in GROUP if c in df.columns] if by is None else list(by)


def _groups(df: pd.DataFrame, by: list[str]) -> Iterable[tuple[dict, pd.DataFrame]]:
    if not by:
        yield {}, df
        return
    for key, part in df.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        yield dict(zip(by, key)), part


# --------------------------------------------------------------------------------------------------- the fit


def _dedupe(messages: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for m in messages:
        seen.setdefault(m, None)
    return list(seen)


def _cells() -> list[tuple[str, str, float, float]]:
    """The four conditions in the paper's order with their codes: (context, form, context code, form code)."""
    return [(c, f, float(CONTEXT_CODING[c]), float(FORM_CODING[f])) for c, f in CONDITION_OF]


def _design_row(context: float, form: float, names: Sequence[str]) -> np.ndarray:
    """The fixed-effect design row of one cell, in the order of `names` (statsmodels' column names)."""
    values = {"Intercept": 1.0, "context": context, "form": form, "context:form": context * form}
    return np.array([values[n] for n in names])


def _singular_checks(cov_re: np.ndarray, names: list[str], scale: float, optimum) -> list[str]:
    """The reasons (one message each) why a fit is singular, beyond the eigenvalue check: |correlation| above
    `SINGULAR_CORRELATION`, a variance below `SINGULAR_VARIANCE_RATIO` times the residual variance, or a (RE)ML
    optimum on the boundary (found by `satterthwaite.find_optimum`, also where statsmodels stopped inside)."""
    reasons = []
    if cov_re.shape == (2, 2) and np.all(np.isfinite(cov_re)):
        r = _correlation(cov_re)
        if np.isfinite(r) and abs(r) > SINGULAR_CORRELATION:
            reasons.append(f"singular fit: random-effect correlation {r:.4f} (|r| > {SINGULAR_CORRELATION})")
    if cov_re.size and np.all(np.isfinite(cov_re)) and scale > 0:
        for j, name in enumerate(names or [f"re{j}" for j in range(cov_re.shape[0])]):
            ratio = float(cov_re[j, j]) / scale
            if ratio < SINGULAR_VARIANCE_RATIO:
                reasons.append(f"singular fit: variance of the random {'intercept' if j == 0 else name} is "
                               f"{ratio:.3g} x the residual variance (< {SINGULAR_VARIANCE_RATIO:g})")
    if optimum is not None and optimum.on_boundary:
        reasons.append("singular fit: the (RE)ML optimum lies on the boundary (a rank-deficient random-effects "
                       f"covariance is within {BOUNDARY_TOL:g} deviance units of the best fit found, as lme4 "
                       "would report with isSingular)")
    return reasons


def _correlation(cov_re: np.ndarray) -> float:
    denom = math.sqrt(max(float(cov_re[0, 0]), 0.0) * max(float(cov_re[1, 1]), 0.0))
    return float(cov_re[0, 1]) / denom if denom > 0 else math.nan


@dataclass
class _Estimates:
    """What is read from one statsmodels `MixedLMResults` (while its warnings are recorded): the fixed effects, their
    per-term table and covariance, the random-effects covariance and its names, convergence, llf and scale."""
    result: object
    params: pd.Series
    terms: pd.DataFrame
    fe_names: list[str]
    fe_cov: np.ndarray
    cov_re: np.ndarray
    names: list[str]
    converged: bool
    llf: float
    scale: float


def _read_result(result) -> _Estimates:
    """The estimates of a fitted `MixedLM`; the per-term table has NaN Satterthwaite columns (filled in later)."""
    params = result.fe_params
    bse = result.bse[params.index]
    z = result.tvalues[params.index]
    p = result.pvalues[params.index]
    ci = result.conf_int(alpha=0.05).loc[params.index]
    terms = pd.DataFrame({"term": params.index, "estimate": params.to_numpy(), "std_error": bse.to_numpy(),
                          "z": z.to_numpy(), "p_value": p.to_numpy(),
                          "df_satterthwaite": math.nan, "p_value_satterthwaite": math.nan,
                          "ci_low": ci[0].to_numpy(), "ci_high": ci[1].to_numpy()}).set_index("term")
    fe_names = list(params.index)
    fe_cov = np.asarray(result.cov_params().loc[fe_names, fe_names], dtype=float)
    cov = result.cov_re
    cov_re = np.asarray(cov, dtype=float)
    names = list(cov.index) if hasattr(cov, "index") else []
    converged = bool(getattr(result, "converged", False))
    llf = float(result.llf)
    scale = float(result.scale)
    return _Estimates(result, params, terms, fe_names, fe_cov, cov_re, names, converged, llf, scale)


def _fit_and_read(frame: pd.DataFrame, re_formula: str | None,
                  fit_kwargs: dict) -> tuple[_Estimates | None, str | None, list[str]]:
    """Fit the model and read its estimates with every warning recorded: (estimates, None, warnings), or (None, the
    error, warnings) when the fit or the reading raised."""
    import statsmodels.formula.api as smf

    error = None
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")  # statsmodels computes lazily: everything read from the result stays inside
        try:
            model = smf.mixedlm(FORMULA, frame, groups=frame["item"], re_formula=re_formula)
            result = model.fit(**fit_kwargs)
            estimates = _read_result(result)
        except Exception as exc:  # noqa: BLE001 - a failed fit is reported, never raised
            error = f"{type(exc).__name__}: {exc}"
            estimates = None
        caught = [f"{w.category.__name__}: {w.message}" for w in record]
    return estimates, error, caught


def _covariance_checks(est: _Estimates, notes: list[str]) -> tuple[bool, bool]:
    """Convergence, standard errors and the random-effects covariance's eigenvalues: appends a note per problem
    found and returns (degenerate, singular)."""
    degenerate = singular = False
    if not est.converged:
        notes.append("not converged: the optimizer stopped without convergence (estimates are unreliable)")
    if not np.all(np.isfinite(est.terms["std_error"].to_numpy(dtype=float))):
        degenerate = True
        notes.append("standard errors undefined for some terms (Hessian not positive definite)")
    cov_re = est.cov_re
    if cov_re.size:
        if not np.all(np.isfinite(cov_re)):
            degenerate = True
            notes.append("random-effects covariance is not finite")
        else:
            eig = np.linalg.eigvalsh((cov_re + cov_re.T) / 2)
            size = max(abs(est.scale), float(np.max(np.abs(eig))), 1e-12)
            if eig.min() <= 1e-6 * size:
                singular = True
                notes.append("singular random-effects covariance (boundary fit: a variance component is ~0 or "
                             "the random intercept and slope are perfectly correlated)")
    return degenerate, singular


def _boundary_and_df(est: _Estimates, degenerate: bool, satterthwaite_df: bool, notes: list[str]):
    """The best (RE)ML optimum found from statsmodels' fit (`satterthwaite.find_optimum`) and its deviance gap, and
    (with `satterthwaite_df`) the Satterthwaite columns of `est.terms`, filled in place; skipped for a degenerate
    fit. Appends a note when statsmodels stopped short of the optimum or a step failed. Returns (optimum or None,
    gap or NaN)."""
    optimum = None
    gap = math.nan
    scale, cov_re = est.scale, est.cov_re
    usable = (not degenerate and np.isfinite(scale) and scale > 0 and cov_re.size
              and np.all(np.isfinite(cov_re)))
    if usable:
        try:
            dev = deviance_of_result(est.result)
            varpar = varpar_from(cov_re, scale)
            optimum = find_optimum(dev, varpar)
            gap = float(optimum.gap)
            if gap > GAP_WARN:
                notes.append(f"statsmodels stopped {gap:.3g} deviance units above the best (RE)ML fit found "
                             f"(random-effect correlation there: {optimum.correlation(dev.q):.4f}); lme4 would "
                             "report other estimates")
            if satterthwaite_df:
                sat = satterthwaite(dev, varpar, est.params.to_numpy(), np.eye(len(est.fe_names)))
                est.terms["df_satterthwaite"] = sat.df
                est.terms["p_value_satterthwaite"] = sat.p_value
                if sat.note:
                    notes.append(sat.note)
        except Exception as exc:  # noqa: BLE001 - the diagnostics never hide the fit
            notes.append(f"Satterthwaite / boundary check failed: {type(exc).__name__}: {exc}")
    return optimum, gap


def _predictions(est: _Estimates) -> list[dict]:
    """The fixed-effects prediction of each condition (paper's order) with its Wald standard error and 95% interval
    (NaN where the fixed-effects covariance is not finite or gives a negative variance)."""
    predictions = []
    for context, form, c, f in _cells():
        x = _design_row(c, f, est.fe_names)
        value = float(x @ est.params.to_numpy())
        var = float(x @ est.fe_cov @ x) if np.all(np.isfinite(est.fe_cov)) else math.nan
        se = math.sqrt(var) if var >= 0 else math.nan  # NaN also for a negative (degenerate) variance
        half = float(stats.norm.ppf(0.975)) * se
        predictions.append({"condition": CONDITION_OF[(context, form)], "context": context, "form": form,
                            "predicted": value, "std_error": se, "ci_low": value - half, "ci_high": value + half})
    return predictions


def _random_effects(cov_re: np.ndarray, names: list[str]) -> dict[str, float]:
    """The item variance components of a fit (NaN where the model has none): intercept and context variances, their
    covariance and correlation."""
    return dict(
        var_item_intercept=float(cov_re[0, 0]) if cov_re.size else math.nan,
        var_item_context=float(cov_re[names.index("context"), names.index("context")])
        if "context" in names else math.nan,
        cov_item_intercept_context=float(cov_re[0, names.index("context")]) if "context" in names else math.nan,
        re_correlation=_correlation(cov_re) if cov_re.shape == (2, 2) and np.all(np.isfinite(cov_re)) else math.nan,
    )


def _fit_one(frame: pd.DataFrame, re_formula: str | None, fit_kwargs: dict, satterthwaite_df: bool = True) -> dict:
    """Fit one mixed model; never raises. Returns the per-term table, the cell predictions and the fit
    diagnostics (see `fit_mixed_model`)."""
    out: dict = {"terms": None, "predictions": None, "converged": False, "status": "failed", "error": None,
                 "warnings": [], "singular": False}
    est, error, caught = _fit_and_read(frame, re_formula, fit_kwargs)
    if est is None:
        out["error"] = error
        out["warnings"] = _dedupe(caught)
        return out

    notes: list[str] = []
    constant = constant_response(frame["perplexity"])
    degenerate, singular = _covariance_checks(est, notes)
    optimum, gap = _boundary_and_df(est, degenerate, satterthwaite_df, notes)
    reasons = _singular_checks(est.cov_re, est.names, est.scale, optimum)
    if reasons:
        singular = True
        notes += reasons

    predictions = _predictions(est)
    out.update(
        terms=est.terms.reindex(TERMS),
        predictions=predictions,
        converged=est.converged,
        singular=singular,
        warnings=_dedupe(([constant] if constant else []) + caught + notes),  # the reason first
        llf=est.llf if np.isfinite(est.llf) else math.nan,
        residual_var=est.scale,
        **_random_effects(est.cov_re, est.names),
        deviance_gap=gap,
    )
    out["status"] = ("degenerate" if constant is not None else "not converged" if not est.converged else
                     "degenerate" if degenerate else "singular" if singular else
                     "warnings" if out["warnings"] else "ok")
    return out


def constant_response(values: pd.Series, rtol: float = 1e-12) -> str | None:
    """The note for a response with zero variance (max - min <= rtol x max(1, |values|)), else None: nothing to
    model, so the fit is 'degenerate' (statsmodels reports it as a convergence failure)."""
    v = values.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0 or np.ptp(v) > rtol * max(1.0, float(np.abs(v).max())):
        return None
    return (f"degenerate: constant response (all {v.size} values equal {v[0]:.6g}): zero variance, nothing to "
            f"estimate")


@dataclass
class Fit:
    """One fitted model: the fit group's key, the random-effects label, whether it is the fallback, `n_obs`,
    `n_items`, the rows dropped for a missing response and `_fit_one`'s result."""
    key: dict
    random_effects: str
    fallback: bool
    n_obs: int
    n_items: int
    dropped: int
    result: dict


def fit_models(df: pd.DataFrame, *, by: Sequence[str] | None = None, response: str = "perplexity",
               intercept_only_on_failure: bool = False, reml: bool = True, fit_kwargs: dict | None = None,
               satterthwaite_df: bool = True) -> list[Fit]:
    """Fit the paper's model per fit group (see `fit_mixed_model` for the parameters); `mixed_model_table` and
    `prediction_table` turn the fits into tables, so one fit serves both."""
    by = _group_columns(df, by)
    kwargs = {"reml": reml, **(fit_kwargs or {})}
    fits = []
    for key, part in _groups(df, by):
        frame = model_frame(part, response)
        common = {"key": key, "n_obs": len(frame), "n_items": frame["item"].nunique(),
                  "dropped": len(part) - len(frame)}
        first = _fit_one(frame, "~context", kwargs, satterthwaite_df)
        fits.append(Fit(random_effects=RANDOM_SLOPE, fallback=False, result=first, **common))
        if intercept_only_on_failure and first["status"] in FAILED:
            fits.append(Fit(random_effects=RANDOM_INTERCEPT, fallback=True,
                            result=_fit_one(frame, None, kwargs, satterthwaite_df), **common))
    return fits


_STATS = ["estimate", "std_error", "z", "p_value", "df_satterthwaite", "p_value_satterthwaite", "ci_low", "ci_high"]


def _messages(fit: Fit, response: str) -> str:
    res = fit.result
    messages = list(res.get("warnings", []))
    if fit.dropped:
        messages.insert(0, f"dropped {fit.dropped} row(s) without a finite {response}")
    if res["error"]:
        messages.insert(0, f"fit failed: {res['error']}")
    if fit.fallback:
        messages.insert(0, "FALLBACK: random-intercept-only model, fitted because the random-slope model "
                           "failed or did not converge; not the paper's model")
    return "; ".join(messages)


def mixed_model_table(fits: list[Fit], by: Sequence[str], response: str = "perplexity") -> pd.DataFrame:
    """The rows of `fit_mixed_model` from `fit_models` output."""
    rows = []
    for fit in fits:
        res = fit.result
        terms = res["terms"]
        for term in TERMS:
            stats_row = terms.loc[term].to_dict() if terms is not None else dict.fromkeys(_STATS, math.nan)
            rows.append({
                **fit.key, "n_obs": fit.n_obs, "n_items": fit.n_items, "random_effects": fit.random_effects,
                "fallback": fit.fallback, "term": term, **stats_row,
                "converged": res["converged"], "status": res["status"], "singular": res["singular"],
                "warnings": _messages(fit, response),
                "llf": res.get("llf", math.nan), "residual_var": res.get("residual_var", math.nan),
                "var_item_intercept": res.get("var_item_intercept", math.nan),
                "var_item_context": res.get("var_item_context", math.nan),
                "cov_item_intercept_context": res.get("cov_item_intercept_context", math.nan),
                "re_correlation": res.get("re_correlation", math.nan),
                "deviance_gap": res.get("deviance_gap", math.nan),
            })
    columns = [*by, "random_effects", "fallback", "term", *_STATS, "n_obs", "n_items", "converged", "status",
               "singular", "warnings", "llf", "residual_var", "var_item_intercept", "var_item_context",
               "cov_item_intercept_context", "re_correlation", "deviance_gap"]
    return pd.DataFrame(rows, columns=columns)


def prediction_table(fits: list[Fit], by: Sequence[str], df: pd.DataFrame | None = None,
                     response: str = "perplexity") -> pd.DataFrame:
    """The model's predicted response per condition (the data of the paper's Figure 2): one row per fit and
    condition (SA, SN, NA, NN) with `predicted` = x'beta_hat (x the cell's design row in the paper's coding),
    `std_error` = sqrt(x' Cov(beta_hat) x), the Wald 95% interval, `n` (sentences of that condition in the fit) and
    the fit's `n_items`, `random_effects`, `fallback` and `status`. NaN for a failed fit."""
    counts: dict = {}
    if df is not None and len(df):
        data = df[np.isfinite(pd.to_numeric(df[response], errors="coerce").astype(float))]
        for key, part in _groups(data, list(by)):
            for (context, form), cell in part.groupby(["context", "form"], sort=False):
                counts[(tuple(key.values()), context, form)] = len(cell)
    rows = []
    for fit in fits:
        cells = fit.result["predictions"] or [
            {"condition": CONDITION_OF[(c, f)], "context": c, "form": f, "predicted": math.nan,
             "std_error": math.nan, "ci_low": math.nan, "ci_high": math.nan} for c, f, _, _ in _cells()]
        for cell in cells:
            n = counts.get((tuple(fit.key.values()), cell["context"], cell["form"]), math.nan)
            rows.append({**fit.key, "random_effects": fit.random_effects, "fallback": fit.fallback, **cell,
                         "n": n, "n_items": fit.n_items, "status": fit.result["status"]})
    columns = [*by, "random_effects", "fallback", "condition", "context", "form", "predicted", "std_error", "ci_low",
               "ci_high", "n", "n_items", "status"]
    return pd.DataFrame(rows, columns=columns)


def fit_mixed_model(df: pd.DataFrame, *, by: Sequence[str] | None = None, response: str = "perplexity",
                    intercept_only_on_failure: bool = False, reml: bool = True,
                    fit_kwargs: dict | None = None, satterthwaite_df: bool = True) -> pd.DataFrame:
    """The paper's linear mixed model per model / scheme / dataset (the `GROUP` columns present in `df`, or `by`).

    Parameters
    ----------
    df : needs `item`, `context` ('stereo'/'nonstereo' or 0/1), `form` ('aff'/'neg' or 0/1) and the response.
    by : the fit-group columns (default: the `GROUP` columns present).
    response : the response column (`perplexity`).
    intercept_only_on_failure : also fit, labelled, the random-intercept-only model where the paper's fails.
    reml : REML (default, as lme4) or ML.
    fit_kwargs : passed to `MixedLM.fit` (statsmodels' default optimizers otherwise, so the numbers equal a
        direct `smf.mixedlm(...).fit()` on `model_frame(df)`).
    satterthwaite_df : compute the Satterthwaite degrees of freedom (as lmerTest); False leaves them NaN (the
        boundary check runs either way).

    Model: `perplexity ~ context * form`, groups = item, re_formula = "~context" (random intercept and random slope
    for context by root item), with the paper's coding (stereo = 1, aff = 1).

    Returns
    -------
    One row per fit and term (Intercept, context, form, context:form) with `estimate`, `std_error`, `z`,
    `p_value` (Wald z, two-sided normal: the paper's test and the default), `df_satterthwaite` and
    `p_value_satterthwaite` (t-test with Satterthwaite degrees of freedom, as lmerTest: df = 2 (c'Cc)^2 / (g'Ag),
    see `biaslab.metrics.satterthwaite`; same standard error), `ci_low`, `ci_high` (Wald 95%), and per fit:
    `random_effects` ("1 + context | item" or "1 | item"), `fallback`, `n_obs`, `n_items`, `converged`, `status`,
    `singular`, `warnings` (every warning caught during the fit and every problem detected afterwards,
    "; "-separated; the exception for a failed fit), `llf`, `residual_var`, the random-effect (co)variances,
    `re_correlation` and `deviance_gap` (statsmodels' deviance minus the best found here; > 0 when statsmodels
    stopped before the optimum).

    `status` is 'ok' (no warning), 'warnings' (converged, something was warned about), 'singular' (converged, but
    singular: see below), 'degenerate' (a constant response, or standard errors or random-effects covariance
    undefined), 'not converged', or
    'failed' (statsmodels raised; the rows' statistics are NaN). `singular` is True, whatever the status, when
    the random-effects covariance has an eigenvalue ~0, |re_correlation| > `SINGULAR_CORRELATION` (0.99), a
    variance below `SINGULAR_VARIANCE_RATIO` (1e-4) times the residual variance, or the (RE)ML optimum lies on the
    boundary (a rank-deficient covariance fits as well as any: lme4's isSingular fit, detected also where
    statsmodels stops inside, e.g. at a correlation of -0.976 on data whose optimum is at -1); each reason is in
    `warnings`.

    With `intercept_only_on_failure`, a random-slope model whose status is 'degenerate', 'not converged' or
    'failed' is followed by a random-intercept-only fit, reported in extra rows labelled
    `random_effects = "1 | item"`, `fallback = True`, with a FALLBACK note first in `warnings`; the failed
    random-slope rows stay in the table.
    """
    by = _group_columns(df, by)
    fits = fit_models(df, by=by, response=response, intercept_only_on_failure=intercept_only_on_failure, reml=reml,
                      fit_kwargs=fit_kwargs, satterthwaite_df=satterthwaite_df)
    return mixed_model_table(fits, by, response)


def model_predictions(df: pd.DataFrame, *, by: Sequence[str] | None = None, response: str = "perplexity",
                      **kwargs) -> pd.DataFrame:
    """`prediction_table` of the fits of `fit_mixed_model(df, ...)` (same keyword arguments)."""
    by = _group_columns(df, by)
    return prediction_table(fit_models(df, by=by, response=response, **kwargs), by, df, response)


# --------------------------------------------------------------------------------------------------- means and plot


def condition_means(df: pd.DataFrame, *, by: Sequence[str] | None = None,
                    response: str = "perplexity") -> pd.DataFrame:
    """Mean response per condition (context x form) and fit group, with a 95% t-interval over the sentences
    (`ci_low`/`ci_high` are NaN for fewer than two sentences)."""
    by = _group_columns(df, by)
    data = df[np.isfinite(pd.to_numeric(df[response], errors="coerce").astype(float))]
    rows = []
    for key, part in _groups(data, by):
        for (context, form), cell in part.groupby(["context", "form"], sort=False):
            values = cell[response].astype(float).to_numpy()
            n = len(values)
            mean = float(values.mean())
            sd = float(values.std(ddof=1)) if n > 1 else math.nan
            sem = sd / math.sqrt(n) if n > 1 else math.nan
            half = float(stats.t.ppf(0.975, n - 1)) * sem if n > 1 else math.nan
            rows.append({**key, "condition": CONDITION_OF.get((context, form), f"{context}/{form}"),
                         "context": context, "form": form, "n": n, "mean": mean, "sd": sd, "sem": sem,
                         "ci_low": mean - half, "ci_high": mean + half})
    columns = [*by, "condition", "context", "form", "n", "mean", "sd", "sem", "ci_low", "ci_high"]
    out = pd.DataFrame(rows, columns=columns)
    order = {c: i for i, c in enumerate(["SA", "SN", "NA", "NN"])}
    if len(out):
        out = (out.assign(_o=out["condition"].map(order).fillna(len(order)))
               .sort_values([*by, "_o"], kind="stable").drop(columns="_o").reset_index(drop=True))
    return out


def length_control(df: pd.DataFrame, *, by: Sequence[str] | None = None) -> pd.DataFrame:
    """The paper's length control, per tokenizer: the share of sentence quadruples (one root item's SA, SN, NA, NN
    sentences) whose four sentences have the same number of tokens, from the token counts stored with the scores
    (`n_tokens`: the scored tokens; a tokenizer is a `model_key`). The same share in words (whitespace-separated,
    the count the items were built to match: "is truly honest" / "is not sneaky") is given alongside.

    Parameters
    ----------
    df : `sentence_perplexities` output (`item`, `condition`, `n_tokens`; `text` for the word counts).
    by : the fit-group columns (default: the `GROUP` columns present).

    Returns
    -------
    One row per group: `n_items` (root items), `n_quadruples` (items with all four conditions scored; the others
    are not counted), `n_equal_tokens`, `share_equal_tokens` = n_equal_tokens / n_quadruples (NaN without a
    quadruple), `mean_token_range` (mean over quadruples of max - min tokens), `n_equal_words`,
    `share_equal_words`; and for the form contrast alone (the affirmative / negated sentences of one item and
    context, SA-SN and NA-NN): `n_form_pairs` (pairs with both scored) and `share_equal_tokens_form_pairs`.
    """
    by = _group_columns(df, by)
    for column in ("item", "condition", "n_tokens"):
        if column not in df.columns:
            raise DataError(f"negation length control: the data frame has no column {column!r}")
    rows = []
    for key, part in _groups(df, by):
        words = (part["text"].astype(str).str.split().str.len() if "text" in part.columns
                 else pd.Series(math.nan, index=part.index))
        data = part.assign(_words=words, _tokens=pd.to_numeric(part["n_tokens"], errors="coerce"))
        quads = n_tok = n_words = pairs = n_pairs_equal = 0
        ranges = []
        for _, item in data.groupby("item", sort=False):
            tokens_of = dict(zip(item["condition"], item["_tokens"]))
            for aff, neg in (("SA", "SN"), ("NA", "NN")):
                if aff in tokens_of and neg in tokens_of and pd.notna(tokens_of[aff]) and pd.notna(tokens_of[neg]):
                    pairs += 1
                    n_pairs_equal += bool(tokens_of[aff] == tokens_of[neg])
            if set(item["condition"]) != set(CONDITION_OF.values()) or len(item) != 4 or item["_tokens"].isna().any():
                continue
            quads += 1
            tokens = item["_tokens"].to_numpy(dtype=float)
            ranges.append(tokens.max() - tokens.min())
            n_tok += bool(tokens.max() == tokens.min())
            n_words += bool(item["_words"].nunique(dropna=False) == 1 and item["_words"].notna().all())
        rows.append({**key, "n_items": part["item"].nunique(), "n_quadruples": quads,
                     "n_equal_tokens": n_tok, "share_equal_tokens": n_tok / quads if quads else math.nan,
                     "mean_token_range": float(np.mean(ranges)) if ranges else math.nan,
                     "n_equal_words": n_words, "share_equal_words": n_words / quads if quads else math.nan,
                     "n_form_pairs": pairs, "share_equal_tokens_form_pairs": n_pairs_equal / pairs if pairs
                     else math.nan})
    columns = [*by, "n_items", "n_quadruples", "n_equal_tokens", "share_equal_tokens", "mean_token_range",
               "n_equal_words", "share_equal_words", "n_form_pairs", "share_equal_tokens_form_pairs"]
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------------------------------- all tables
