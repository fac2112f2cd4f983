"""Batched prompt encoding with a KV cache, and cheap continuation of many branches from cached prompts.

Two ways to encode prompts:

- `encode_prompts`: each prompt from its first token, left-padded (docs/design.md section 5: left padding for
  generation).
- `SharedPrefixes.encode`: prompts that begin with the same tokens (a chat prompt's system text and instructions:
  82 of WinoPron's ~140 tokens) continue ONE cached computation of that prefix; each row feeds only its own
  suffix, right-padded to a length that depends on the suffix alone (`padded_length`). Attention masks hide the
  padding wherever it sits, and position ids follow the real tokens, so a row computes what it would from scratch
  up to the dtype's rounding (measured in docs/decisions.md, "Shared-prefix cache").
- `SharedPrefixes.encode_batches`: several such batches (of different suffix widths) into one state, each batch's
  forward writing its rows in place into one preallocated cache (`slot_layer`), so the trie levels of all of them
  can share forward passes.

Only the hidden state of the last position goes through the output head.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ...errors import Unsupported


@dataclass
class PromptState:
    """Cached prompts: KV cache, attention mask and next position per row, and the last hidden state per row."""

    cache: object
    mask: torch.Tensor          # [rows, length] 1 for real tokens
    next_pos: torch.Tensor      # [rows] position id of the next token
    last_hidden: torch.Tensor   # [rows, hidden]
    hidden: torch.Tensor | None = None  # [rows, length, hidden] of the encoded prompts (left-padded), if kept

    def select(self, rows: Sequence[int]) -> PromptState:
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


#: free slots per row a slot cache keeps for what follows its prompts, and its growth step when full: one
#: exploration's trie levels (WinoPron: up to ~40 slots per row) fit without growing
GROW_SLOTS = 64


@functools.cache
def _slot_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        """A `DynamicLayer` over preallocated key/value buffers [rows, kv_heads, capacity, head_dim]: `keys` /
        `values` are views of the first `length` slots, and `update` writes the new slots in place (growing the
        buffers only when full) instead of concatenating, so a forward pass no longer copies the whole cache, and
        rows of one buffer can be filled by separate forward passes through views of it
        (`SharedPrefixes.encode_batches`)."""

        def __init__(self, keys_buffer: torch.Tensor, values_buffer: torch.Tensor, length: int) -> None:
            super().__init__()
            self.dtype, self.device = keys_buffer.dtype, keys_buffer.device
            self.is_initialized = True
            self._kb, self._vb, self._n = keys_buffer, values_buffer, length
            self._views()

        def _views(self) -> None:
            self.keys, self.values = self._kb[:, :, : self._n], self._vb[:, :, : self._n]

        def update(self, key_states, value_states, *args, **kwargs):
            n = key_states.shape[-2]
            if self._n + n > self._kb.shape[-2]:  # full: grow by GROW_SLOTS (or what is fed)
                grow = max(n, GROW_SLOTS)
                self._kb = torch.nn.functional.pad(self._kb, (0, 0, 0, grow))
                self._vb = torch.nn.functional.pad(self._vb, (0, 0, 0, grow))
            self._kb[:, :, self._n: self._n + n] = key_states
            self._vb[:, :, self._n: self._n + n] = value_states
            self._n += n
            self._views()
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            self._kb, self._vb = self._kb[indices], self._vb[indices]
            self._views()

        def reset(self) -> None:
            self._n = 0
            self._views()

        def _unsupported(self, *args, **kwargs):
            raise NotImplementedError("slot layers hold explorations only: no crop, repeat, reorder or offload")

        crop = batch_repeat_interleave = reorder_cache = offload = prefetch = _unsupported

    return SlotLayer


def slot_layer(keys_buffer: torch.Tensor, values_buffer: torch.Tensor, length: int):
    """A cache layer writing in place into preallocated buffers whose first `length` slots are filled (see
    `_slot_layer_class`)."""
    return _slot_layer_class()(keys_buffer, values_buffer, length)


def slot_cache(config, layers: Sequence) -> object:
    """A `DynamicCache` whose layers are the given (`slot_layer`) layers."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    cache.layers = list(layers)
    return cache


def plain_layers(config) -> bool:
    """Whether every layer of the model's cache is a plain (full-attention, growing) `DynamicLayer`: the layers
    `slot_layer` replaces (sliding-window layers keep their own cache)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=config).layers)


def concat_states(states: Sequence[PromptState], config) -> PromptState:
    """One state holding the rows of `states` in order: caches right-padded with masked zero slots to the longest
    (a padded slot is never attended: its mask is 0), next positions and last hidden states concatenated."""
    if len(states) == 1:
        return states[0]
    if not plain_layers(config):
        raise Unsupported("concat_states combines states only over plain cache layers (this model has "
                          "sliding-window layers)")
    from transformers import DynamicCache

    length = max(s.mask.shape[1] for s in states)
    cache = DynamicCache(config=config)
    for index in range(len(states[0].cache.layers)):
        pads = [length - s.cache.layers[index].keys.shape[-2] for s in states]
        cache.update(torch.cat([torch.nn.functional.pad(s.cache.layers[index].keys, (0, 0, 0, p))
                                for s, p in zip(states, pads)]),
                     torch.cat([torch.nn.functional.pad(s.cache.layers[index].values, (0, 0, 0, p))
                                for s, p in zip(states, pads)]), index)
    mask = torch.cat([torch.nn.functional.pad(s.mask, (0, length - s.mask.shape[1])) for s in states])
    return PromptState(cache, mask, torch.cat([s.next_pos for s in states]), torch.cat([s.last_hidden for s in states]))


def padded_length(n: int, bucket: int) -> int:
    """`n` rounded up to a multiple of `bucket`: the width a suffix of n tokens is padded to.

    Depends on the suffix alone (never on the batch it runs in), so a prompt's suffix is encoded with the same shapes
    in any batch, chunk, resume point or shard (in exact mode its trie levels then run with the other prompts of its
    exploration, whose cache is as wide as the longest of them: rounding only).
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
    def encode_batches(self, batches: Sequence[Sequence[Sequence[int]]], reserve: int = GROW_SLOTS) -> PromptState:
        """Several batches of prompts (each of one `group_key`, encoded in a forward pass of its own with the
        shapes `encode` gives it; the cache it reads is a view of the shared buffer) into ONE state whose rows are
        the batches' rows in order: one preallocated cache (`slot_layer`, `reserve` free slots per row for what
        follows), the shorter batches' rows padded with masked, zeroed slots. Each batch's forward writes its rows in
        place: no cache is copied. Falls back to `encode` per batch and a concatenation where the shared prefix is
        empty; refuses several batches where the model's cache has other layer types than plain growing ones (a
        sliding-window layer keeps only its window)."""
        cuts = []
        for prompts in batches:
            keys = {self.group_key(p) for p in prompts}
            if len(keys) != 1:
                raise ValueError(f"each batch of encode_batches takes prompts of one group, got {sorted(keys)}")
            cuts.append(keys.pop())
        if not plain_layers(self.model.config):
            if len(batches) > 1:
                raise Unsupported("encode_batches combines batches only over plain cache layers (this model has "
                                  "sliding-window layers): encode one batch at a time")
            return self.encode(batches[0])
        if any(cut == 0 for cut, _ in cuts):
            return concat_states([self.encode(prompts) for prompts in batches], self.model.config)
        rows = sum(len(prompts) for prompts in batches)
        length = max(cut + width for cut, width in cuts)
        prefix_layers = {cut: self.prefix_state(self.reference[:cut]).cache.layers for cut, _ in cuts}
        first = next(iter(prefix_layers.values()))
        # slots past `length` are written before any view reaches them; the gaps before it are zeroed per batch
        buffers = [(torch.empty((rows, layer.keys.shape[1], length + reserve, layer.keys.shape[-1]),
                                dtype=layer.keys.dtype, device=layer.keys.device),
                    torch.empty((rows, layer.values.shape[1], length + reserve, layer.values.shape[-1]),
                                dtype=layer.values.dtype, device=layer.values.device)) for layer in first]
        device = buffers[0][0].device
        mask = torch.zeros((rows, length), dtype=torch.long, device=device)
        next_pos, last_hidden, start = [], [], 0
        for prompts, (cut, width) in zip(batches, cuts):
            n = len(prompts)
            layers = []
            for (kb, vb), prefix in zip(buffers, prefix_layers[cut]):
                kb[start:start + n, :, :cut] = prefix.keys
                vb[start:start + n, :, :cut] = prefix.values
                layers.append(slot_layer(kb[start:start + n], vb[start:start + n], cut))
            state = PromptState(slot_cache(self.model.config, layers),
                                torch.ones((n, cut), dtype=torch.long, device=device),
                                torch.full((n,), cut, dtype=torch.long, device=device), None)
            state, _ = self._suffixes(state, prompts, cut, width)
            for kb, vb in buffers:  # masked slots, never attended, but never garbage (0 * NaN is NaN)
                kb[start:start + n, :, cut + width: length] = 0
                vb[start:start + n, :, cut + width: length] = 0
            mask[start:start + n, : cut + width] = state.mask
            next_pos.append(state.next_pos)
            last_hidden.append(state.last_hidden)
            start += n
        layers = [slot_layer(kb, vb, length) for kb, vb in buffers]
        return PromptState(slot_cache(self.model.config, layers), mask, torch.cat(next_pos), torch.cat(last_hidden))

    def _suffixes(self, state: PromptState, prompts: Sequence[Sequence[int]], cut: int,
                  width: int) -> tuple[PromptState, torch.Tensor]:
        """Feed each prompt's suffix (after `cut`), right-padded to `width`, after `state`; the returned state's
        `last_hidden` is each row's last real token."""
        rows = len(prompts)
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, : len(p) - cut] = torch.as_tensor(list(p[cut:]))
            mask[r, : len(p) - cut] = 1
        state, hidden = extend(self.model, state, ids, mask)
        last = torch.as_tensor([len(p) - cut - 1 for p in prompts], device=hidden.device)
        state.last_hidden = hidden[torch.arange(rows, device=hidden.device), last]
        return state, hidden

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
        return self._suffixes(state, prompts, cut, width)[0]
