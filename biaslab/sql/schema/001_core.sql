-- biaslab warehouse, schema version 1: stimuli, models, runs, sequence and token scores.
-- Identity keys (docs/design.md section 3) are enforced by the append path (anti-join on the key columns),
-- not by PRIMARY KEY indexes, so bulk appends stay fast on tables with tens of millions of rows.

CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR NOT NULL,
    value VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS stimuli (
    stimulus_id       VARCHAR NOT NULL,   -- key
    dataset           VARCHAR NOT NULL,
    upstream_version  VARCHAR NOT NULL,
    item_id           VARCHAR NOT NULL,
    text              VARCHAR NOT NULL,
    template          VARCHAR,
    slot              VARCHAR,
    prime             VARCHAR,
    context           VARCHAR,
    form              VARCHAR,
    stereotype        VARCHAR,
    stereotype_rating DOUBLE,
    pronoun_set       VARCHAR,
    grammatical_case  VARCHAR,
    options           VARCHAR[],
    option_labels     VARCHAR[],
    option_texts      VARCHAR[],
    option_order      VARCHAR,
    gold              VARCHAR,
    referent_role     VARCHAR,
    occupation        VARCHAR,
    participant       VARCHAR,
    name              VARCHAR,
    attrs             JSON
);

CREATE TABLE IF NOT EXISTS models (
    model_key   VARCHAR NOT NULL,         -- key
    name        VARCHAR NOT NULL,
    source      VARCHAR NOT NULL,
    revision    VARCHAR,
    kind        VARCHAR NOT NULL,
    dtype       VARCHAR NOT NULL,
    quant       VARCHAR NOT NULL,
    tokenizer   VARCHAR,
    bos_policy  VARCHAR NOT NULL,
    registered_at TIMESTAMP NOT NULL
);

CREATE TABLE IF NOT EXISTS runs (
    run_id            VARCHAR NOT NULL,   -- key
    command           VARCHAR NOT NULL,
    params            JSON,
    generation_config JSON,
    versions          JSON,
    device            VARCHAR,
    model_key         VARCHAR,
    started_at        TIMESTAMP NOT NULL,
    finished_at       TIMESTAMP,
    status            VARCHAR NOT NULL,
    rows_added        BIGINT
);

-- One row per scored text (one option of one stimulus under one model and protocol).
CREATE TABLE IF NOT EXISTS sequence_scores (
    model_key          VARCHAR NOT NULL,  -- key
    request_id         VARCHAR NOT NULL,  -- key
    stimulus_id        VARCHAR NOT NULL,
    protocol           VARCHAR NOT NULL,
    option             VARCHAR,
    scheme             VARCHAR NOT NULL,  -- causal | original | within_word_l2r
    text               VARCHAR NOT NULL,
    n_tokens           INTEGER NOT NULL,
    sum_logprob        DOUBLE NOT NULL,
    target_char_start  INTEGER,
    target_char_end    INTEGER,
    target_token_start INTEGER,
    target_token_end   INTEGER,
    target_logprob     DOUBLE,
    run_id             VARCHAR
);

-- Per-token evidence of sequence_scores, one row per scored token; written in the same transaction as its parent.
CREATE TABLE IF NOT EXISTS token_scores (
    model_key  VARCHAR NOT NULL,          -- key
    request_id VARCHAR NOT NULL,          -- key
    position   INTEGER NOT NULL,          -- key: index among the scored tokens, from 0
    token_id   INTEGER NOT NULL,
    logprob    DOUBLE NOT NULL,
    char_start INTEGER,
    char_end   INTEGER
);
