"""Token log-probabilities of whole sequences: causal log-likelihood and masked-LM pseudo-log-likelihood.

Causal: log p(x_t | x_<t) for every token after the prepended BOS. Masked (Salazar et al. 2020, "Masked Language
Model Scoring"): PLL(x) = sum_t log p(x_t | x with the tokens in M_t masked), with M_t = {t} for the `original`
scheme and M_t = {t} plus the later tokens of the same word for `within_word_l2r` (Kauf and Ivanova 2023, "A Better
Way to Do Masked Language Model Scoring").

Speed (docs/design.md section 5): requests are sorted by length and batched to a token budget; the base model runs
once per batch; the output head and the log-softmax are applied only at the positions scored (never a
[batch, length, vocabulary] tensor); padding never enters a score; batches are halved on out-of-memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import UsageError
from .batching import run_halving_on_oom, token_budget_batches

HEAD_CHUNK = 2048  # positions per output-head call: bounds the [positions, vocabulary] logits block
LSE_BLOCK = 32    # rows per float32 log-sum-exp block (about 6 MB for a 49k vocabulary: cache-resident)


@dataclass(frozen=True)
class OutputHead:
    """Hidden states -> vocabulary logits, split so that the float32 work happens in cache-sized row blocks.

    `raw` is the model's own head (a bf16 matmul for a bf16 model); `to_float` upcasts a block of its output to
    float32 (a float64 model's stays float64: the benchmarks score in float64 to compare arithmetic with the peers'
    without fp32 rounding) and applies the model's logit scaling / soft-capping, if any.
    """

    raw: Callable[[torch.Tensor], torch.Tensor]
    scale: float | None = None
    cap: float | None = None

    def to_float(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.dtype != torch.float64:
            logits = logits.float()
        if self.scale is not None:
            logits = logits * self.scale
        if self.cap is not None:
            logits = torch.tanh(logits / self.cap) * self.cap
        return logits


def _base_and_head(model) -> tuple[torch.nn.Module, OutputHead]:
    """The transformer body and its output head (BERT's `cls` MLM head, else `lm_head`, else output embeddings)."""
    if hasattr(model, "cls") and getattr(model, "base_model_prefix", "") == "bert":
        head_module = model.cls
    elif hasattr(model, "lm_head"):
        head_module = model.lm_head
    else:
        head_module = model.get_output_embeddings()
    config = model.config
    return model.base_model, OutputHead(head_module, getattr(config, "logit_scale", None),
                                        getattr(config, "final_logit_softcapping", None))


def _gather_logprobs(head: OutputHead, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log_softmax(head(hidden))[target] per row, as float64 on the CPU.

    The head runs on HEAD_CHUNK rows at a time (bounded memory); the log-sum-exp is taken in float32 over
    blocks of LSE_BLOCK rows, small enough to stay in cache, which is several times faster than upcasting the
    whole [rows, vocabulary] block at once.
    """
    out = torch.empty(hidden.shape[0], dtype=torch.float64)
    for start in range(0, hidden.shape[0], HEAD_CHUNK):
        logits = head.raw(hidden[start:start + HEAD_CHUNK])
        tgt = targets[start:start + HEAD_CHUNK]
        for b in range(0, logits.shape[0], LSE_BLOCK):
            block = head.to_float(logits[b:b + LSE_BLOCK])
            chosen = block.gather(1, tgt[b:b + LSE_BLOCK, None])[:, 0]
            lp = chosen - torch.logsumexp(block, dim=-1)
            out[start + b:start + b + block.shape[0]] = lp.double().cpu()
    return out


@torch.inference_mode()
def score_causal(model, sequences: Sequence[Sequence[int]], *, max_tokens: int = 4096,
                 pad_id: int = 0) -> list[np.ndarray]:
    """Per sequence, log p(x_t | x_<t) for t = 1..n-1 (x_0 is the prepended BOS), as float64 arrays."""
    device = next(model.parameters()).device
    base, head = _base_and_head(model)
    results: list[np.ndarray | None] = [None] * len(sequences)

    def run(batch: list[int]) -> list[tuple[int, np.ndarray]]:
        longest = max(len(sequences[i]) for i in batch)
        ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, i in enumerate(batch):
            ids[row, : len(sequences[i])] = torch.as_tensor(sequences[i])
            mask[row, : len(sequences[i])] = 1
        ids, mask = ids.to(device), mask.to(device)
        hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state
        scored = mask[:, 1:].bool()                     # position t-1 predicts token t; padding excluded
        flat = _gather_logprobs(head, hidden[:, :-1][scored], ids[:, 1:][scored]).numpy()
        counts = scored.sum(dim=1).tolist()
        offsets = np.cumsum([0, *counts])
        return [(i, flat[offsets[r]:offsets[r + 1]]) for r, i in enumerate(batch)]

    for batch in token_budget_batches([len(s) for s in sequences], max_tokens):
        for i, logprobs in run_halving_on_oom(batch, run):
            results[i] = logprobs
    return results  # type: ignore[return-value]


@dataclass(frozen=True)
class MaskedRow:
    """One pseudo-likelihood query: score token `position` of sentence `sentence` with `masked` positions masked."""

    sentence: int
    position: int
    masked: tuple[int, ...]


def pll_rows(word_ids: Sequence[Sequence[int | None]], scheme: str) -> list[MaskedRow]:
    """The (sentence, position) queries of a PLL scheme; special tokens (word id None) are never scored."""
    if scheme not in ("original", "within_word_l2r"):
        raise UsageError(f"unknown PLL scheme {scheme!r}: use 'original' or 'within_word_l2r'")
    rows = []
    for s, words in enumerate(word_ids):
        for t, w in enumerate(words):
            if w is None:
                continue
            if scheme == "original":
                masked = (t,)
            else:
                masked = tuple(j for j in range(t, len(words)) if words[j] == w)
            rows.append(MaskedRow(s, t, masked))
    return rows


@torch.inference_mode()
def score_masked(model, sequences: Sequence[Sequence[int]], word_ids: Sequence[Sequence[int | None]], *,
                 scheme: str, mask_id: int, pad_id: int = 0, max_tokens: int = 4096) -> list[np.ndarray]:
    """Per sequence, the PLL term log p(x_t | masked context) of every non-special token t, in token order.

    (sentence, position) rows of all sentences are flattened, sorted by length and batched together; the MLM
    head runs only at the one scored position of each row.
    """
    device = next(model.parameters()).device
    base, head = _base_and_head(model)
    rows = pll_rows(word_ids, scheme)
    values = np.zeros(len(rows))

    def run(batch: list[int]) -> list[tuple[int, float]]:
        longest = max(len(sequences[rows[r].sentence]) for r in batch)
        ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        targets = torch.empty(len(batch), dtype=torch.long)
        positions = torch.empty(len(batch), dtype=torch.long)
        for k, r in enumerate(batch):
            row = rows[r]
            seq = sequences[row.sentence]
            ids[k, : len(seq)] = torch.as_tensor(seq)
            mask[k, : len(seq)] = 1
            targets[k] = seq[row.position]
            positions[k] = row.position
            ids[k, list(row.masked)] = mask_id
        hidden = base(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        picked = hidden[torch.arange(len(batch), device=device), positions.to(device)]
        logprobs = _gather_logprobs(head, picked, targets.to(device)).numpy()
        return list(zip(batch, logprobs.tolist()))

    lengths = [len(sequences[r.sentence]) for r in rows]
    for batch in token_budget_batches(lengths, max_tokens):
        for r, value in run_halving_on_oom(batch, run):
            values[r] = value
    out: list[list[float]] = [[] for _ in sequences]
    for row, value in zip(rows, values):  # rows are in (sentence, position) order
        out[row.sentence].append(value)
    return [np.asarray(v, dtype=np.float64) for v in out]
