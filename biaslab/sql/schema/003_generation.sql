-- biaslab warehouse, schema version 3: open-generation requests (misgendering `gen` protocol,
-- docs/design.md section 7).

-- One row per generation prompt and model: the parent of its rows in `samples`. A prompt is a stimulus cut
-- before its slot (context 'pre'), the stimulus with the gold pronoun filled in ('post'), or a TANGO prompt as is
-- ('prompt'). `pronoun_vocabulary` is the JSON {family: {case: [forms]}} the first-pronoun detector uses for this
-- dataset, stored so metrics need neither the data files nor the code that built it.
CREATE TABLE IF NOT EXISTS gen_requests (
    model_key          VARCHAR NOT NULL,   -- key
    request_id         VARCHAR NOT NULL,   -- key
    stimulus_id        VARCHAR NOT NULL,
    dataset            VARCHAR NOT NULL,
    context            VARCHAR NOT NULL,   -- pre | post | prompt
    prompt_version     VARCHAR NOT NULL,
    prompt_text        VARCHAR NOT NULL,
    declared           VARCHAR NOT NULL,   -- the pronoun family the prompt declares
    pronoun_vocabulary JSON NOT NULL,
    max_new_tokens     INTEGER NOT NULL,
    min_new_tokens     INTEGER NOT NULL,   -- stop tokens are suppressed until this many tokens are generated
    run_id             VARCHAR
);

-- Human labels of generated samples (`biaslab annotate import`): one row per sample and annotator.
-- sample_id is the `gen_samples` view's id of a stored sample.
CREATE TABLE IF NOT EXISTS annotations (
    sample_id            VARCHAR NOT NULL,   -- key
    annotator            VARCHAR NOT NULL,   -- key
    label                VARCHAR NOT NULL,   -- correct | misgendering | no_pronoun
    extraneous_gendered  BOOLEAN NOT NULL,   -- gendered language about the referent beyond pronouns
    source_file          VARCHAR,
    imported_at          TIMESTAMP NOT NULL
);
