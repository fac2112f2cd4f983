-- biaslab warehouse, schema version 9: the batches a chat API was sent (`--batch`, docs/design.md section 10).
-- One row per submitted batch, written as soon as the provider has it, so that a rerun fetches its results instead
-- of submitting again (and paying twice). `custom_ids` name the requests it holds (a hash of each request's body,
-- seed included); a request is answered once its reply is stored in the evidence tables.
CREATE TABLE IF NOT EXISTS api_batches (
    model_key    VARCHAR NOT NULL,    -- key
    batch_id     VARCHAR NOT NULL,    -- key: the provider's id
    provider     VARCHAR NOT NULL,    -- the engine: openai-chat | anthropic
    custom_ids   VARCHAR[] NOT NULL,
    submitted_at TIMESTAMP NOT NULL,
    run_id       VARCHAR
);
