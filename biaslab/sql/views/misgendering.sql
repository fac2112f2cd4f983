-- Misgendering meta-evaluation (Subramonian et al. 2025; DESIGN.md section 7).

-- Probability-based method, one row per scored option of a MISGENDERED / RUFF / TANGO-template stimulus.
-- perplexity = exp(-sum log p / n) over the option's whole sequence (BOS + text, every token scored).
CREATE OR REPLACE TEMP VIEW misgendering_prob_options AS
SELECT
    q.model_key,
    q.stimulus_id,
    q.scheme,
    st.dataset,
    st.item_id,
    st.pronoun_set                                  AS declared,
    st.grammatical_case,
    st.gold,
    q.option,
    list_position(st.options, q.option)             AS option_index,
    st.option_labels[list_position(st.options, q.option)] AS option_label,
    len(st.options)                                 AS n_options,
    q.n_tokens,
    q.sum_logprob,
    exp(-q.sum_logprob / q.n_tokens)                AS perplexity,
    json_extract_string(st.attrs, '$.template_of')  AS template_of,
    json_extract_string(st.attrs, '$.generation.request_id') AS source_request_id,
    CAST(json_extract(st.attrs, '$.generation.sample_index') AS INTEGER) AS source_sample_index,
    CAST(json_extract(st.attrs, '$.generation.seed') AS BIGINT) AS source_seed,
    CAST(json_extract(st.attrs, '$.generation.temperature') AS DOUBLE) AS source_temperature,
    CAST(json_extract(st.attrs, '$.generation.top_k') AS INTEGER) AS source_top_k,
    CAST(json_extract(st.attrs, '$.generation.top_p') AS DOUBLE) AS source_top_p,
    CAST(json_extract(st.attrs, '$.generation.max_new_tokens') AS INTEGER) AS source_max_new_tokens,
    CAST(json_extract(st.attrs, '$.generation.min_new_tokens') AS INTEGER) AS source_min_new_tokens
FROM sequence_scores q
JOIN stimuli st USING (stimulus_id)
WHERE q.protocol = 'prob'
  AND st.dataset IN ('misgendered', 'ruff', 'tango')
  AND st.options IS NOT NULL;

-- One row per stimulus, model and scoring scheme with every option scored: the paper's prediction (lowest
-- perplexity) and the joint-probability prediction (highest sum log p); ties go to the earlier option.
-- correct = prediction is gold. Stimuli with an option missing are left out.
CREATE OR REPLACE TEMP VIEW misgendering_prob AS
SELECT
    model_key,
    stimulus_id,
    scheme,
    any_value(dataset)          AS dataset,
    any_value(item_id)          AS item_id,
    any_value(declared)         AS declared,
    any_value(grammatical_case) AS grammatical_case,
    any_value(gold)             AS gold,
    first(option ORDER BY perplexity, option_index)          AS pred_perplexity,
    first(option ORDER BY sum_logprob DESC, option_index)    AS pred_joint,
    first(option_label ORDER BY perplexity, option_index)    AS pred_label,
    first(option ORDER BY perplexity, option_index) = any_value(gold)       AS correct,
    first(option ORDER BY sum_logprob DESC, option_index) = any_value(gold) AS correct_joint,
    any_value(template_of)         AS template_of,
    any_value(source_request_id)   AS source_request_id,
    any_value(source_sample_index) AS source_sample_index,
    any_value(source_seed)         AS source_seed,
    any_value(source_temperature)  AS source_temperature,
    any_value(source_top_k)        AS source_top_k,
    any_value(source_top_p)        AS source_top_p,
    any_value(source_max_new_tokens) AS source_max_new_tokens,
    any_value(source_min_new_tokens) AS source_min_new_tokens
FROM misgendering_prob_options
GROUP BY model_key, stimulus_id, scheme
HAVING count(*) = any_value(n_options);

-- Generation-based method: every stored continuation of a gen prompt, with a stable sample id (for annotation).
CREATE OR REPLACE TEMP VIEW gen_samples AS
SELECT
    substr(sha256(concat_ws(':', s.model_key, s.request_id, s.sample_index, s.seed, s.temperature, s.top_k,
                            s.top_p, s.max_new_tokens)), 1, 16) AS sample_id,
    s.model_key,
    s.request_id,
    g.stimulus_id,
    g.dataset,
    g.context,
    g.declared,
    g.prompt_text,
    g.pronoun_vocabulary,
    s.sample_index,
    s.seed,
    s.temperature,
    s.top_k,
    s.top_p,
    s.max_new_tokens,
    g.min_new_tokens,
    s.text,
    s.finish_reason,
    len(s.token_ids) AS n_tokens
FROM samples s
JOIN gen_requests g USING (model_key, request_id);
