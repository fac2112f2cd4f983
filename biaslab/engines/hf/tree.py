"""Trie levels over a transformers model's key/value cache (the Hugging Face engine's `Expander`, docs/design.md
section 6): each level of the answer tries of a batch of prompts is one forward pass, as tree attention over the
prompts' own cache (`TreeLevels`, where the attention takes a 4-D mask: sdpa, eager) or by cache copies
(`CopyLevels`, every attention implementation; the reference for the tree). The output head gives each node's
top-K logits, every token tied with the K-th kept (`top_k_with_ties`), and the full-vocabulary logsumexp
(`head_top_k`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..base import TopK, WindowExceeded
from .kvcache import PromptState, extend

def top_k_with_ties(logits: torch.Tensor, k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per row, the `k` largest logits (descending) and their token ids, extended by every further token tied with
    the k-th: a row keeps all tokens with z >= z_(k).

    The sampler's top-k keeps ties (z >= the k-th largest, as Hugging Face's TopKLogitsWarper). A node whose k-th
    logit is shared by tokens past position k would, cut at k, leave those tokens out of both the numerator and
    the normalizer of p(c) = exp(z_c/T) / sum_{j : z_j >= z_(k')} exp(z_j/T) for every k' whose threshold equals
    z_(k) (bf16 logits tie often). Keeping them makes every re-derivation with top_k <= k exact; a row is longer
    than `k` exactly when such a tie exists.

    Parameters
    ----------
    logits : torch.Tensor [rows, vocabulary], float
    k : int, the K stored per node (`k_store`)

    Returns
    -------
    (values, ids): lists of float32 / int64 arrays, one per row, each of length >= min(k, vocabulary).
    """
    vocabulary = logits.shape[-1]
    k = min(k, vocabulary)
    # a row has a tie past k exactly when its (k+1)-th largest logit equals its k-th: one topk of k+1 finds those
    # rows without comparing the whole vocabulary
    top_vals, top_ids = logits.topk(min(k + 1, vocabulary), dim=-1)
    extended = torch.nonzero(top_vals[:, k] == top_vals[:, k - 1]).flatten().tolist() if k < vocabulary else []
    values = list(top_vals[:, :k].cpu().numpy().astype(np.float32))
    ids = list(top_ids[:, :k].cpu().numpy())
    for row in extended:
        tied = int((logits[row] >= top_vals[row, k - 1]).sum())
        row_vals, row_ids = logits[row].topk(tied)
        values[row] = row_vals.cpu().numpy().astype(np.float32)
        ids[row] = row_ids.cpu().numpy()
    return values, ids


class CopyLevels:
    """Trie levels by cache copies: level d selects one cached prompt row per live node and feeds the node's whole
    path (d tokens). Works with every attention implementation; the reference for `TreeLevels`."""

    def __init__(self, model, state: PromptState) -> None:
        self.model, self.state = model, state

    def root_refs(self) -> list:
        return [()] * self.state.mask.shape[0]

    def step(self, children: list[tuple[int, tuple[int, ...], tuple]]) -> tuple[torch.Tensor, list]:
        branch = self.state.select([row for row, _, _ in children])
        paths = torch.tensor([list(path) for _, path, _ in children], dtype=torch.long)
        _, hidden = extend(self.model, branch, paths)
        return hidden[:, -1], [()] * len(children)


@dataclass
class _Part:
    """Some prompts' rows of the tree cache: cache, prompt mask, next position, prompt index per row, slots used."""

    cache: object
    prompt_mask: torch.Tensor
    next_pos: torch.Tensor
    rows: list[int]
    length: int

    def take(self, prompts: list[int], copy: bool, config=None) -> _Part:
        """The part restricted to `prompts` (a subset of its rows, in this order): in place, or as a new cache
        (built with the model's `config`, so every layer gets its own cache type)."""
        if not copy and prompts == self.rows:
            return self  # every row stays, in its place: nothing to select
        where = {p: i for i, p in enumerate(self.rows)}
        index = torch.as_tensor([where[p] for p in prompts], device=self.prompt_mask.device)
        if copy:
            from transformers import DynamicCache

            # a model with sliding-window layers: plain growing layers, which keep every slot (the tree's sliding
            # layers see the window through their mask, `TreeLevels`), never the config's cutting ones
            cache = DynamicCache() if sliding_window_of(config) is not None else DynamicCache(config=config)
            for layer_index, layer in enumerate(self.cache.layers):
                cache.update(layer.keys[index], layer.values[index], layer_index)
        else:
            cache = self.cache
            cache.batch_select_indices(index)
        return _Part(cache, self.prompt_mask[index], self.next_pos[index], prompts, self.length)


#: the fixed cost of one more forward pass (reading every weight once), in token slots, as measured on a CPU
FORWARD_COST_SLOTS = 48


def _split_point(counts: list[int]) -> int:
    """How many of the widest rows (counts sorted descending) to move to a part of their own so that the padded
    slots of the two forwards, plus one more forward and two slots per moved row for its cache copy, are fewest
    (0: do not split)."""
    best, best_cost = 0, len(counts) * counts[0]
    for k in range(1, len(counts)):
        cost = k * counts[0] + (len(counts) - k) * counts[k] + 2 * k + FORWARD_COST_SLOTS
        if cost < best_cost:
            best, best_cost = k, cost
    return best


class TreeLevels:
    """Trie levels as tree attention over the prompts' own cache: level d feeds each live node's one new token in
    its prompt's row, with a 4-D attention mask that lets it see the prompt's real tokens, its ancestors (fed at
    earlier levels) and itself, at position id = the prompt's next position + d. The prompt cache is never copied
    per node and each node's token is computed once: the forward passes cover the distinct tokens of the trie.

    A node's reference is the tuple of cache slots holding its path's tokens (slots keep their place when rows
    move). Prompts with no live node left are dropped from the cache; rows are padded to their forward's widest
    row (padded slots see only their prompt and are never seen), and where a few prompts have many more live
    nodes than the rest, their rows move to a cache of their own (`_split_point`) so the others are not padded to
    them.
    """

    def __init__(self, model, state: PromptState) -> None:
        self.model = model
        self.window = sliding_window(model)
        self.layer_types = windowed_layer_types(model)
        if self.window is not None and self.layer_types is not None and state.mask.shape[1] < self.window:
            growing_layers(state.cache)  # the window is applied by the sliding layers' mask (`_masks`)
        else:
            self.layer_types = None
        self.parts = [_Part(state.cache, state.mask.bool(), state.next_pos, list(range(state.mask.shape[0])),
                            state.mask.shape[1])]
        self.additive = model.config._attn_implementation == "eager"

    def root_refs(self) -> list:
        return [()] * len(self.parts[0].rows)

    def step(self, children: list[tuple[int, tuple[int, ...], tuple]]) -> tuple[torch.Tensor, list]:
        count: dict[int, int] = {}
        for prompt, _, _ in children:
            count[prompt] = count.get(prompt, 0) + 1
        parts = []
        for part in self.parts:
            live = [p for p in part.rows if p in count]  # rows keep their order: no cache reordering
            if not live:
                continue
            ranked = sorted(live, key=lambda p: (-count[p], p))
            cut = _split_point([count[p] for p in ranked])
            if cut:
                parts.append(part.take(ranked[:cut], copy=True, config=self.model.config))
                moved = set(ranked[:cut])
                live = [p for p in live if p not in moved]
            parts.append(part.take(live, copy=False))
        self.parts = parts
        out_hidden: list = [None] * len(children)
        refs: list = [None] * len(children)
        by_prompt: dict[int, list[int]] = {}
        for i, (prompt, _, _) in enumerate(children):
            by_prompt.setdefault(prompt, []).append(i)
        depth = len(children[0][1]) - 1
        for part in self.parts:
            self._forward(part, [(p, by_prompt[p]) for p in part.rows], children, depth, out_hidden, refs)
        return torch.stack(out_hidden), refs

    def _forward(self, part: _Part, members, children, depth: int, out_hidden: list, refs: list) -> None:
        rows, device = len(part.rows), part.prompt_mask.device
        width = max(len(indices) for _, indices in members)
        total = part.length + width
        ids = torch.zeros((rows, width), dtype=torch.long)
        allowed = torch.zeros((rows, width, total), dtype=torch.bool)
        allowed[:, :, : part.prompt_mask.shape[1]] = part.prompt_mask[:, None, :].cpu()
        for row, (_, indices) in enumerate(members):
            for q in range(width):
                if q < len(indices):
                    _, path, ref = children[indices[q]]
                    ids[row, q] = path[-1]
                    allowed[row, q, list(ref)] = True
                    refs[indices[q]] = (*ref, part.length + q)
                allowed[row, q, part.length + q] = True  # itself (padded slots too: no empty softmax rows)
        if self.window is not None and self.layer_types is None and total > self.window:
            raise WindowExceeded(f"the answer tries need {total} cache slots, more than the model's sliding window "
                                 f"({self.window}) that tree attention can span")
        positions = (part.next_pos[:, None] + depth).expand(rows, width)
        out = self.model.base_model(input_ids=ids.to(device), attention_mask=self._masks(allowed, part, depth),
                                    position_ids=positions, past_key_values=part.cache, use_cache=True)
        part.cache, part.length = out.past_key_values, total
        for row, (_, indices) in enumerate(members):
            for q, i in enumerate(indices):
                out_hidden[i] = out.last_hidden_state[row, q]

    def _masks(self, allowed: torch.Tensor, part: _Part, depth: int):
        """The 4-D attention mask of a level (`allowed` [rows, width, slots]); for a model with sliding-window
        layers, one per layer type, the sliding layers' also hiding the prompt slots a node at `depth` sees no more.

        Sliding window W: the model's own cache (`CopyLevels`, and decoding) puts a node's token at cache index
        L + depth after the prompts' L slots, and its sliding layers attend to the slots j > L + depth - W. The
        tree cache keeps every slot (plain growing layers), so the same rule is a mask: prompt slots
        j <= L + depth - W are hidden from the sliding layers; the node's ancestors (depth < W) stay in sight."""
        device = part.prompt_mask.device
        masks = {"full_attention": allowed}
        if self.layer_types is not None:
            if depth >= self.window:
                raise WindowExceeded(f"an answer trie {depth + 1} tokens deep passes the model's sliding window "
                                     f"({self.window})")
            sliding = allowed.clone()
            cut = part.prompt_mask.shape[1] + depth - self.window + 1  # prompt slots [0, cut) out of the window
            if cut > 0:
                sliding[:, :, :cut] = False
            masks["sliding_attention"] = sliding
        dtype = next(self.model.parameters()).dtype
        for name, mask in masks.items():
            mask = mask[:, None].to(device)
            if self.additive:
                mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, torch.finfo(dtype).min)
            masks[name] = mask
        if self.layer_types is None:
            return masks["full_attention"]
        return {name: masks[name] for name in self.layer_types}


def growing_layers(cache) -> None:
    """Replace the sliding-window layers of a `DynamicCache` (each keeps only its last W - 1 slots) by plain growing
    layers holding the same keys and values, in place."""
    from transformers.cache_utils import DynamicLayer

    for index, layer in enumerate(cache.layers):
        if getattr(layer, "is_sliding", False):
            plain = DynamicLayer()
            plain.lazy_initialization(layer.keys, layer.values)
            plain.keys, plain.values = layer.keys, layer.values
            cache.layers[index] = plain


def windowed_layer_types(model) -> tuple[str, ...] | None:
    """The distinct layer types of a model with sliding-window layers whose forward takes one attention mask per
    layer type (a dict keyed by "full_attention" / "sliding_attention": Gemma 3's kind), else None."""
    types = tuple(dict.fromkeys(getattr(model.config, "layer_types", None) or ()))
    if not types or not set(types) <= {"full_attention", "sliding_attention"} or "sliding_attention" not in types:
        return None
    return types


def tree_attention_supported(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) in ("sdpa", "eager")


def tree_fits_window(model, prompt_slots: int) -> bool:
    """Whether prompts of `prompt_slots` cache slots fit inside the model's sliding window (always, for models
    without one). A sliding-window layer keeps only its last `window` keys, so the prompt cache of longer prompts is
    already cut and tree attention cannot span it: those prompts are explored by cache copies (`CopyLevels`, which
    decode as the model's own cache does). Prompts that fit run as tree attention however wide their tries grow
    (Gemma 3: window 512; a DecodingTrust prompt of 250 tokens and its trie at temperature 1 pass it): the tree
    cache keeps every slot and the sliding layers' mask applies the window (`TreeLevels._masks`)."""
    window = sliding_window(model)
    return window is None or prompt_slots < window


def sliding_window(model) -> int | None:
    """The model's sliding window where some of its layers attend through one, else None."""
    return sliding_window_of(model.config)


def sliding_window_of(config) -> int | None:
    """`sliding_window` of a model's config (None where no layer attends through one)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None) or ()
    return None if not window or (types and "sliding_attention" not in types) else int(window)




#: rows of hidden states that go through the output head at once in `head_top_k`: a block of logits small enough to
#: stay in the CPU's cache for the log-sum-exp and top-k that read it (one [642, 49152] fp32 block took 2.5x longer)
HEAD_ROWS = 128


def head_top_k(model: Any, hidden: Any, k: int) -> TopK:
    """Top-`k` float32 logits of the output head at `hidden` [n, d] (the model's logit scaling and soft-capping
    applied), with the float64 full-vocabulary logsumexp; `HEAD_ROWS` rows at a time."""
    from .scoring import _base_and_head

    _, head = _base_and_head(model)
    ids: list = []
    values: list = []
    lse = []
    for start in range(0, hidden.shape[0], HEAD_ROWS):
        logits = head.to_float(head.raw(hidden[start:start + HEAD_ROWS]))
        lse.append(torch.logsumexp(logits, dim=-1).double().cpu().numpy())
        block_values, block_ids = top_k_with_ties(logits, k)  # ties with the k-th kept past k, as the sampler
        values += block_values
        ids += block_ids
    return TopK(ids, values, np.concatenate(lse) if lse else np.zeros(0))


class HFExpander:
    """`Expander` over cached prompts: each level feeds the live nodes' new tokens as tree attention over the
    prompts' own cache (`TreeLevels`, where the attention takes a 4-D mask) or by cache copies
    (`CopyLevels`). A node's cache slots are remembered by (row, path).

    `state` (a `kvcache.PromptState`) is consumed (grown in place); `context()` wraps every forward pass (the
    backend's `native_gqa`)."""

    def __init__(self, model: Any, state: Any, k: int, tree: bool | None = None, context=None) -> None:
        from contextlib import nullcontext

        self.model, self.state, self.k, self.context = model, state, k, context or nullcontext
        if tree is None:
            tree = tree_attention_supported(model) and tree_fits_window(model, state.mask.shape[1])
        self.levels = TreeLevels(model, state) if tree else CopyLevels(model, state)
        self.refs = {(row, ()): ref for row, ref in enumerate(self.levels.root_refs())}

    def root(self) -> TopK:
        with torch.inference_mode():
            return head_top_k(self.model, self.state.last_hidden, self.k)

    def step(self, nodes: Sequence[tuple[int, tuple[int, ...]]]) -> TopK:
        with torch.inference_mode(), self.context():
            children = [(row, tuple(path), self.refs[(row, tuple(path[:-1]))]) for row, path in nodes]
            hidden, refs = self.levels.step(children)
            self.refs = {(row, path): ref for (row, path, _), ref in zip(children, refs)}
            return head_top_k(self.model, hidden, self.k)
