-- biaslab warehouse, schema version 6: the engine behind each model record (docs/design.md section 10). NULL backend =
-- a record written before backends existed: the in-process Hugging Face engine ("hf").
ALTER TABLE models ADD COLUMN IF NOT EXISTS backend VARCHAR;          -- hf | vllm | openai
ALTER TABLE models ADD COLUMN IF NOT EXISTS backend_version VARCHAR;  -- transformers / vllm / the server's version
ALTER TABLE models ADD COLUMN IF NOT EXISTS model_args VARCHAR;       -- JSON of --model-arg key=value
ALTER TABLE models ADD COLUMN IF NOT EXISTS engine_args VARCHAR;      -- JSON of the engine settings in the key
