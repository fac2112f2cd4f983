"""Exact choice probabilities without sampling (docs/design.md section 6).

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import UsageError
from .answers import AnswerParser, decode_many

if TYPE_CHECKING:  # NumPy where probabilities are computed: `audit status` imports the protocols, which import this
    import numpy as np

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
        raise UsageError("temperature must be > 0")
    if top_k < 1 or top_k > len(logits):
        raise UsageError(f"top_k must be in 1..{len(logits)} (the stored K), got {top_k}")
    import numpy as np

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


def _most_probable(candidates: list, min_mass: float, per_prompt: int) -> set[int]:
    """Indices of the live branches to expand: mass >= min_mass and among the `per_prompt` most probable of their
    prompt (ties broken by position, so the choice is deterministic)."""
    by_row: dict[int, list[tuple[float, int]]] = {}
    for index, candidate in enumerate(candidates):
        row, mass = candidate[0], candidate[4]
        if mass >= min_mass:
            by_row.setdefault(row, []).append((-mass, index))
    return {index for items in by_row.values() for _, index in sorted(items)[:per_prompt]}


def _decoded(tokenizer, sequences: list[tuple[int, ...]], keep_special: bool,
             known: dict[tuple[tuple[int, ...], bool], str]) -> list[str]:
    """`decode_many` of `sequences`, decoding only those not already in `known` (which it extends)."""
    missing = list(dict.fromkeys(s for s in sequences if (s, keep_special) not in known))
    if missing:
        for sequence, text in zip(missing, decode_many(tokenizer, missing, keep_special=keep_special)):
            known[(sequence, keep_special)] = text
    return [known[(s, keep_special)] for s in sequences]


class _Outcomes:
    """What the answer parsers make of the paths one token longer than a node's: the decoded texts (cached per
    path, as prompts reach the same paths) and each parser's status (cached per equal parser, text and end)."""

    def __init__(self, tokenizer, parsers: Sequence[AnswerParser], stop_ids, max_new_tokens: int):
        self.tokenizer = tokenizer
        self.parsers = parsers
        self.stop_ids = stop_ids
        self.max_new_tokens = max_new_tokens
        self.texts_of: dict[tuple[tuple[int, ...], bool], str] = {}  # decoded paths: prompts reach the same ones
        self.statuses: dict[tuple[int, str, bool], tuple] = {}  # parser outcomes: prompts share options
        same: dict[AnswerParser, int] = {}
        self.parser_index = [same.setdefault(parser, len(same)) for parser in parsers]  # equal parsers, one index

    def texts(self, row: int, path: tuple[int, ...], tokens: list[int]) -> list[str]:
        """The text of `path` followed by each of `tokens` (a stop token adds nothing), decoded for row's parser."""
        keep = self.parsers[row].final_marker is not None
        return _decoded(self.tokenizer, [path if token in self.stop_ids else (*path, token) for token in tokens],
                        keep, self.texts_of)

    def status(self, row: int, token: int, text: str, depth: int) -> tuple:
        """Row's parser's (status, option) of `text`, reached by `token` at `depth` (ended by a stop token or the
        token limit)."""
        ended = token in self.stop_ids or depth + 1 == self.max_new_tokens
        key = (self.parser_index[row], text, ended)
        if key not in self.statuses:
            self.statuses[key] = self.parsers[row].status(text, ended=ended)
        return self.statuses[key]


def _expand_level(top, frontier: list, tries: list[Trie], outcomes: _Outcomes, depth: int, temperature: float,
                  top_k: int) -> list:
    """Store the top-K evidence `top` of every frontier node (row, node, path, mass) in its trie, add an edge for
    each token that completes a valid answer, and return the live branches of this level: (row, node, token, path,
    mass)."""
    top_ids, top_vals, lse = top.ids, top.logits, top.logsumexp
    candidates = []  # live branches of this level: (row, node, token, path, mass)
    for i, (row, node, path, mass) in enumerate(frontier):
        trie = tries[row]
        trie.topk_ids.append(top_ids[i])
        trie.topk_logits.append(top_vals[i])
        trie.logsumexp.append(float(lse[i]))
        step = step_probabilities(top_vals[i], temperature, top_k)
        tokens = top_ids[i].tolist()
        texts = outcomes.texts(row, path, tokens)
        for token, p_step, text in zip(tokens, step.tolist(), texts):
            status, option = outcomes.status(row, token, text, depth)
            if status == "valid":
                trie.edges.append((node, token, option, None))
            elif status == "live":
                candidates.append((row, node, token, (*path, token), mass * p_step))
    return candidates


def _grow(candidates: list, tries: list[Trie], depth: int, min_mass: float) -> list:
    """Add the live branches to expand (`_most_probable`) as child nodes with a live edge, the others as pruned
    edges; returns the next frontier: (row, child, path, mass) per child."""
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
    return next_frontier


def walk(expander, tokenizer, parsers: Sequence[AnswerParser], *, max_new_tokens: int, stop_ids,
         temperature: float, top_k: int, min_mass: float = DEFAULT_MIN_MASS) -> list[Trie]:
    """Build the trie of every prompt of `expander` (any `backends.base.Expander`): level 0 from `expander.root()`,
    level d from `expander.step` over the d generated tokens of every live node whose probability at
    (temperature, top_k) is at least `min_mass` (at most `MAX_LIVE_PER_LEVEL` per prompt), one call per level.

    Parameters
    ----------
    expander : top-K evidence after each prompt (`root`) and after prompt + path (`step`), K = the stored k_store.
    tokenizer : decodes paths for the answer parsers (`answers.decode_many`).
    parsers : one `AnswerParser` per prompt (row).
    max_new_tokens, stop_ids, temperature, top_k, min_mass : the sampling settings whose event is computed.

    Returns
    -------
    One `Trie` per prompt: every expanded node's top-K ids, float32 logits and logsumexp, and its edges.
    """
    top = expander.root()
    tries = [Trie() for _ in range(len(top))]
    outcomes = _Outcomes(tokenizer, parsers, stop_ids, max_new_tokens)
    # frontier: (row, node, path, mass) per node to expand
    frontier = [(r, tries[r].add_node(None, None, 0), (), 1.0) for r in range(len(top))]
    for depth in range(max_new_tokens):
        candidates = _expand_level(top, frontier, tries, outcomes, depth, temperature, top_k)
        next_frontier = _grow(candidates, tries, depth, min_mass)
        if not next_frontier:
            break
        top = expander.step([(row, path) for row, _, path, _ in next_frontier])
        frontier = next_frontier
    for trie in tries:
        assert len(trie.topk_ids) == len(trie.node_parent), "every created node is expanded exactly once"
    return tries

