"""Batched prompt encoding with a KV cache, and cheap continuation of many branches from cached prompts.

Two ways to encode prompts:

- `encode_prompts`: each prompt from its first token, left-padded (DESIGN.md section 5: left padding for
  generation).
- `SharedPrefixes.encode`: prompts that begin with the same tokens (a chat prompt's system text and instructions:
  82 of WinoPron's ~140 tokens) continue ONE cached computation of that prefix; each row feeds only its own
  suffix, right-padded to a length that depends on the suffix alone (`padded_length`). Attention masks hide the
  padding wherever it sits, and position ids follow the real tokens, so a row computes what it would from scratch
  up to the dtype's rounding (measured in docs/decisions.md, "Shared-prefix cache").

Only the hidden state of the last position goes through the output head.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
    # right padding inside new_ids does not advance a row's position: its next real token follows its last real one
    return PromptState(out.past_key_values, mask, state.next_pos + new_mask.to(device).sum(-1), hidden[:, -1]), hidden


@contextmanager
def native_gqa(device: torch.device) -> Iterator[None]:
    """On a CPU, let `scaled_dot_product_attention` handle grouped-query attention itself (`enable_gqa`) while
    inside this block, instead of transformers copying every key/value head of the whole cache before each masked
    attention call (SmolLM2: 3 key/value heads for 9 query heads). Uses transformers' own switch,
    TRANSFORMERS_SDPA_FORCE_GQA, restored on exit. On CUDA a masked GQA call would leave the fast kernels, so the
    switch is not touched there.
    """
    if device.type != "cpu":
        yield
        return
    name = "TRANSFORMERS_SDPA_FORCE_GQA"
    before = os.environ.get(name)
    os.environ[name] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def padded_length(n: int, bucket: int) -> int:
    """`n` rounded up to a multiple of `bucket`: the width a suffix of n tokens is padded to.

    Depends on the suffix alone (never on the batch it runs in), so the shapes a prompt's computation sees are the
    same in any batch, chunk, resume point or shard.
    """
    return bucket * -(-n // bucket)


class SharedPrefixes:
    """KV caches of shared prompt prefixes, each computed once (per model and collection) and continued by many
    prompts.

    Parameters
    ----------
    model : a causal LM (`base_model` gives hidden states).
    pad_id : token id fed at padded positions (masked out).
    reference : the token ids every prompt is expected to begin with (e.g. `prompting.shared_prefix_ids`). A
        prompt's prefix is its longest common prefix with `reference`, so it depends on the prompt and the template
        alone, never on which other prompts are collected; at least one token is left as the prompt's own suffix.
    bucket : suffixes are right-padded to a multiple of `bucket` tokens (`padded_length`).
    """

    def __init__(self, model, pad_id: int, reference: Sequence[int], bucket: int = 8) -> None:
        self.model, self.pad_id, self.reference, self.bucket = model, pad_id, tuple(reference), bucket
        self._states: dict[tuple[int, ...], PromptState] = {}

    def split(self, prompt: Sequence[int]) -> int:
        """Length of the prompt's shared prefix: common with `reference`, leaving at least one token."""
        n, limit = 0, min(len(prompt) - 1, len(self.reference))
        while n < limit and prompt[n] == self.reference[n]:
            n += 1
        return n

    def group_key(self, prompt: Sequence[int]) -> tuple[int, int]:
        """Prompts with equal keys can share a forward pass: (prefix length, padded suffix length)."""
        cut = self.split(prompt)
        return cut, padded_length(len(prompt) - cut, self.bucket)

    def prefix_state(self, prefix: tuple[int, ...]) -> PromptState:
        if prefix not in self._states:
            self._states[prefix] = encode_prompts(self.model, [prefix], self.pad_id)
        return self._states[prefix]

    @torch.inference_mode()
    def encode(self, prompts: Sequence[Sequence[int]]) -> PromptState:
        """Prompts with one `group_key` (hence one prefix, `reference[:cut]`): the prefix's cache repeated per row,
        then one forward over the right-padded suffixes. Returns the state after each prompt's last real token."""
        keys = {self.group_key(p) for p in prompts}
        if len(keys) != 1:
            raise ValueError(f"SharedPrefixes.encode takes prompts of one group, got {sorted(keys)}")
        cut, width = keys.pop()  # equal cuts are equal prefixes: reference[:cut]
        rows = len(prompts)
        if cut:
            state = self.prefix_state(self.reference[:cut]).select([0] * rows)
        else:
            from transformers import DynamicCache

            device = next(self.model.parameters()).device
            state = PromptState(DynamicCache(config=self.model.config), torch.zeros((rows, 0), dtype=torch.long,
                                device=device), torch.zeros(rows, dtype=torch.long, device=device), None)
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, : len(p) - cut] = torch.as_tensor(list(p[cut:]))
            mask[r, : len(p) - cut] = 1
        state, hidden = extend(self.model, state, ids, mask)
        last = torch.as_tensor([len(p) - cut - 1 for p in prompts], device=hidden.device)
        state.last_hidden = hidden[torch.arange(rows, device=hidden.device), last]
        return state
