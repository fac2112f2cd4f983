"""`option_probs`: the probability of every option of every stimulus, from any protocol that measures one, for any
dataset with options (built in or a user's own): the input of `biaslab metrics options`."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from .common import Source, option_labels

COLUMNS = ["model_key", "dataset", "stimulus_id", "item_id", "method", "setting", "option", "option_label", "p",
           "valid_mass", "n", "gold_label"]


def _labelled(source: Source) -> ir.Table:
    """(stimulus_id, dataset, item_id, option, option_label, gold_label) of every option of every stimulus with
    labelled options."""
    st = source("stimuli")
    st = st.filter(st.options.notnull() & st.option_labels.notnull())
    pairs = option_labels(st)
    gold = pairs.join(st.select("stimulus_id", "gold"), "stimulus_id")
    gold = gold.filter(gold.option == gold.gold).select("stimulus_id", gold_label=gold.option_label)
    return (pairs.join(st.select("stimulus_id", "dataset", "item_id"), "stimulus_id")
            .left_join(gold, "stimulus_id").select("stimulus_id", "dataset", "item_id", "option", "option_label",
                                                   "gold_label"))


def _number(value: ir.NumericValue) -> ir.StringValue:
    return value.cast("string")


def _prob(source: Source, labelled: ir.Table) -> ir.Table:
    """prob: the sentence with each option filled in, normalized over the stimulus's options:
    p(o) = exp(lp_o) / sum_o' exp(lp_o') (lp = the joint log-probability, or the pseudo-log-likelihood)."""
    s = source("sequence_scores")
    s = s.filter((s.protocol == "prob") & s.option.notnull())
    j = s.join(labelled, ["stimulus_id", "option"])
    group = [j.model_key, j.scheme, j.stimulus_id]
    shifted = (j.sum_logprob - j.sum_logprob.max().over(group_by=group)).exp()
    j = j.mutate(w=shifted)
    j = j.mutate(p=j.w / j.w.sum().over(group_by=group))
    return j.select("model_key", "dataset", "stimulus_id", "item_id", method=ibis.literal("prob"),
                    setting=j.scheme, option=j.option, option_label=j.option_label, p=j.p,
                    valid_mass=ibis.null("float64"), n=ibis.null("int64"), gold_label=j.gold_label)


def _choice_setting(t: ir.Table) -> ir.StringValue:
    return (t.prompt_version + " T=" + _number(t.temperature) + " top_k=" + _number(t.top_k) + " top_p="
            + _number(t.top_p) + " max_new_tokens=" + _number(t.max_new_tokens))


def _choice_exact(source: Source, labelled: ir.Table, mode: str = "exact") -> ir.Table:
    """choice, exact mode: the exact probability of each option renormalized over the options,
    p(o) = P(o) / sum_o' P(o'); valid_mass = sum_o' P(o') (the rest is unresolved or invalid). `mode` "logprobs":
    the same over a chat API's approximate probabilities (method 'choice-logprobs')."""
    r = source("choice_requests")
    r = r.filter((r.protocol == "choice") & (r["mode"] == mode)).select(
        "model_key", "request_id", "stimulus_id", "prompt_version", "max_new_tokens")
    c = source("choice_probs").join(r, ["model_key", "request_id"])
    j = c.join(labelled, ["stimulus_id", "option"])
    group = [j.model_key, j.request_id, j.temperature, j.top_k, j.top_p]
    valid = j.prob.sum().over(group_by=group)
    return j.select("model_key", "dataset", "stimulus_id", "item_id", method=ibis.literal(f"choice-{mode}"),
                    setting=_choice_setting(j), option=j.option, option_label=j.option_label,
                    p=j.prob / valid.nullif(0), valid_mass=valid, n=ibis.null("int64"), gold_label=j.gold_label)


def _choice_sample(source: Source, labelled: ir.Table) -> ir.Table:
    """choice, sample mode: p(o) = n(o) / n_valid over the request's samples; valid_mass = n_valid / n."""
    r = source("choice_requests")
    r = r.filter((r.protocol == "choice") & (r["mode"] == "sample")).select("model_key", "request_id",
                                                                           "prompt_version")
    s = source("samples").join(r, ["model_key", "request_id"])
    key = ["model_key", "request_id", "stimulus_id", "temperature", "top_k", "top_p", "max_new_tokens",
           "prompt_version"]
    totals = s.group_by(key).agg(n=s.count(), n_valid=s.count(where=s.valid))
    per = totals.join(labelled, "stimulus_id")
    valid = s.filter(s.valid)
    hits = valid.group_by([*key, valid.answer.name("option")]).agg(k=valid.count())
    j = per.left_join(hits, [*key, "option"])
    k = ibis.coalesce(j.k, 0)
    return j.select(j.model_key, j.dataset, j.stimulus_id, j.item_id, method=ibis.literal("choice-sample"),
                    setting=_choice_setting(j), option=j.option, option_label=j.option_label,
                    p=k.cast("float64") / j.n_valid.nullif(0).cast("float64"),
                    valid_mass=j.n_valid.cast("float64") / j.n.cast("float64"), n=j.n.cast("int64"),
                    gold_label=j.gold_label)


def _imported(source: Source, labelled: ir.Table) -> ir.Table:
    """Another tool's answers (`biaslab import`): p(o) = 1 for the option the tool answered, 0 for the others; NULL
    for every option of a stimulus whose answer the tool's output did not name (counted invalid). method 'import',
    setting the tool and its task."""
    a = source("imported_answers")
    a = a.filter(a.option.notnull())
    j = a.join(labelled, ["stimulus_id", "option"])
    return j.select("model_key", "dataset", "stimulus_id", "item_id", method=ibis.literal("import"),
                    setting=j.tool + " " + j.task, option=j.option, option_label=j.option_label,
                    p=j.chosen.cast("float64"), valid_mass=ibis.null("float64"), n=ibis.null("int64"),
                    gold_label=j.gold_label)


def option_probs(source: Source) -> ir.Table:
    """Per model, collection setting, stimulus and option: the option's probability renormalized over the
    stimulus's options (`p`), the share that was a valid answer (`valid_mass`; NULL for prob), the samples drawn
    (`n`, sample mode) and the gold option's label (`gold_label`, NULL where there is none).

    `method` is 'prob' (the sentence with the option filled in, scored), 'choice-exact', 'choice-sample',
    'choice-logprobs' (a chat API's approximation, docs/design.md section 6) or 'import' (another tool's answers,
    `biaslab import`: 1 for the option it answered); `setting`
    the scoring scheme (prob) or the prompt version and sampling settings (choice), so separate collections are
    never pooled. Only stimuli with labelled options take part; comprehension questions (protocol 'meta') do not.
    """
    labelled = _labelled(source)
    parts = [_prob(source, labelled), _choice_exact(source, labelled), _choice_sample(source, labelled),
             _choice_exact(source, labelled, "logprobs"), _imported(source, labelled)]
    table = parts[0]
    for part in parts[1:]:
        table = table.union(part)
    return table.select(*COLUMNS)
