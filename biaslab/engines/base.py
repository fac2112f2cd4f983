"""The `Backend` protocol: the one interface between the protocols (prob, choice exact / sample, gen, TANGO
templates) and any engine (docs/design.md section 10).

A backend offers evidence, not studies. Every method takes token ids (the protocols tokenize with
`backend.tokenizer`, so the ids a backend sees are the ids stored) and returns what docs/design.md section 4 stores:

- `score`: per-token log-probabilities of given token ids (causal LMs);
- `pll`: per-token pseudo-log-likelihoods under a masking scheme (masked LMs);
- `top_k`: the K most probable next tokens at a batch of prefixes, with their logits (or normalized
  log-probabilities) and the full-vocabulary logsumexp, so any temperature T and any top-k <= K re-derive exactly;
- `expander`: the same, level by level down an answer trie (choice exact mode); engines with a cache may reuse it,
  the default re-submits each prefix through `top_k`;
- `sample`: seeded samples, one seed per sample, with every sampling parameter set explicitly;
- `PrefixSharing` (every backend has it; `EngineBase` gives the neutral defaults): how an engine wants the prompts
  of a forced-choice collection grouped and batched (a shared prefix computed once, prompt groups, rows per
  exploration). Runners call these methods on every backend; nothing is probed.

Each engine module exposes `NAME`, `CAPABILITIES`, `Options` (a pydantic model of its `--engine-arg KEY=VALUE`
settings, unknown keys refused), `installed()`, `validate_options(options)` and `prepare(model, options)`, and may
declare shortcut flags of its settings (`FLAGS`, `Flag`); `biaslab.engines.get(name)` finds it, built in or a plugin
(`biaslab.engines.registry`). What a protocol needs of an engine (these capability names) the protocol declares
(`biaslab.runners.protocols.base.Protocol.needs`).

Contract shared by all methods (as lm-eval's `LM` states its own):

- Inputs are lists of token-id lists; outputs come back in the same order, one per input. Batching, sorting by
  length, retries and out-of-memory halving are the backend's business.
- Nothing is cached across calls that could change a number: a call's outputs depend only on its inputs (and on
  the seeds for `sample`), never on what else was in the batch beyond the dtype's tolerance.
- A method the backend cannot serve raises `Unsupported`; `capabilities` says beforehand which ones exist, and
  `collect` refuses a protocol whose capability is missing before any weights load.
- Log-probabilities are natural-log, float64 where returned as Python floats, at temperature 1 and without
  truncation (the model's own distribution), whatever sampling parameters were used.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: listing engines and their flags (`runners --help`) imports no numpy
    import numpy as np

# EngineError and Unsupported re-exported here, where the engines have always found them: an engine that failed for
# good, and a method or combination it cannot serve (e.g. PLL on vLLM; one line, raised before any work is done)
from ..errors import EngineError, Unsupported, UsageError  # noqa: F401


class WindowExceeded(EngineError):
    """An expander's answer tries outgrew what its attention can span (tree attention past a model's sliding window):
    the caller explores the same prompts again by cache copies (`expander(..., tree=False)`)."""


#: capability names (`Backend.capabilities`)
SCORE = "score"          # causal per-token log-probabilities of given ids
PLL = "pll"              # masked-LM pseudo-log-likelihood
TOP_K = "top_k"          # top-K at prefixes (choice exact mode)
SAMPLE = "sample"        # seeded sampling (choice sample mode, gen)
CHAT = "chat"            # a hosted chat API: seeded replies to messages (choice sample mode, gen), no token ids
CHAT_LOGPROBS = "chat_logprobs"  # a chat API's top log-probabilities along a reply (choice logprobs mode)



@dataclass(frozen=True)
class Flag:
    """A `runners collect` shortcut flag of one engine setting: `--FLAG VALUE` stands for `--engine-arg FIELD=VALUE`.
    An engine module declares its own in `FLAGS` (a tuple of these; none by default); the command line builds one
    option per flag from the engine registry, its type from the field's annotation in the engine's `Options`.

    Attributes
    ----------
    field : the `Options` field the flag sets.
    help : the flag's help text (the command line prefixes the engines that take it, e.g. "vllm: ").
    name : the flag, default ``--`` + the field with dashes (``max_model_len`` -> ``--max-model-len``).
    metavar : how the help shows the value (default: click's name of the type).
    size : the value is a byte size written as people write it ("4GiB", "512MiB", "1.5 GB", bytes), read into an
        integer number of bytes by the command line.
    """

    field: str
    help: str
    name: str | None = None
    metavar: str | None = None
    size: bool = False

    @property
    def flag(self) -> str:
        """The flag as typed: `name`, else ``--`` + the field with dashes."""
        return self.name or "--" + self.field.replace("_", "-")


@dataclass(frozen=True)
class TopK:
    """Top-K next-token evidence at n prefixes.

    Attributes
    ----------
    ids : np.ndarray, int64 [n, K], or a list of n int64 arrays of length >= K
        Token ids in descending order of logit (ties in the engine's order). A row may be longer than K: engines
        that see the whole distribution (hf) keep every token tied with the K-th logit (`hf.tree.top_k_with_ties`),
        because the sampler's top-k keeps ties; engines that return exactly K (vllm, openai) cannot.
    logits : np.ndarray, float32 [n, K] (or a list of n float32 arrays, as `ids`)
        Raw logits z (in-process engines) or normalized log-probabilities z - logsumexp(z) (engines that only
        return log-probabilities). Both give the same p(c) = exp(z_c/T) / sum_{j in topK} exp(z_j/T) for every T.
    logsumexp : np.ndarray, float64 [n]
        log sum_v exp(z_v) over the full vocabulary; 0.0 where `logits` are already normalized.
    """

    ids: np.ndarray
    logits: np.ndarray
    logsumexp: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Sample:
    """One sampled continuation."""

    token_ids: list[int]    # generated tokens, the stop token excluded
    logprobs: list[float]   # log p(token) under the model (temperature 1, no truncation), one per token_ids
    finish_reason: str      # "stop" (a stop token was drawn) or "length"


@dataclass
class ChatReply:
    """One reply of a chat API (`ChatBackend.chat`).

    Attributes
    ----------
    text : the reply's text (the assistant message's content; after the prefill where one was sent).
    finish_reason : as the provider names it ("stop", "length", "content_filter", ...).
    snapshot : what the provider reported of the model that answered (model version, system fingerprint).
    positions : with log-probabilities asked: per generated token, (its text, its log-probability, and the top
        alternatives at that position as (text, log-probability) pairs, most probable first); else None.
    """

    text: str
    finish_reason: str
    snapshot: str
    positions: list[tuple[str, float, list[tuple[str, float]]]] | None = None


@dataclass(frozen=True)
class SamplingSettings:
    """Every sampling parameter, set explicitly (docs/design.md section 5): no repetition penalty, no other processor.

    Each step: logits z -> z / temperature -> keep z >= the top_k-th largest (ties kept) -> keep the smallest
    descending-probability prefix whose mass reaches top_p -> softmax -> draw; stop tokens are impossible for the
    first `min_new_tokens` steps; at most `max_new_tokens` tokens.
    """

    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    min_new_tokens: int = 0

    def validate(self) -> None:
        """Raise ValueError (one line) for settings no sampler can use."""
        if not self.temperature > 0:
            raise UsageError(f"temperature must be > 0 in sample mode, got {self.temperature}")
        if self.top_k < 1:
            raise UsageError(f"top_k must be >= 1, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise UsageError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise UsageError(f"min_new_tokens must be between 0 and max_new_tokens ({self.max_new_tokens})")


@dataclass(frozen=True)
class ChatAsk:
    """One chunk of requests to a chat API (`engines.chat.ChatBackend.chat_chunks`): per request its messages and
    seed, and the sampling settings, prefill and top log-probabilities every request of the chunk shares."""

    messages: Sequence[Sequence[dict]]
    seeds: Sequence[int | None]
    settings: SamplingSettings
    prefill: str | None = None
    top_logprobs: int | None = None


@dataclass(frozen=True)
class BackendOptions:
    """What the user chose about the engine (CLI flags); every field that can change numbers goes into the model key.

    `model_args`: `--model-arg key=value` pairs passed to the model constructor (e.g. trust_remote_code,
    attn_implementation). `engine_args`: backend-specific settings, checked by the engine's `Options` (vLLM:
    tensor_parallel_size, data_parallel_size, gpu_memory_utilization, max_model_len, ...; openai: base_url,
    api_key_env, max_concurrency, timeout_s, retries). `batch_tokens`: token budget of one padded scoring batch
    (`--batch-tokens`) for engines that batch in-process; how work is batched, never part of the model key.
    """

    dtype: str | None = None
    quant: str = "none"
    device: str | None = None
    revision: str | None = None
    model_args: tuple[tuple[str, str], ...] = ()
    engine_args: tuple[tuple[str, Any], ...] = ()
    batch_tokens: int = 4096


#: engine arguments whose value a refusal never shows: a URL can carry a user, a password or a key in its query,
#: and a mistyped variable name can be the key itself
UNECHOED = frozenset({"base_url", "api_key_env"})
#: a server's base URL as every engine takes it: scheme, host (a name, an IPv4 address or a bracketed IPv6 one),
#: an optional numeric port and a path; no user, password, query or fragment
BASE_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[^/@?#\s:\[\]]+)(:[0-9]{1,5})?(/[^?#@\s]*)?")


def check_base_url(value: str | None) -> str | None:
    """`value` without its trailing slashes when it is http(s):// + host[:port][/path]; UsageError otherwise, which
    does not show the value (it may hold a credential: user:password@ or ?key=)."""
    if value is None:
        return None
    if not isinstance(value, str) or not BASE_URL.fullmatch(value):
        raise UsageError("must be http:// or https:// + host[:port][/path] with a numeric port, without a user, "
                         "password, query or fragment (a key goes in the environment variable --api-key-env names); "
                         "the value given is not shown")
    return value.rstrip("/")


def engine_options(model: type, backend: str, given: Any):
    """`given` (engine argument -> value, values as typed or as strings from the command line) checked by the
    engine's pydantic `Options` model; the first problem as one-line ValueError naming the argument.

    Parameters
    ----------
    model : the engine's `Options` class (a pydantic model with ``extra="forbid"``).
    backend : the backend's name, for the message.
    given : a mapping or (key, value) pairs.
    """
    from pydantic import ValidationError

    from ..schema.errors import first_error

    try:
        return model.model_validate(dict(given))
    except ValidationError as exc:
        error = first_error(exc)
        where = error.field or "engine arguments"
        if error.kind == "extra_forbidden":
            known = ", ".join(f"{name} ({f.description})" for name, f in model.model_fields.items()) or "none"
            raise UsageError(f"--backend {backend}: unknown engine argument {where!r} (known: {known})") from None
        shown = "" if where.split(".")[0] in UNECHOED else f" (got {error.given!r})"
        raise UsageError(f"--backend {backend}: engine argument {where}: {error.message}{shown}") from None


class Prepared(Protocol):
    """A backend's model resolved without loading weights: its identity (`spec`, whose `model_key` keys every
    stored row) and tokenizer, enough to find pending work; `load()` starts the engine.

    Attributes
    ----------
    spec, tokenizer : the model's identity (a `ModelSpec`) and its Hugging Face tokenizer.
    device : where the engine runs, for the run's provenance (a torch device, "cpu" / "cuda", a server URL).
    max_top_k : the largest K the engine's `top_k` returns (None: the vocabulary); exact mode's --k-store is
        refused above it before any run row is written.
    label : how this engine computes forced-choice evidence, recorded in each run's parameters.
    provenance : what else a run records about how the engine set the model up (JSON values; e.g. the hf
        backend's measured default dtype, `dtype_choice`).
    batch : whether the engine sends a collection's requests through a provider's batch API, all pending work in
        one call (a hosted chat API with `--batch`); the loaded backend declares the same.
    billed : whether each request costs money (a hosted API): the runner then asks `estimate` before sending.
    deferred : whether the model key still rests on an assumed snapshot (a hosted API before its first request):
        the runner then `assume`s the one its warehouse last saw (`spec_at`), and `settle`s it (one request) only
        after the cost was agreed to and when something is pending (`engines.chat.ChatPrepared`); a rerun that only
        fetches batches submitted under the assumed one `keep_assumed`s it (nothing sent).
    """

    spec: Any
    tokenizer: Any
    device: Any
    max_top_k: int | None
    label: str
    provenance: dict[str, Any]
    batch: bool
    billed: bool
    deferred: bool

    def estimate(self, requests: int, input_chars: int, output_tokens: int) -> Any:
        """What the pending work will cost before anything is sent, for a `billed` engine (an object with `line()`
        and `refused()`, `engines.chat.Estimate`); None for an engine that bills nothing."""
        ...

    def verify(self, needs: frozenset[str]) -> None:
        """Check that the engine serves every capability in `needs` (what the protocol about to run needs, its
        `needs(kind)`) the way the protocols rely on, before any run row is written; raise `Unsupported` in one line
        naming what is missing. In-process engines have nothing to check (`PreparedBase`); a server is asked (see
        `biaslab.engines.openai`), and `max_top_k` is known once TOP_K is verified."""
        ...

    def load(self) -> Backend: ...


class Identified:
    """`model_key` and `kind` read from `self.spec` (a `ModelSpec`): shared by every backend's prepared and loaded
    objects."""

    spec: Any

    @property
    def model_key(self) -> str:
        return self.spec.model_key

    @property
    def kind(self) -> str:
        return self.spec.kind


class PreparedBase(Identified):
    """What every engine's prepared model shares: its identity (`Identified`), `verify`, which checks nothing
    for an in-process engine (its capabilities are its code's), `provenance` (nothing to add by default), no batch
    API and no bill (`batch`, `estimate`)."""

    #: see `Prepared.batch`, `Prepared.billed` and `Prepared.deferred`
    batch = False
    billed = False
    deferred = False

    @property
    def provenance(self) -> dict[str, Any]:  # noqa: D102 - see `Prepared.provenance`
        return {}

    def estimate(self, requests: int, input_chars: int, output_tokens: int) -> Any:  # noqa: D102 - `Prepared`
        return None

    def verify(self, needs: frozenset[str]) -> None:  # noqa: D102 - see `Prepared.verify`
        return None


class Expander(Protocol):
    """Incremental top-K down the answer tries of a batch of prompts (choice exact mode).

    `root()` is the top-K after each whole prompt (row i = prompts[i]). `step(nodes)` takes the live nodes of the
    next level as (prompt row, generated path) and returns the top-K after prompt + path for each, in order. Each
    path extends a path of the previous level by one token (or is a root's first token).
    """

    def root(self) -> TopK: ...

    def step(self, nodes: Sequence[tuple[int, tuple[int, ...]]]) -> TopK: ...


class PrefixSharing(Protocol):
    """How an engine wants the forced-choice prompts of a collection grouped and batched. Every backend has these
    methods (`EngineBase` gives the neutral defaults: no shared prefix, one group, no cap, batches combined); an
    engine with a cache overrides them. None of them may change a number beyond the dtype's rounding.
    """

    def share_prefix(self, reference: Sequence[int]) -> None:
        """Declare the token ids every prompt of this collection begins with (a template's shared prefix); the
        engine may compute it once and continue it in `expander` and `sample`."""
        ...

    def prompt_group(self, prompt: Sequence[int]) -> Hashable:
        """Prompts of one group may share one encoding batch of `expander` (equal groups)."""
        ...

    def encode_rows(self) -> int:
        """The most prompts of one group the engine encodes in one forward pass of `expander`."""
        ...

    def explore_rows(self, tokens: int) -> int:
        """How many prompts of up to `tokens` cache slots each one `expander` may hold (>= 1)."""
        ...

    def combines_batches(self) -> bool:
        """Whether one `expander` may hold several encoding batches (`batches`)."""
        ...


@runtime_checkable
class Backend(PrefixSharing, Protocol):
    """An engine that turns token ids into evidence.

    Attributes
    ----------
    name : str
        "hf", "vllm" or "openai".
    version : str
        Engine version (transformers / vllm / the server's reported version); part of the model key where it can
        change numbers.
    tokenizer : Any
        The Hugging Face tokenizer whose ids the engine reads.
    bos_id, pad_id : int | None
        BOS prepended by the scoring BOS policy (None: none), and the id used for padding.
    stop_ids : frozenset[int]
        Ids that end a generation (tokenizer EOS and the model's generation-config EOS ids).
    capabilities : frozenset[str]
        Subset of {SCORE, PLL, TOP_K, SAMPLE} (a hosted chat API: CHAT, CHAT_LOGPROBS).
    max_top_k : int | None
        The largest K `top_k` can return (None: the vocabulary).
    batch : bool
        As its prepared model declares it (`Prepared.batch`): a chat API's `chat` then sends all it is given as one
        provider batch, so the protocols hand it everything pending at once.
    """

    name: str
    version: str
    tokenizer: Any
    bos_id: int | None
    pad_id: int
    stop_ids: frozenset[int]
    capabilities: frozenset[str]
    max_top_k: int | None
    batch: bool

    def score(self, sequences: Sequence[Sequence[int]], groups: Sequence[Any] | None = None) -> list[np.ndarray]:
        """Per-token log-probabilities: out[j][i] = log p(seq_j[i+1] | seq_j[:i+1]) for i in 0..len_j-2 (float64).

        The first token (BOS, or the first real token where the policy is "none") is context only. `groups`:
        optional hint that sequences with equal group share a prefix (engines may reuse it); never changes numbers
        beyond the dtype's tolerance.
        """
        ...

    def pll(self, sequences: Sequence[Sequence[int]], word_ids: Sequence[Sequence[int | None]], scheme: str
            ) -> list[np.ndarray]:
        """Masked-LM pseudo-log-likelihood per token under `scheme` ("original" or "within_word_l2r")."""
        ...

    def top_k(self, prefixes: Sequence[Sequence[int]], k: int) -> TopK:
        """Top-`k` next tokens after each prefix; `k` <= `max_top_k` (else `Unsupported`)."""
        ...

    def expander(self, prompts: Sequence[Sequence[int]], k: int, *, batches: Sequence[int] | None = None
                 ) -> Expander:
        """An `Expander` over `prompts` (see `Expander`). `batches`: sizes of consecutive runs of `prompts` that
        share one `prompt_group` (engines that encode prompts themselves may encode each run in one pass); a hint
        that never changes numbers beyond the dtype's rounding."""
        ...

    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[Sequence[int]], settings: SamplingSettings
               ) -> list[list[Sample]]:
        """len(seeds[i]) samples of prompts[i]; sample j of prompt i depends only on (prompt i, seeds[i][j])."""
        ...

    def close(self) -> None:
        """Release the engine (processes, GPU memory, connections)."""
        ...


class EngineBase(PreparedBase):
    """The neutral `PrefixSharing` and `expander` of an engine without a prompt cache of its own (each level
    re-submits prompt + path through `top_k`; engines with prefix caching, such as vLLM, make the repeat free).
    A loaded backend also stands for its prepared model (`verify`: nothing to check in-process)."""

    #: prompts explored together by one `expander` when nothing caps them
    UNCAPPED = 1 << 30
    #: how forced-choice evidence is computed (recorded in each run's parameters)
    label = "stateless-expander(top_k per trie level)"

    def share_prefix(self, reference: Sequence[int]) -> None:
        return None

    def prompt_group(self, prompt: Sequence[int]) -> Hashable:
        return 0

    def encode_rows(self) -> int:
        return self.UNCAPPED

    def explore_rows(self, tokens: int) -> int:
        return self.UNCAPPED

    def combines_batches(self) -> bool:
        return True

    def expander(self, prompts: Sequence[Sequence[int]], k: int, *, batches: Sequence[int] | None = None
                 ) -> Expander:
        return StatelessExpander(self, prompts, k)


class StatelessExpander:
    """The default `Expander`: every level re-submits prompt + path through `backend.top_k` (engines with prefix
    caching, such as vLLM, make the repeated prompt free)."""

    def __init__(self, backend: Backend, prompts: Sequence[Sequence[int]], k: int) -> None:
        self.backend, self.prompts, self.k = backend, [list(p) for p in prompts], k

    def root(self) -> TopK:
        return self.backend.top_k(self.prompts, self.k)

    def step(self, nodes: Sequence[tuple[int, tuple[int, ...]]]) -> TopK:
        return self.backend.top_k([self.prompts[row] + list(path) for row, path in nodes], self.k)


def require(backend_name: str, capabilities: frozenset[str], needs: frozenset[str], task: str,
            why: dict[str, str] | None = None) -> None:
    """Raise `Unsupported` (one line) when a backend lacks a capability `task` needs (`needs`: capability names of
    this module; `task`: what is refused, as the message names it, e.g. "choice-exact" or "pll"; `why`: the
    engine's reason per capability it lacks, its module's `WHY_NOT`, said where given)."""
    missing = frozenset(needs) - capabilities
    if missing:
        reasons = [why[m] for m in sorted(missing) if why and m in why]
        because = f": {'; '.join(reasons)}" if reasons else ""
        raise Unsupported(f"backend {backend_name!r} cannot run {task}: it has no {', '.join(sorted(missing))}"
                          f"{because} (it offers {', '.join(sorted(capabilities)) or 'nothing'})")
