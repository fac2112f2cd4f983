-- biaslab warehouse, schema version 8: what a chat API returned in logprobs mode (`--backend openai-chat --mode
-- logprobs`, docs/design.md section 6): per request, every token of the greedy reply with its log-probability and
-- the top alternatives at its position (text and log-probability, most probable first: at most 20). Chat APIs name
-- tokens by their text, not by id. The option probabilities derived from the position where the answer begins are
-- in choice_probs (mode 'logprobs' in choice_requests: approximate, never pooled with exact mode), re-derivable at
-- another temperature and top_k from these rows without the API.
CREATE TABLE IF NOT EXISTS chat_positions (
    model_key     VARCHAR NOT NULL,   -- key
    request_id    VARCHAR NOT NULL,   -- key
    position      INTEGER NOT NULL,   -- key: index of the generated token, from 0
    token         VARCHAR NOT NULL,   -- the generated token's text
    logprob       DOUBLE NOT NULL,
    top_tokens    VARCHAR[] NOT NULL, -- the alternatives at this position, most probable first
    top_logprobs  DOUBLE[] NOT NULL,
    answer_start  BOOLEAN NOT NULL    -- the position whose alternatives decide the answer
);
