-- biaslab warehouse, schema version 2: forced-choice evidence (exact mode) and samples
-- (docs/design.md sections 4 and 6).

-- One row per rendered forced-choice prompt and model: the parent of choice_nodes / choice_edges / choice_probs.
CREATE TABLE IF NOT EXISTS choice_requests (
    model_key      VARCHAR NOT NULL,   -- key
    request_id     VARCHAR NOT NULL,   -- key
    stimulus_id    VARCHAR NOT NULL,
    protocol       VARCHAR NOT NULL,
    mode           VARCHAR NOT NULL,   -- exact | sample
    prompt_version VARCHAR NOT NULL,
    adaptation     VARCHAR NOT NULL,   -- how the chat template was adapted (system folded, prefill appended)
    prompt_text    VARCHAR NOT NULL,
    options        VARCHAR[] NOT NULL,
    max_new_tokens INTEGER NOT NULL,
    k_store        INTEGER,            -- exact mode: logits kept per trie node
    run_id         VARCHAR
);

-- Exact mode: every trie node explored (a generated-token prefix that the answer parser can still accept).
-- node 0 is the root (nothing generated yet); top-K raw logits in descending order and the full-vocabulary
-- logsumexp, so probabilities under any temperature and any top_k <= K are re-derivable without the model.
CREATE TABLE IF NOT EXISTS choice_nodes (
    model_key   VARCHAR NOT NULL,      -- key
    request_id  VARCHAR NOT NULL,      -- key
    node_id     INTEGER NOT NULL,      -- key
    parent_id   INTEGER,
    token_id    INTEGER,               -- token on the edge from the parent
    depth       INTEGER NOT NULL,
    topk_ids    INTEGER[] NOT NULL,
    topk_logits FLOAT[] NOT NULL,
    logsumexp   DOUBLE NOT NULL
);

-- Exact mode: edges out of a node (tokens among its top-K) that either reach a live child or complete a valid
-- answer. Edges to rejected text are not stored: their mass is the `invalid` outcome.
CREATE TABLE IF NOT EXISTS choice_edges (
    model_key  VARCHAR NOT NULL,       -- key
    request_id VARCHAR NOT NULL,       -- key
    node_id    INTEGER NOT NULL,       -- key
    token_id   INTEGER NOT NULL,       -- key
    outcome    VARCHAR NOT NULL,       -- an option (valid answer completed) or '__live__'
    child_id   INTEGER                 -- the child node when outcome = '__live__'
);

-- Exact mode: probability of each option and of 'invalid' under the sampling settings of the run.
CREATE TABLE IF NOT EXISTS choice_probs (
    model_key   VARCHAR NOT NULL,      -- key
    request_id  VARCHAR NOT NULL,      -- key
    option      VARCHAR NOT NULL,      -- key ('invalid' for rejected mass)
    temperature DOUBLE NOT NULL,       -- key
    top_k       INTEGER NOT NULL,      -- key
    top_p       DOUBLE NOT NULL,       -- key
    prob        DOUBLE NOT NULL
);

-- Sample mode: one row per generated sample; invalid answers are kept and flagged.
CREATE TABLE IF NOT EXISTS samples (
    model_key      VARCHAR NOT NULL,   -- key
    request_id     VARCHAR NOT NULL,   -- key
    sample_index   INTEGER NOT NULL,   -- key
    seed           BIGINT NOT NULL,    -- key
    temperature    DOUBLE NOT NULL,    -- key
    top_k          INTEGER NOT NULL,   -- key
    top_p          DOUBLE NOT NULL,    -- key
    max_new_tokens INTEGER NOT NULL,   -- key
    stimulus_id    VARCHAR NOT NULL,
    text           VARCHAR NOT NULL,
    token_ids      INTEGER[] NOT NULL,
    token_logprobs DOUBLE[] NOT NULL,  -- log p under the model (temperature 1, no truncation)
    finish_reason  VARCHAR NOT NULL,   -- stop | length
    answer         VARCHAR,
    valid          BOOLEAN NOT NULL,
    run_id         VARCHAR
);
