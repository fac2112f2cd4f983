-- biaslab warehouse, schema version 10: edits of a user stimulus's attributes (issue 44, docs/design.md section 11).
-- A user stimulus is keyed by what the model sees, not by its attributes (`attrs`: a file's extra columns, a spec's
-- filler attributes; `stereotype_rating`), so loading a version whose rows differ from the stored ones only in
-- attributes keeps the stimuli and their evidence, updates their `stimuli` rows, and records each change here: one
-- row per stimulus and version that changed it, with the values before and after. (dataset, version, loaded_at)
-- is the `user_datasets` row of that version.
CREATE TABLE IF NOT EXISTS attribute_edits (
    dataset        VARCHAR NOT NULL,    -- key
    version        VARCHAR NOT NULL,    -- key
    loaded_at      TIMESTAMP NOT NULL,  -- key
    stimulus_id    VARCHAR NOT NULL,    -- key
    attrs_before   JSON,
    attrs_after    JSON,
    rating_before  DOUBLE,
    rating_after   DOUBLE,
    run_id         VARCHAR
);
