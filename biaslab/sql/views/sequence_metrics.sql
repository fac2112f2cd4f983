-- Per scored text: joint log-probability, mean log-probability per token and perplexity.
CREATE OR REPLACE TEMP VIEW sequence_metrics AS
SELECT
    s.model_key,
    s.request_id,
    s.stimulus_id,
    s.protocol,
    s.option,
    s.scheme,
    s.n_tokens,
    s.sum_logprob,
    s.sum_logprob / NULLIF(s.n_tokens, 0)      AS mean_logprob,
    exp(-s.sum_logprob / NULLIF(s.n_tokens, 0)) AS perplexity,
    s.target_logprob
FROM sequence_scores s;
