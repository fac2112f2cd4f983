-- biaslab warehouse, schema version 7: users' own datasets (`biaslab data load --file / --spec`,
-- docs/design.md section 11).
-- One row per loaded version of a user dataset; the latest row (loaded_at) is the current version. `version` hashes
-- the declaration and the ordered stimulus ids, so the same file loaded twice writes nothing; `declaration` holds the
-- protocols, the forced-choice prompt and the pronoun families (JSON, `biaslab.schema.user_dataset`).
CREATE TABLE IF NOT EXISTS user_datasets (
    dataset       VARCHAR NOT NULL,    -- key
    version       VARCHAR NOT NULL,    -- key
    loaded_at     TIMESTAMP NOT NULL,  -- key
    source        VARCHAR NOT NULL,    -- file | spec
    path          VARCHAR,             -- the file or spec as given
    file_sha256   VARCHAR NOT NULL,    -- sha256 of its bytes
    declaration   JSON NOT NULL,
    stimulus_ids  VARCHAR[] NOT NULL,  -- the stimuli of this version, in file order
    run_id        VARCHAR
);
