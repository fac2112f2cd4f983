-- requires: choice_probs_at, winopron_stimuli
-- Exact-mode p(feminine) re-derived at another temperature and top_k from the stored trie evidence
-- (`choice_probs_at`, no model): the columns of winopron_pf with temperature = temp, top_k = k, top_p = 1, plus the
-- settings of the collection the evidence came from (collected_temperature, collected_top_k, collected_top_p).
-- Every exact-mode forced-choice request is re-derived (k must not exceed its nodes' stored K; comprehension
-- questions, protocol meta, are not); filter on collected_* to keep one
-- collection. At the collection's own settings it equals winopron_pf (tests/views/test_pf_at_macro.py checks it on
-- stored evidence, column for column).
CREATE OR REPLACE TEMP MACRO winopron_pf_at(temp, k) AS TABLE
WITH derived AS (
    SELECT c.model_key, c.request_id, r.stimulus_id, r.prompt_version, r.max_new_tokens,
           sum(c.prob) FILTER (WHERE c.option = w.female_option) AS p_female,
           sum(c.prob) FILTER (WHERE c.option = w.male_option)   AS p_male,
           sum(c.prob) FILTER (WHERE c.option = 'unresolved')    AS p_unresolved
    FROM choice_probs_at(temp, k) c
    JOIN choice_requests r USING (model_key, request_id)
    JOIN winopron_stimuli w USING (stimulus_id)
    WHERE r.protocol = 'choice'
    GROUP BY ALL
),
collected AS (
    SELECT DISTINCT model_key, request_id, temperature AS collected_temperature, top_k AS collected_top_k,
           top_p AS collected_top_p
    FROM choice_probs
)
SELECT d.model_key, d.request_id, d.stimulus_id, 'exact' AS mode, temp::DOUBLE AS temperature, k::INTEGER AS top_k,
       1.0::DOUBLE AS top_p, d.prompt_version, d.max_new_tokens,
       d.p_female / nullif(d.p_female + d.p_male, 0) AS p_f,
       d.p_female + d.p_male AS p_valid,
       NULL::BIGINT AS n, NULL::BIGINT AS n_valid, NULL::DOUBLE AS wilson_low, NULL::DOUBLE AS wilson_high,
       d.p_unresolved,
       w.item_id, w.context, w.option_order, w.grammatical_case, w.referent_role, w.stereotype_rating,
       w.occupation, w.participant, w.pair_id, w.answer,
       c.collected_temperature, c.collected_top_k, c.collected_top_p
FROM derived d JOIN collected c USING (model_key, request_id) JOIN winopron_stimuli w USING (stimulus_id);
