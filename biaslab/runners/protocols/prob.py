"""The `prob` protocol: score every option filled into a stimulus's slot (or the stimulus's whole sentence) and
append sequence and token rows, chunk by chunk (docs/design.md sections 4-5).

A stimulus with options gives one request per option (the option filled into the slot, with its agreement);
a stimulus without options gives one request for its text. A stimulus with a prime (a context sentence) is scored
after it: "prime text", the target span shifted accordingly. Causal models score BOS + the text's tokens (every text
token scored); masked models the pseudo-log-likelihood under `--pll` (Salazar et al. 2020 `original`, Kauf and
Ivanova 2023 `within_word_l2r`). Each chunk of requests is scored and written in one transaction (sequence_scores
with its token_scores), so an interrupted collection loses at most the chunk in flight and a rerun scores only what
is missing; chunk boundaries are fixed over the full request list, so a resumed run batches exactly like an
uninterrupted one.

A dataset whose prob stimuli are derived from the model's own generations (`DatasetRef.prob_from == "gen"`,
TANGO) scores the templates `biaslab.runners.tango` builds from them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ...engines.base import PLL, SCORE
from ...errors import DataError, EngineError
from ...schema import Stimulus, request_id
from ..requests import Request
from .base import Progress, Protocol, Settings, Work, arrow

if TYPE_CHECKING:  # NumPy and Arrow are imported where rows are built: `audit status` imports this module
    import numpy as np
    import pyarrow as pa

SCORING_VERSION = "score-v1"


@dataclass(frozen=True)
class ScoreRequest(Request):
    """One text to score (prob protocol): an option filled into a stimulus, or the stimulus's whole text."""

    scheme: str
    option: str | None
    text: str
    target: tuple[int, int] | None  # character span [start, end) of the option in `text`


def score_requests(stimuli: Iterable[Stimulus], protocol: str, scheme: str) -> list[ScoreRequest]:
    """All scoring requests of the stimuli, in stimulus then option order."""
    out = []
    for s in stimuli:
        sid = s.stimulus_id
        options = s.options if s.options is not None else (None,)
        for option in options:
            if option is None:
                text, target = s.text, None
            else:
                text, target = s.fill(option), s.option_span(option)
            if s.prime:  # the context comes first, as the forced-choice passage shows it (`prompting.passage`)
                lead = len(s.prime) + 1
                text = f"{s.prime} {text}"
                target = (target[0] + lead, target[1] + lead) if target else None
            rid = request_id(sid, protocol, {"option": option, "scheme": scheme}, SCORING_VERSION)
            out.append(ScoreRequest(rid, sid, protocol, scheme, option, text, target))
    return out


@dataclass(frozen=True)
class Tokenized:
    """Token ids fed to the model, and for each scored token its id and character span in the text."""

    input_ids: list[int]
    scored_ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]  # masked LMs: word index per input token (None for special tokens)


def tokenize_causal(tokenizer, text: str, bos_id: int) -> Tokenized:
    """BOS + the text's tokens (no other special tokens); every text token is scored."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    if not ids:
        raise DataError(f"text tokenizes to nothing: {text!r}")
    return Tokenized([bos_id, *ids], ids, [tuple(o) for o in enc["offset_mapping"]], [])


def tokenize_masked(tokenizer, text: str) -> Tokenized:
    """[CLS] tokens [SEP] (the tokenizer's own special tokens); every non-special token is scored."""
    enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    words = enc.word_ids()
    scored = [(t, tuple(o)) for t, (t_id, o, w) in enumerate(zip(ids, enc["offset_mapping"], words)) if w is not None]
    if not scored:
        raise DataError(f"text tokenizes to nothing: {text!r}")
    return Tokenized(ids, [ids[t] for t, _ in scored], [o for _, o in scored], list(words))


def target_positions(offsets: list[tuple[int, int]], span: tuple[int, int]) -> tuple[int, int]:
    """First and one-past-last scored token overlapping the character span (the tokens of the target word)."""
    start, end = span
    hits = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    if not hits:
        raise DataError(f"no token covers characters {start}..{end}")
    return hits[0], hits[-1] + 1


def pending_requests(wh, model_key: str, requests: Sequence[ScoreRequest]) -> list[ScoreRequest]:
    """Requests of this model not yet stored in `sequence_scores` (the resume point)."""
    done = wh.stored("sequence_scores", model_key, [r.request_id for r in requests])
    return [r for r in requests if (r.request_id,) not in done]


def score_chunk(backend, requests: Sequence[ScoreRequest], run_id: str | None = None) -> tuple[pa.Table, pa.Table]:
    """Score requests through the backend (`Backend.pll` for masked LMs, else `Backend.score` with each
    stimulus's options as one group, a hint that they share a prefix); return (sequence_scores rows,
    token_scores rows) as Arrow tables. Batching is the backend's (`BackendOptions.batch_tokens`)."""
    tok = backend.tokenizer
    if backend.spec.kind == "masked":
        encoded = [tokenize_masked(tok, r.text) for r in requests]
        scheme = requests[0].scheme
        if any(r.scheme != scheme for r in requests):
            raise ValueError("one chunk must use one PLL scheme")
        logprobs = backend.pll([e.input_ids for e in encoded], [e.word_ids for e in encoded], scheme)
    else:
        encoded = [tokenize_causal(tok, r.text, backend.bos_id) for r in requests]
        logprobs = backend.score([e.input_ids for e in encoded], [r.stimulus_id for r in requests])
    return build_rows(backend.spec.model_key, requests, encoded, logprobs, run_id)


def build_rows(model_key: str, requests: Sequence[ScoreRequest], encoded: Sequence[Tokenized],
               logprobs: Sequence[np.ndarray], run_id: str | None = None) -> tuple[pa.Table, pa.Table]:
    """(sequence_scores rows, token_scores rows) of scored requests: per text the token count, the joint
    log-probability and the target word's span and log-probability; per scored token its id, log-probability and
    character span."""
    import numpy as np

    seq_cols: dict[str, list] = {k: [] for k in (
        "request_id", "stimulus_id", "protocol", "option", "scheme", "text", "n_tokens", "sum_logprob",
        "target_char_start", "target_char_end", "target_token_start", "target_token_end", "target_logprob")}
    tok_parts: dict[str, list] = {k: [] for k in ("request_id", "position", "token_id", "logprob", "cs", "ce")}
    for req, enc, lp in zip(requests, encoded, logprobs):
        if len(lp) != len(enc.scored_ids):
            raise EngineError(f"request {req.request_id}: {len(lp)} scores for {len(enc.scored_ids)} tokens")
        span = target_positions(enc.offsets, req.target) if req.target else (None, None)
        for key, value in (("request_id", req.request_id),
                           ("stimulus_id", req.stimulus_id), ("protocol", req.protocol), ("option", req.option),
                           ("scheme", req.scheme), ("text", req.text), ("n_tokens", len(lp)),
                           ("sum_logprob", float(lp.sum())),
                           ("target_char_start", req.target[0] if req.target else None),
                           ("target_char_end", req.target[1] if req.target else None),
                           ("target_token_start", span[0]), ("target_token_end", span[1]),
                           ("target_logprob", float(lp[span[0]:span[1]].sum()) if req.target else None)):
            seq_cols[key].append(value)
        n = len(lp)
        tok_parts["request_id"].append(np.full(n, req.request_id, dtype=object))
        tok_parts["position"].append(np.arange(n, dtype=np.int32))
        tok_parts["token_id"].append(np.asarray(enc.scored_ids, dtype=np.int32))
        tok_parts["logprob"].append(lp)
        offsets = np.asarray(enc.offsets, dtype=np.int32).reshape(-1, 2)
        tok_parts["cs"].append(offsets[:, 0])
        tok_parts["ce"].append(offsets[:, 1])
    seq = arrow("sequence_scores", seq_cols, model_key=model_key, run_id=run_id)
    tokens = arrow("token_scores", {
        "request_id": np.concatenate(tok_parts["request_id"]).tolist(),
        "position": np.concatenate(tok_parts["position"]), "token_id": np.concatenate(tok_parts["token_id"]),
        "logprob": np.concatenate(tok_parts["logprob"]), "char_start": np.concatenate(tok_parts["cs"]),
        "char_end": np.concatenate(tok_parts["ce"])}, model_key=model_key)
    return seq, tokens


def _crash_point() -> tuple[int, str] | None:
    """Fault injection for crash-safety tests: BIASLAB_CRASH_AFTER_CHUNKS="N" SIGKILLs this process after N committed
    chunks; "N:scored" after scoring chunk N+1 but before writing it. Unset in normal use."""
    value = os.environ.get("BIASLAB_CRASH_AFTER_CHUNKS")
    if not value:
        return None
    count, _, where = value.partition(":")
    return int(count), where or "committed"


def pending_chunks(requests: Sequence[ScoreRequest], pending: Sequence[ScoreRequest],
                   chunk_size: int) -> list[tuple[list[ScoreRequest], int]]:
    """Chunks of the FULL request list that still hold pending work, with their number of pending requests.

    Chunk boundaries do not depend on what is already stored, and a chunk is committed all at once, so a resumed
    collection computes every chunk with exactly the batch composition of an uninterrupted one: the stored numbers
    are the same bit for bit, not just close (batch composition changes float results at the 1e-5 level).
    """
    todo = {r.request_id for r in pending}
    chunks = []
    for start in range(0, len(requests), chunk_size):
        chunk = list(requests[start:start + chunk_size])
        waiting = sum(r.request_id in todo for r in chunk)
        if waiting:
            chunks.append((chunk, waiting))
    return chunks


def collect_scores(wh, backend, chunks: Sequence[tuple[list[ScoreRequest], int]], *, run_id: str | None = None,
                   on_progress: Progress = None) -> int:
    """Score and store the chunks from `pending_chunks` through `backend` (a `Backend`); returns sequence rows
    added."""
    added = 0
    crash = _crash_point()
    for number, (chunk, waiting) in enumerate(chunks):
        seq, tokens = score_chunk(backend, chunk, run_id)
        if crash == (number, "scored"):
            os.kill(os.getpid(), signal.SIGKILL)
        added += wh.append_with_children("sequence_scores", seq, {"token_scores": tokens})
        if crash == (number + 1, "committed"):
            os.kill(os.getpid(), signal.SIGKILL)
        if on_progress:
            on_progress(waiting)
    return added


class ProbSettings(Settings):
    """`--pll`: the pseudo-log-likelihood scheme of masked LMs (causal models ignore it)."""

    pll: Literal["original", "within_word_l2r"] = "original"


class Prob(Protocol):
    """The prob protocol (see the module docstring)."""

    name = "prob"
    settings_model = ProbSettings
    table = "sequence_scores"

    def capability(self, kind: str) -> str:
        return "pll" if kind == "masked" else "prob"

    def needs(self, kind: str) -> frozenset[str]:
        return frozenset({PLL if kind == "masked" else SCORE})

    def stimuli(self, wh, model_key: str, stimuli: list[Stimulus]) -> tuple[list[Stimulus], str]:
        if self.dataset is None or self.dataset.prob_from != "gen":
            return stimuli, ""
        from ..tango import derived_templates

        return derived_templates(wh, model_key, stimuli)

    def requests(self, stimuli: Sequence[Stimulus], prepared) -> list[ScoreRequest]:
        self.scheme = self.settings.pll if prepared.spec.kind == "masked" else "causal"
        return score_requests(stimuli, "prob", self.scheme)

    def pending(self, wh, model_key: str, requests: Sequence[ScoreRequest]) -> Work:
        todo = pending_requests(wh, model_key, requests)
        return Work(len(todo), todo, list(requests))

    def provenance(self) -> tuple[dict, dict | None]:
        return {"scheme": self.scheme, "protocol_version": f"{SCORING_VERSION}:{self.scheme}"}, None

    def run(self, wh, backend, work: Work, *, run_id: str, chunk_size: int, on_progress: Progress) -> int:
        chunks = pending_chunks(work.requests, work.items, chunk_size)
        return collect_scores(wh, backend, chunks, run_id=run_id, on_progress=on_progress)
PROTOCOL = Prob
