"""Batched prompt encoding with a KV cache, and cheap continuation of many branches from cached prompts.

Prompts are left-padded (DESIGN.md section 5: left padding for generation); position ids follow the real tokens, so
every row computes exactly what it would alone. Only the hidden state of the last position goes through the output
head.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PromptState:
    """Cached prompts: KV cache, attention mask and next position per row, and the last hidden state per row."""

    cache: object
    mask: torch.Tensor          # [rows, length] 1 for real tokens
    next_pos: torch.Tensor      # [rows] position id of the next token
    last_hidden: torch.Tensor   # [rows, hidden]
    hidden: torch.Tensor | None = None  # [rows, length, hidden] of the encoded prompts (left-padded), if kept

    def select(self, rows: Sequence[int]) -> "PromptState":
        """A copy holding only `rows` (repeats allowed), e.g. one row per trie node or per sample."""
        index = torch.as_tensor(list(rows), dtype=torch.long, device=self.mask.device)
        cache = copy.deepcopy(self.cache)
        cache.batch_select_indices(index)
        return PromptState(cache, self.mask[index], self.next_pos[index], self.last_hidden[index])  # hidden dropped


@torch.inference_mode()
def encode_prompts(model, prompts: Sequence[Sequence[int]], pad_id: int, keep_hidden: bool = False) -> PromptState:
    """Run the base model over left-padded prompts with use_cache=True (`keep_hidden`: keep every position's state)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), longest), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, longest - len(p):] = torch.as_tensor(list(p))
        mask[r, longest - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    out = model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                           use_cache=True)
    return PromptState(out.past_key_values, mask, mask.sum(-1), out.last_hidden_state[:, -1],
                       out.last_hidden_state if keep_hidden else None)


@torch.inference_mode()
def extend(model, state: PromptState, new_ids: torch.Tensor,
           new_mask: torch.Tensor | None = None) -> tuple[PromptState, torch.Tensor]:
    """Feed `new_ids` [rows, n] after the cached tokens (right padding marked by `new_mask` = 0); returns the grown
    state and the new hidden states."""
    device = state.mask.device
    new_ids = new_ids.to(device)
    n = new_ids.shape[1]
    if new_mask is None:
        new_mask = torch.ones((new_ids.shape[0], n), dtype=state.mask.dtype)
    mask = torch.cat([state.mask, new_mask.to(device=device, dtype=state.mask.dtype)], dim=1)
    positions = state.next_pos[:, None] + torch.arange(n, device=device)[None, :]
    out = model.base_model(input_ids=new_ids, attention_mask=mask, position_ids=positions,
                           past_key_values=state.cache, use_cache=True)
    hidden = out.last_hidden_state
    return PromptState(out.past_key_values, mask, state.next_pos + n, hidden[:, -1]), hidden
