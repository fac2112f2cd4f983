"""Contextual invariance (WinoPron): `winopron_stimuli`, `winopron_pf` (p(feminine | context) per model, stimulus
and sampling setting), `winopron_validity` (the paper's Table 3), and the valid samples as integer codes for the
mutual information (`sample_codes`, `sample_settings`)."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from .common import Source, json_field, option_with_label

#: the 95% normal quantile of the Wilson intervals
Z = 1.959964


def winopron_stimuli(source: Source) -> ir.Table:
    """WinoPron stimuli with their features (context, option order, case, role, Misersky rating), the feminine and
    masculine option, the template pair (pair_id) and the upstream answer."""
    st = source("stimuli")
    st = st.filter(st.dataset == "winopron")
    out = (st.left_join(option_with_label(st, "female", "female_option"), "stimulus_id")
           .left_join(option_with_label(st, "male", "male_option"), "stimulus_id"))
    return out.select(st.stimulus_id, st.item_id, st.context, st.option_order, st.grammatical_case,
                      st.referent_role, st.stereotype_rating, st.occupation, st.participant, out.female_option,
                      out.male_option, pair_id=json_field(st.attrs, "pair_id"),
                      answer=json_field(st.attrs, "answer").cast("int32"))


def _wilson(n_female: ir.NumericValue, n_valid: ir.NumericValue, sign: float) -> ir.NumericValue:
    p = n_female.cast("float64") / n_valid
    centre = p + Z ** 2 / (2 * n_valid)
    spread = Z * (p * (1 - p) / n_valid + Z ** 2 / (4 * n_valid.cast("float64") ** 2)).sqrt()
    return ibis.cases((n_valid > 0, (centre + sign * spread) / (1 + Z ** 2 / n_valid)), else_=ibis.null("float64"))


_KEY = ["model_key", "request_id", "stimulus_id", "mode", "temperature", "top_k", "top_p", "prompt_version",
        "max_new_tokens"]


def winopron_pf(source: Source) -> ir.Table:
    """p(feminine | context) per model, request (stimulus) and sampling setting.

    One row per collection of a stimulus (model, request: prompt version, token limit, sampling settings), so
    separate collections are never pooled; forced-choice requests only (protocol 'choice', not the comprehension
    questions of protocol 'meta' about the same stimuli). Exact mode: p_f = p(female) / (p(female) + p(male)), the
    exact probability renormalized over the valid answers (logprobs mode, a chat API's approximation, the same with
    mode 'logprobs': never pooled with exact); p_valid = p(female) + p(male); p_unresolved the mass of
    pruned branches. Sample mode: p_f = n_female / n_valid with a 95% Wilson interval (wilson_low, wilson_high);
    p_valid = n_valid / n. Stimulus features come along for the metrics.
    """
    w = winopron_stimuli(source)
    r = source("choice_requests")
    r = r.filter(r.protocol == "choice")  # not the comprehension questions (protocol 'meta')
    c = source("choice_probs")
    e = c.join(r, ["model_key", "request_id"]).join(w, "stimulus_id")
    exact = e.group_by(model_key=e.model_key, request_id=e.request_id, stimulus_id=e.stimulus_id,
                       mode=e["mode"], temperature=e.temperature, top_k=e.top_k, top_p=e.top_p,
                       prompt_version=e.prompt_version, max_new_tokens=e.max_new_tokens).agg(
        p_female=e.prob.sum(where=e.option == e.female_option),
        p_male=e.prob.sum(where=e.option == e.male_option),
        p_unresolved=e.prob.sum(where=e.option == "unresolved"))
    s = source("samples")
    rs = r.select("model_key", "request_id", "prompt_version")
    j = s.join(w, "stimulus_id").join(rs, ["model_key", "request_id"])
    sampled = j.group_by(model_key=j.model_key, request_id=j.request_id, stimulus_id=j.stimulus_id,
                         mode=ibis.literal("sample"), temperature=j.temperature, top_k=j.top_k, top_p=j.top_p,
                         prompt_version=j.prompt_version, max_new_tokens=j.max_new_tokens).agg(
        n=j.count(), n_valid=j.count(where=j.valid),
        n_female=j.count(where=j.valid & (j.answer == j.female_option)))
    null_n, null_d = ibis.null("int64"), ibis.null("float64")
    valid_mass = exact.p_female + exact.p_male
    exact_u = exact.select(*_KEY, p_f=exact.p_female / valid_mass.nullif(0), p_valid=valid_mass, n=null_n,
                           n_valid=null_n, wilson_low=null_d, wilson_high=null_d,
                           p_unresolved=exact.p_unresolved.cast("float64"))
    nv = sampled.n_valid
    sample_u = sampled.select(*_KEY, p_f=sampled.n_female / nv.nullif(0).cast("float64"),
                              p_valid=nv / sampled.n.cast("float64"), n=sampled.n.cast("int64"),
                              n_valid=nv.cast("int64"), wilson_low=_wilson(sampled.n_female, nv, -1.0),
                              wilson_high=_wilson(sampled.n_female, nv, 1.0), p_unresolved=null_d)
    unified = exact_u.union(sample_u)
    features = w.select("stimulus_id", "item_id", "context", "option_order", "grammatical_case", "referent_role",
                        "stereotype_rating", "occupation", "participant", "pair_id", "answer")
    return unified.join(features, "stimulus_id")


def _bigint(total: ir.IntegerValue) -> ir.IntegerValue:
    """A sum of int64 as BIGINT: DuckDB sums BIGINT into HUGEINT, and Ibis drops a cast to the type it believes the
    sum has already (int64); a cast to the non-nullable type is kept (the values stay NULL where the sum is)."""
    return total.cast("!int64")


def winopron_validity(source: Source) -> ir.Table:
    """Valid measurements per model, setting, context and option order (the paper's Table 3).

    Sample mode: valid_samples / samples (valid_share), the paper's "valid / total"; exact mode: valid_mass, the mean
    over prompts of the exact probability of a valid answer (p(female) + p(male)), and unresolved_mass, the mean mass
    of pruned branches (the rest, 1 - valid_mass - unresolved_mass, is invalid). mean_p_valid is the mean per-prompt
    share in both modes.
    """
    pf = winopron_pf(source)
    return pf.group_by(["model_key", "mode", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens",
                        "context", "option_order"]).agg(
        prompts=pf.count(), mean_p_valid=pf.p_valid.mean(), prompts_with_valid_answers=pf.count(where=pf.p_f.notnull()),
        valid_samples=_bigint(pf.n_valid.sum()), samples=_bigint(pf.n.sum()),
        valid_share=pf.n_valid.sum().cast("float64") / pf.n.sum().nullif(0).cast("float64"),
        valid_mass=pf.p_valid.mean(where=pf["mode"] != "sample"), unresolved_mass=pf.p_unresolved.mean())


#: the columns that identify a sample-mode collection setting, in the order its codes are ranked
SAMPLE_SETTING = ["model_key", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens"]


def _valid_choice_samples(source: Source) -> ir.Table:
    """Valid samples of forced-choice (protocol 'choice') WinoPron requests, with the request's prompt version and
    the stimulus's feminine option."""
    w = winopron_stimuli(source).select("stimulus_id", "female_option")
    s = source("samples")
    r = source("choice_requests")
    r = r.filter(r.protocol == "choice").select("model_key", "request_id", "prompt_version")
    return s.filter(s.valid).join(w, "stimulus_id").join(r, ["model_key", "request_id"])


def sample_settings(source: Source) -> ir.Table:
    """The distinct sample-mode settings (SAMPLE_SETTING) with valid WinoPron samples, in rank order: row i is the
    setting whose `sample_codes` code is i."""
    j = _valid_choice_samples(source)
    return j.select(*SAMPLE_SETTING).distinct().order_by(SAMPLE_SETTING)


def sample_codes(source: Source) -> ir.Table:
    """Every valid WinoPron sample as integers, in the samples' key order (model, request, sampling settings,
    sample index, seed): `setting` (row of `sample_settings`), `stimulus` (row of `winopron_stimuli` ordered by
    stimulus_id) and `y` (1 = the feminine option). Only these codes leave the engine for the mutual information.
    """
    codes = winopron_stimuli(source).select("stimulus_id",
                                            stimulus=ibis.row_number().over(order_by="stimulus_id").cast("int32"))
    j = _valid_choice_samples(source).join(codes, "stimulus_id")
    setting = ibis.dense_rank().over(order_by=[j[c] for c in SAMPLE_SETTING]).cast("int32")
    y = ibis.coalesce(j.answer == j.female_option, False).cast("int8")
    ordered = j.select(setting=setting, stimulus=j.stimulus, y=y, model_key=j.model_key, request_id=j.request_id,
                       temperature=j.temperature, top_k=j.top_k, top_p=j.top_p, max_new_tokens=j.max_new_tokens,
                       sample_index=j.sample_index, seed=j.seed)
    ordered = ordered.order_by(["model_key", "request_id", "temperature", "top_k", "top_p", "max_new_tokens",
                                "sample_index", "seed"])
    return ordered.select("setting", "stimulus", "y")
