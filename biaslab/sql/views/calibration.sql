-- Pronoun-pair probabilities for calibration (DESIGN.md section 7): for every stimulus whose options include a male
-- and a female pronoun, the joint log-probability of the sentence with each, and the normalized probability of the
-- male one: p_male = exp(lp_male) / (exp(lp_male) + exp(lp_female)) = 1 / (1 + exp(lp_female - lp_male)).
-- gold_male is the human / gold label (1 male, 0 female) where the dataset has one.
CREATE OR REPLACE TEMP VIEW pronoun_pair_probs AS
WITH pairs AS (
    SELECT q.model_key, q.scheme, s.dataset, s.stimulus_id, s.item_id,
           max(q.sum_logprob) FILTER (WHERE q.option = s.options[list_position(s.option_labels, 'male')])   AS lp_male,
           max(q.sum_logprob) FILTER (WHERE q.option = s.options[list_position(s.option_labels, 'female')]) AS lp_female,
           any_value(CASE WHEN s.gold IS NULL THEN NULL
                          ELSE CAST(s.gold = s.options[list_position(s.option_labels, 'male')] AS INTEGER) END)
               AS gold_male
    FROM sequence_scores q JOIN stimuli s USING (stimulus_id)
    WHERE list_contains(s.option_labels, 'male') AND list_contains(s.option_labels, 'female')
    GROUP BY ALL
)
SELECT *, 1.0 / (1.0 + exp(lp_female - lp_male)) AS p_male
FROM pairs WHERE lp_male IS NOT NULL AND lp_female IS NOT NULL;
