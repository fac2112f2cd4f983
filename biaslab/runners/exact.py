"""Exact choice probabilities without sampling (DESIGN.md section 6).

Sampling with temperature T and top-k K picks token c at a step with probability
    p(c) = 1[z_c >= z_(K)] exp(z_c / T) / sum_{j : z_j >= z_(K)} exp(z_j / T),
where z_(K) is the K-th largest logit (ties at the boundary are kept, as in Hugging Face's TopKLogitsWarper). The
probability that sampling followed by the answer parser yields option o is the sum, over every generated token
sequence the parser maps to o, of the product of these step probabilities. Only sequences whose every token is in
the step's top-K can be sampled, so the walk expands, level by level, the top-`k_store` tokens of each node whose
text the parser can still accept (`AnswerParser.status`), with one batched forward pass per level from the cached
prompts. The top-`k_store` logits and the full-vocabulary logsumexp of every node are kept, so probabilities at any
temperature and any top-k <= k_store are re-derived later from stored evidence alone (`probabilities`, and the SQL
macro `choice_probs_at`). The mass the parser rejects is the `invalid` outcome, never renormalized away.

Pruning: a live branch whose probability under the collection's own settings is below `min_mass` (default 1e-9;
e.g. long chains of whitespace tokens) is not expanded but stored as a `__pruned__` edge. Its mass is reported as
the `unresolved` outcome at every setting, so the exact probabilities are exact to within that reported bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .answers import AnswerParser, decode_many
from .kvcache import PromptState, encode_prompts, extend

LIVE = "__live__"
PRUNED = "__pruned__"
INVALID = "invalid"
UNRESOLVED = "unresolved"
DEFAULT_MIN_MASS = 1e-9
#: At most this many live nodes per prompt and level are expanded (the most probable ones); the others are pruned
#: like branches below min_mass. Bounds memory for models that spread mass over many answer-like tokens.
MAX_LIVE_PER_LEVEL = 256


@dataclass
class Trie:
    """Explored trie of one prompt: nodes (top-K evidence) and the edges that stay live or complete an answer."""

    node_parent: list[int | None] = field(default_factory=list)
    node_token: list[int | None] = field(default_factory=list)
    node_depth: list[int] = field(default_factory=list)
    topk_ids: list[np.ndarray] = field(default_factory=list)
    topk_logits: list[np.ndarray] = field(default_factory=list)   # float32, descending
    logsumexp: list[float] = field(default_factory=list)
    edges: list[tuple[int, int, str, int | None]] = field(default_factory=list)  # node, token, outcome, child

    def add_node(self, parent: int | None, token: int | None, depth: int) -> int:
        self.node_parent.append(parent)
        self.node_token.append(token)
        self.node_depth.append(depth)
        return len(self.node_parent) - 1


def step_probabilities(logits: np.ndarray, temperature: float, top_k: int) -> np.ndarray:
    """Sampling probability of each stored (descending) logit under temperature and top-k; 0 outside the top-k."""
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    if top_k < 1 or top_k > len(logits):
        raise ValueError(f"top_k must be in 1..{len(logits)} (the stored K), got {top_k}")
    z = logits.astype(np.float64)
    keep = z >= z[top_k - 1]
    scaled = np.where(keep, (z - z[0]) / temperature, -np.inf)
    weights = np.exp(scaled)
    return weights / weights.sum()


def probabilities(trie: Trie, options: Sequence[str], temperature: float, top_k: int) -> dict[str, float]:
    """Exact probability of each option, of `unresolved` (pruned branches) and of `invalid`, from the stored trie
    (top_p = 1). The outcomes sum to 1."""
    children: dict[int, list[tuple[int, str, int | None]]] = {}
    for node, token, outcome, child in trie.edges:
        children.setdefault(node, []).append((token, outcome, child))
    totals = {o: 0.0 for o in options}
    totals[UNRESOLVED] = 0.0
    stack = [(0, 1.0)]
    while stack:
        node, mass = stack.pop()
        probs = step_probabilities(trie.topk_logits[node], temperature, top_k)
        index = {int(t): i for i, t in enumerate(trie.topk_ids[node])}
        for token, outcome, child in children.get(node, []):
            p = mass * probs[index[token]]
            if p == 0.0:
                continue
            if outcome == LIVE:
                stack.append((child, p))
            elif outcome == PRUNED:
                totals[UNRESOLVED] += p
            else:
                totals[outcome] += p
    totals[INVALID] = max(0.0, 1.0 - math.fsum(totals.values()))
    return totals


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


def _most_probable(candidates: list, min_mass: float, per_prompt: int) -> set[int]:
    """Indices of the live branches to expand: mass >= min_mass and among the `per_prompt` most probable of their
    prompt (ties broken by position, so the choice is deterministic)."""
    by_row: dict[int, list[tuple[float, int]]] = {}
    for index, candidate in enumerate(candidates):
        row, mass = candidate[0], candidate[4]
        if mass >= min_mass:
            by_row.setdefault(row, []).append((-mass, index))
    return {index for items in by_row.values() for _, index in sorted(items)[:per_prompt]}


class _CopyLevels:
    """Trie levels by cache copies: level d selects one cached prompt row per live node and feeds the node's whole
    path (d tokens). Works with every attention implementation; the reference for `_TreeLevels`."""

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

    def take(self, prompts: list[int], copy: bool, config=None) -> "_Part":
        """The part restricted to `prompts` (a subset of its rows, in this order): in place, or as a new cache
        (built with the model's `config`, so every layer gets its own cache type)."""
        if not copy and prompts == self.rows:
            return self  # every row stays, in its place: nothing to select
        where = {p: i for i, p in enumerate(self.rows)}
        index = torch.as_tensor([where[p] for p in prompts], device=self.prompt_mask.device)
        if copy:
            from transformers import DynamicCache

            cache = DynamicCache(config=config)
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


class _TreeLevels:
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
        positions = (part.next_pos[:, None] + depth).expand(rows, width)
        mask = allowed[:, None].to(device)
        if self.additive:
            dtype = next(self.model.parameters()).dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, torch.finfo(dtype).min)
        out = self.model.base_model(input_ids=ids.to(device), attention_mask=mask, position_ids=positions,
                                    past_key_values=part.cache, use_cache=True)
        part.cache, part.length = out.past_key_values, total
        for row, (_, indices) in enumerate(members):
            for q, i in enumerate(indices):
                out_hidden[i] = out.last_hidden_state[row, q]


def _tree_attention_supported(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) in ("sdpa", "eager")


def _decoded(tokenizer, sequences: list[tuple[int, ...]], keep_special: bool,
             known: dict[tuple[tuple[int, ...], bool], str]) -> list[str]:
    """`decode_many` of `sequences`, decoding only those not already in `known` (which it extends)."""
    missing = list(dict.fromkeys(s for s in sequences if (s, keep_special) not in known))
    if missing:
        for sequence, text in zip(missing, decode_many(tokenizer, missing, keep_special=keep_special)):
            known[(sequence, keep_special)] = text
    return [known[(s, keep_special)] for s in sequences]


def walk(expander, tokenizer, parsers: Sequence[AnswerParser], *, max_new_tokens: int, stop_ids,
         temperature: float, top_k: int, min_mass: float = DEFAULT_MIN_MASS,
         on_finished: Callable[[int], None] | None = None) -> list[Trie]:
    """Build the trie of every prompt of `expander` (any `backends.base.Expander`): level 0 from `expander.root()`,
    level d from `expander.step` over the d generated tokens of every live node whose probability at
    (temperature, top_k) is at least `min_mass` (at most `MAX_LIVE_PER_LEVEL` per prompt), one call per level.

    Parameters
    ----------
    expander : top-K evidence after each prompt (`root`) and after prompt + path (`step`), K = the stored k_store.
    tokenizer : decodes paths for the answer parsers (`answers.decode_many`).
    parsers : one `AnswerParser` per prompt (row).
    max_new_tokens, stop_ids, temperature, top_k, min_mass : the sampling settings whose event is computed.
    on_finished : called after each level with the number of prompts whose trie that level completed (the calls
        sum to the number of prompts), for progress.

    Returns
    -------
    One `Trie` per prompt: every expanded node's top-K ids, float32 logits and logsumexp, and its edges.
    """
    top = expander.root()
    tries = [Trie() for _ in range(len(top))]
    texts_of: dict[tuple[tuple[int, ...], bool], str] = {}  # decoded paths: prompts reach the same ones
    statuses: dict[tuple[int, str, bool], tuple] = {}  # parser outcomes: prompts share options
    same: dict[AnswerParser, int] = {}
    parser_index = [same.setdefault(parser, len(same)) for parser in parsers]  # equal parsers, one index
    # frontier: (row, node, path, mass) per node to expand
    frontier = [(r, tries[r].add_node(None, None, 0), (), 1.0) for r in range(len(top))]
    finished = 0
    for depth in range(max_new_tokens):
        top_ids, top_vals, lse = top.ids, top.logits, top.logsumexp
        candidates = []  # live branches of this level: (row, node, token, path, mass)
        for i, (row, node, path, mass) in enumerate(frontier):
            trie = tries[row]
            trie.topk_ids.append(top_ids[i])
            trie.topk_logits.append(top_vals[i])
            trie.logsumexp.append(float(lse[i]))
            step = step_probabilities(top_vals[i], temperature, top_k)
            tokens = top_ids[i].tolist()
            keep = parsers[row].final_marker is not None
            texts = _decoded(tokenizer, [path if token in stop_ids else (*path, token) for token in tokens], keep,
                             texts_of)
            for token, p_step, text in zip(tokens, step.tolist(), texts):
                ended = token in stop_ids or depth + 1 == max_new_tokens
                key = (parser_index[row], text, ended)
                if key not in statuses:
                    statuses[key] = parsers[row].status(text, ended=ended)
                status, option = statuses[key]
                if status == "valid":
                    trie.edges.append((node, token, option, None))
                elif status == "live":
                    candidates.append((row, node, token, (*path, token), mass * p_step))
        kept = _most_probable(candidates, min_mass, MAX_LIVE_PER_LEVEL)
        next_frontier = []
        for index, (row, node, token, path, mass) in enumerate(candidates):
            trie = tries[row]
            if index in kept:
                child = trie.add_node(node, token, depth + 1)
                trie.edges.append((node, token, LIVE, child))
                next_frontier.append((row, child, path, mass))
            else:
                trie.edges.append((node, token, PRUNED, None))
        if on_finished:
            completed = len({row for row, *_ in frontier} - {row for row, *_ in next_frontier})
            finished += completed
            on_finished(completed)
        if not next_frontier:
            break
        top = expander.step([(row, path) for row, _, path, _ in next_frontier])
        frontier = next_frontier
    if on_finished and finished < len(tries):
        on_finished(len(tries) - finished)
    for trie in tries:
        assert len(trie.topk_ids) == len(trie.node_parent), "every created node is expanded exactly once"
    return tries


@torch.inference_mode()
def explore(model, tokenizer, prompts: Sequence[Sequence[int]], parsers: Sequence[AnswerParser], *,
            max_new_tokens: int, k_store: int, stop_ids: set[int], pad_id: int, temperature: float, top_k: int,
            min_mass: float = DEFAULT_MIN_MASS, state: PromptState | None = None,
            tree: bool | None = None) -> list[Trie]:
    """`walk` over a transformers model's cache (the Hugging Face backend's expander, `backends.hf.HFExpander`).

    `state`: the prompts already encoded (e.g. by `kvcache.SharedPrefixes.encode`, continuing a cached shared
    prefix); by default each prompt is encoded from its first token (`kvcache.encode_prompts`). The state's cache
    is consumed (grown in place).
    `tree`: levels as tree attention over the prompts' cache (`_TreeLevels`, default where the model's attention
    takes a 4-D mask: sdpa, eager) or by cache copies (`_CopyLevels`); both compute the same trie up to the dtype's
    rounding (tests).
    """
    from .backends.hf import HFExpander

    if state is None:
        state = encode_prompts(model, prompts, pad_id)
    return walk(HFExpander(model, state, k_store, tree), tokenizer, parsers, max_new_tokens=max_new_tokens,
                stop_ids=stop_ids, temperature=temperature, top_k=top_k, min_mass=min_mass)
