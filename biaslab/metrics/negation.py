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
  p-value and the Wald 95% interval, plus the fit's status and every warning raised or detected (never hidden; a
  failing fit is a row with status 'failed', never an exception). No silent fallback: the random-intercept-only
  model is fitted only on request and labelled as such.
* `condition_means(df)` and `interaction_plot(means, path)`: mean PPL per condition with 95% t-intervals, plotted
  with form on the x axis and one line per context.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

#: The datasets whose stimuli this study reads (both come from biaslab/loaders/negation.py).
NEGATION_DATASETS = ("negation-examples", "negation")
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
CONDITION_OF = {("stereo", "aff"): "SA", ("stereo", "neg"): "SN", ("nonstereo", "aff"): "NA",
                ("nonstereo", "neg"): "NN"}

_SQL = """
SELECT m.model_key,
       coalesce(md.name, m.model_key)        AS model_name,
       m.scheme,
       CASE WHEN m.scheme = 'causal' THEN 'perplexity' ELSE 'pseudo_perplexity' END AS measure,
       m.protocol,
       st.dataset,
       m.stimulus_id,
       st.item_id                            AS stimulus_item_id,
       st.attrs->>'item'                     AS item,
       st.attrs->>'condition'                AS condition,
       st.context,
       st.form,
       st.attrs->>'group'                    AS "group",
       st.text,
       m.n_tokens,
       m.sum_logprob,
       m.perplexity
FROM sequence_metrics m
JOIN stimuli st USING (stimulus_id)
LEFT JOIN models md USING (model_key)
WHERE st.dataset IN ({placeholders}) AND m.option IS NULL
ORDER BY m.model_key, m.scheme, st.dataset, m.protocol, st.item_id
"""


def sentence_perplexities(wh, datasets: Sequence[str] = NEGATION_DATASETS) -> pd.DataFrame:
    """One row per (model, scheme, protocol, negation stimulus): item (root item id), context, form, condition,
    n_tokens, sum_logprob and `perplexity` = exp(-sum_logprob / n_tokens) (pseudo-perplexity for masked schemes;
    NaN when no token was scored)."""
    datasets = list(datasets)
    if not datasets:
        raise ValueError("sentence_perplexities: no dataset given")
    sql = _SQL.format(placeholders=", ".join("?" for _ in datasets))
    return wh.con.execute(sql, datasets).df()


# --------------------------------------------------------------------------------------------------- coding


def _code(values: pd.Series, coding: dict[str, int], name: str) -> pd.Series:
    """0/1 codes of a string column (or a column already coded 0/1)."""
    if pd.api.types.is_numeric_dtype(values) and set(values.dropna().unique()) <= {0, 1}:
        return values.astype(float)
    coded = values.map(coding)
    bad = sorted({str(v) for v, c in zip(values, coded) if pd.isna(c)})
    if bad:
        raise ValueError(f"{name}: unknown value(s) {bad}; expected {sorted(coding)} (or 0/1 codes)")
    return coded.astype(float)


def model_frame(df: pd.DataFrame, response: str = "perplexity") -> pd.DataFrame:
    """The frame the mixed model is fitted on, in the input's row order: `perplexity` (the response), `context`
    (stereo = 1, nonstereo = 0), `form` (aff = 1, neg = 0) and `item` (the grouping factor, as text). Rows without a
    finite response are dropped."""
    for column in (response, "context", "form", "item"):
        if column not in df.columns:
            raise ValueError(f"negation mixed model: the data frame has no column {column!r}")
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


def _fit_one(frame: pd.DataFrame, re_formula: str | None, fit_kwargs: dict) -> dict:
    """Fit one mixed model; never raises. Returns the per-term table and the fit diagnostics."""
    import statsmodels.formula.api as smf

    out: dict = {"terms": None, "converged": False, "status": "failed", "error": None, "warnings": []}
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")  # statsmodels computes lazily: everything read from the result stays inside
        try:
            model = smf.mixedlm(FORMULA, frame, groups=frame["item"], re_formula=re_formula)
            result = model.fit(**fit_kwargs)
            params = result.fe_params
            bse = result.bse[params.index]
            z = result.tvalues[params.index]
            p = result.pvalues[params.index]
            ci = result.conf_int(alpha=0.05).loc[params.index]
            terms = pd.DataFrame({"term": params.index, "estimate": params.to_numpy(), "std_error": bse.to_numpy(),
                                  "z": z.to_numpy(), "p_value": p.to_numpy(), "ci_low": ci[0].to_numpy(),
                                  "ci_high": ci[1].to_numpy()}).set_index("term").reindex(TERMS)
            cov = result.cov_re
            cov_re = np.asarray(cov, dtype=float)
            names = list(cov.index) if hasattr(cov, "index") else []
            converged = bool(getattr(result, "converged", False))
            llf = float(result.llf)
            scale = float(result.scale)
        except Exception as exc:  # noqa: BLE001 - a failed fit is reported, never raised
            out["error"] = f"{type(exc).__name__}: {exc}"
            result = None
        caught = [f"{w.category.__name__}: {w.message}" for w in record]
    if result is None:
        out["warnings"] = _dedupe(caught)
        return out

    degenerate = singular = False
    if not converged:
        notes.append("not converged: the optimizer stopped without convergence (estimates are unreliable)")
    if not np.all(np.isfinite(terms["std_error"].to_numpy(dtype=float))):
        degenerate = True
        notes.append("standard errors undefined for some terms (Hessian not positive definite)")
    if cov_re.size:
        if not np.all(np.isfinite(cov_re)):
            degenerate = True
            notes.append("random-effects covariance is not finite")
        else:
            eig = np.linalg.eigvalsh((cov_re + cov_re.T) / 2)
            size = max(abs(scale), float(np.max(np.abs(eig))), 1e-12)
            if eig.min() <= 1e-6 * size:
                singular = True
                notes.append("singular random-effects covariance (boundary fit: a variance component is ~0 or "
                             "the random intercept and slope are perfectly correlated)")
    out.update(
        terms=terms,
        converged=converged,
        warnings=_dedupe(caught + notes),
        llf=llf if np.isfinite(llf) else math.nan,
        residual_var=scale,
        var_item_intercept=float(cov_re[0, 0]) if cov_re.size else math.nan,
        var_item_context=float(cov_re[names.index("context"), names.index("context")])
        if "context" in names else math.nan,
        cov_item_intercept_context=float(cov_re[0, names.index("context")]) if "context" in names else math.nan,
    )
    out["status"] = ("not converged" if not converged else "degenerate" if degenerate else
                     "singular" if singular else "warnings" if out["warnings"] else "ok")
    return out


def fit_mixed_model(df: pd.DataFrame, *, by: Sequence[str] | None = None, response: str = "perplexity",
                    intercept_only_on_failure: bool = False, reml: bool = True,
                    fit_kwargs: dict | None = None) -> pd.DataFrame:
    """The paper's linear mixed model per model / scheme / dataset (the `GROUP` columns present in `df`, or `by`).

    `df` needs `item`, `context` ('stereo'/'nonstereo' or 0/1), `form` ('aff'/'neg' or 0/1) and the response
    (`perplexity`). Model: `perplexity ~ context * form`, groups = item, re_formula = "~context" (random intercept
    and random slope for context by root item), REML, statsmodels' default optimizers (`fit_kwargs` go to
    `MixedLM.fit`), so the numbers equal a direct `smf.mixedlm(...).fit()` on `model_frame(df)`.

    Returns one row per fit and term (Intercept, context, form, context:form) with `estimate`, `std_error`, `z`,
    `p_value`, `ci_low`, `ci_high` (Wald 95%), and per fit: `random_effects` ("1 + context | item" or
    "1 | item"), `fallback` (True only for the optional random-intercept-only refit), `n_obs`, `n_items`,
    `converged`, `status`, `warnings` (every warning caught during the fit and every problem detected afterwards,
    "; "-separated; the exception for a failed fit), `llf`, `residual_var` and the random-effect (co)variances.
    `status` is 'ok' (no warning), 'warnings' (converged, something was warned about), 'singular' (converged with
    a singular random-effects covariance: a boundary fit), 'degenerate' (standard errors or random-effects
    covariance undefined), 'not converged', or 'failed' (statsmodels raised; the rows' statistics are NaN).

    With `intercept_only_on_failure`, a random-slope model whose status is 'degenerate', 'not converged' or
    'failed' is followed by a random-intercept-only fit, reported in extra rows labelled
    `random_effects = "1 | item"`, `fallback = True`, with a FALLBACK note first in `warnings`; the failed
    random-slope rows stay in the table.
    """
    by = _group_columns(df, by)
    kwargs = {"reml": reml, **(fit_kwargs or {})}
    rows = []
    for key, part in _groups(df, by):
        frame = model_frame(part, response)
        dropped = len(part) - len(frame)
        base = {**key, "n_obs": len(frame), "n_items": frame["item"].nunique()}
        results = [(RANDOM_SLOPE, False, _fit_one(frame, "~context", kwargs))]
        if intercept_only_on_failure and results[0][2]["status"] in FAILED:
            results.append((RANDOM_INTERCEPT, True, _fit_one(frame, None, kwargs)))
        for label, fallback, res in results:
            messages = list(res.get("warnings", []))
            if dropped:
                messages.insert(0, f"dropped {dropped} row(s) without a finite {response}")
            if res["error"]:
                messages.insert(0, f"fit failed: {res['error']}")
            if fallback:
                messages.insert(0, "FALLBACK: random-intercept-only model, fitted because the random-slope model "
                                   "failed or did not converge; not the paper's model")
            terms = res["terms"]
            for term in TERMS:
                stats_row = (terms.loc[term].to_dict() if terms is not None else
                             dict.fromkeys(["estimate", "std_error", "z", "p_value", "ci_low", "ci_high"], math.nan))
                rows.append({
                    **base, "random_effects": label, "fallback": fallback, "term": term, **stats_row,
                    "converged": res["converged"], "status": res["status"], "warnings": "; ".join(messages),
                    "llf": res.get("llf", math.nan), "residual_var": res.get("residual_var", math.nan),
                    "var_item_intercept": res.get("var_item_intercept", math.nan),
                    "var_item_context": res.get("var_item_context", math.nan),
                    "cov_item_intercept_context": res.get("cov_item_intercept_context", math.nan),
                })
    columns = [*by, "random_effects", "fallback", "term", "estimate", "std_error", "z", "p_value", "ci_low",
               "ci_high", "n_obs", "n_items", "converged", "status", "warnings", "llf", "residual_var",
               "var_item_intercept", "var_item_context", "cov_item_intercept_context"]
    return pd.DataFrame(rows, columns=columns)


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


FORM_LABELS = {"aff": "affirmative", "neg": "negated"}
CONTEXT_LABELS = {"stereo": "stereotype-consistent", "nonstereo": "stereotype-inconsistent"}


def interaction_plot(means: pd.DataFrame, path: str | Path, *, by: Sequence[str] | None = None,
                     title: str | None = None) -> Path:
    """Interaction plot of `condition_means` output: x = form (affirmative, negated), one line per context, 95%
    t-interval error bars, one panel per fit group. Written with the Agg canvas (no display needed); the file type
    follows the suffix of `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    by = _group_columns(means, by)
    panels = list(_groups(means, by)) if len(means) else []
    n = max(len(panels), 1)
    cols = min(n, 3)
    nrows = math.ceil(n / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * nrows))
    FigureCanvasAgg(fig)
    if not panels:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no negation perplexities", ha="center", va="center")
        ax.set_axis_off()
    forms = ["aff", "neg"]
    for i, (key, part) in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, i + 1)
        for j, (context, style) in enumerate((("stereo", "o-"), ("nonstereo", "s--"))):
            cell = part[part["context"] == context].set_index("form").reindex(forms)
            x = np.arange(len(forms)) + (j - 0.5) * 0.04  # small dodge so the bars do not overlap
            mean = cell["mean"].to_numpy(dtype=float)
            err = np.vstack([mean - cell["ci_low"].to_numpy(dtype=float),
                             cell["ci_high"].to_numpy(dtype=float) - mean])
            ax.errorbar(x, mean, yerr=np.where(np.isfinite(err), err, 0.0), fmt=style, capsize=4,
                        label=CONTEXT_LABELS[context])
        ax.set_xticks(range(len(forms)), [FORM_LABELS[f] for f in forms])
        ax.set_xlim(-0.4, len(forms) - 0.6)
        ax.set_xlabel("form")
        measure = "pseudo-perplexity" if key.get("scheme", "causal") != "causal" else "perplexity"
        ax.set_ylabel(f"mean {measure} (95% CI)")
        n = int(part["n"].sum()) if "n" in part.columns else len(part)
        ax.set_title(f"{' / '.join(str(v) for v in key.values()) or 'all'} (n = {n} sentences)", fontsize=9)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
