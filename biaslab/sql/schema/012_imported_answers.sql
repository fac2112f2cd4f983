-- biaslab warehouse, schema version 12: answers and scores another tool computed (issue 70, item 2): an
-- lm-evaluation-harness `--log_samples` file, an inspect_ai eval log, BBQ's own results files, a plain CSV, imported by
-- `biaslab import`. Evidence of its own kind: its model record names the tool, version, task and model (backend = the
-- tool), never biaslab's own collections. One row per answer option (BBQ) or scored sentence (CrowS-Pairs).
CREATE TABLE IF NOT EXISTS imported_answers (
    model_key    VARCHAR NOT NULL,    -- key: hash of (tool, version, task, model)
    request_id   VARCHAR NOT NULL,    -- key: hash of (stimulus_id, option)
    stimulus_id  VARCHAR NOT NULL,
    tool         VARCHAR NOT NULL,    -- lm-eval | inspect | bbq-results | csv
    task         VARCHAR NOT NULL,    -- as the tool names it (bbq, crows_pairs_english, ...)
    option       VARCHAR,             -- the answer option; NULL: the stimulus's own sentence (CrowS-Pairs)
    loglik       DOUBLE,              -- the tool's log-likelihood of the option or sentence, where it gives one
    chosen       BOOLEAN,             -- whether the tool's answer is this option; NULL: no answer it could read
    answer_text  VARCHAR,             -- the tool's answer as it wrote it (free text or a letter), where it has one
    source_line  INTEGER NOT NULL,    -- the file's line (JSONL, CSV) or sample number (inspect) it came from
    run_id       VARCHAR
);
