-- biaslab warehouse, schema version 11: the quantized file a model's weights were de-quantized from (issue 56, item
-- 12), e.g. "gguf Q4_K_M" for a .gguf file or a GGUF alias. Not part of the model key: the key's revision already
-- hashes that file. NULL: a record written before, or weights read as they are.
ALTER TABLE models ADD COLUMN IF NOT EXISTS converted_from VARCHAR;
