"""Token ids of a model that another process serves (the vllm and openai backends): read from its folder, so the
ids a protocol builds are the ids the engine reads."""

from __future__ import annotations

from typing import Any


class _GenerationConfigOnly:
    """The `generation_config` of a model folder, for `hf.stop_token_ids` (its EOS ids), without the weights."""

    def __init__(self, folder: str) -> None:
        try:
            from transformers import GenerationConfig

            self.generation_config = GenerationConfig.from_pretrained(folder)
        except (OSError, ValueError):
            self.generation_config = None


def served_token_ids(folder: str, tokenizer: Any) -> tuple[frozenset[int], int | None, int | None]:
    """(stop_ids, bos_id, pad_id) of a served model.

    stop_ids: the tokenizer's EOS plus every EOS id of the folder's generation config (`hf.stop_token_ids`);
    bos_id: the BOS of the scoring policy (`loading.bos_token_id`); pad_id: the tokenizer's pad token, else the BOS.
    """
    from .hf.loading import bos_token_id
    from .hf.backend import stop_token_ids

    stop_ids = frozenset(stop_token_ids(_GenerationConfigOnly(folder), tokenizer))
    bos_id = bos_token_id(tokenizer)[0]
    return stop_ids, bos_id, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else bos_id
