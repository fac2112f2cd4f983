"""The Hugging Face backend (`--backend hf`, the default): in-process transformers behind the `Backend` interface.

`prepare` resolves the model (`loading.prepare_model`: built-in alias, local folder, `.gguf` file or hub id; dtype,
`--quant nf4`, pre-quantized checkpoints, `--revision`, `--model-arg`, `--device` including `auto`), loads the
tokenizer and computes the model key without loading any weights. `Prepared.load()` loads the weights and returns
an `HFBackend`, whose methods are the fast paths of the protocols:

- `score`: `prefix_scoring.score_causal_grouped` (a group's common prefix runs once; output head only at the
  scored positions);
- `pll`: `scoring.score_masked` (Salazar et al. 2020 `original`, Kauf and Ivanova 2023 `within_word_l2r`);
- `top_k` and `expander`: top-K of the output head over a KV cache; the expander continues the template's shared
  prefix (`kvcache.SharedPrefixes`, declared with `share_prefix`) and walks trie levels as tree attention
  (`tree.TreeLevels`, `tree.HFExpander`);
- `sample`: `sampling.sample_shared_prefixes` / `sample_from_state` (one generator per seed);
- `PrefixSharing`: prompts grouped by shared-prefix cut and padded suffix length (`prompt_group`), `ENCODE_ROWS`
  suffixes per encoding pass, explorations capped by a 2 GiB key/value cache (`explore_rows`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from ...errors import UsageError
from ..base import (PLL, SAMPLE, SCORE, TOP_K, BackendOptions, EngineBase, PreparedBase, Sample, SamplingSettings, TopK,
                    Unsupported)
from ..models import bos_token_id, stop_token_ids

if TYPE_CHECKING:  # torch and numpy: imported where the engine runs, never when the registry reads this module
    import numpy as np

    from .tree import HFExpander

NAME = "hf"
CAPABILITIES = frozenset({SCORE, PLL, TOP_K, SAMPLE})
#: no shortcut flags of engine settings (`base.Flag`): its settings are --dtype, --quant, --device, --revision,
#: --model-arg and --batch-tokens
FLAGS = ()
#: up to this many new tokens, the samples of one prompt are drawn by distinct prefix (forced choice); longer
#: generations diverge quickly and use one cached row per sample
SHARED_PREFIX_MAX_TOKENS = 16
#: a prompt's own tokens (after the shared prefix) are right-padded to a multiple of this many
SUFFIX_BUCKET = 8
#: samples of one prompt drawn in one batch (rows of the KV cache) when the prompt continues a shared prefix
SAMPLE_ROWS = 256
#: the key/value cache one exact-mode exploration may hold (`explore_rows`): 2 GiB
EXPLORE_CACHE_BYTES = 2 << 30
#: at most this many prompts (of one `prompt_group`) have their suffixes encoded in one forward pass
ENCODE_ROWS = 16
#: how prompts are computed, recorded in each run's parameters: the template's shared prefix computed once and
#: continued (`kvcache.SharedPrefixes`, suffixes `ENCODE_ROWS` per pass into one preallocated cache), exact-mode trie
#: levels as tree attention (`tree.TreeLevels`) shared by the prompts explored together
LABEL = f"shared-prefix-v1(bucket={SUFFIX_BUCKET},encode={ENCODE_ROWS})+tree-levels-v3"


def installed() -> tuple[bool, str]:
    """(True, transformers version): transformers is a core dependency. Its installed version is read from its
    distribution's metadata (importing it costs a second or more, and validating a collection, or a plan of them,
    needs only to know it is there)."""
    from importlib import metadata

    try:
        return True, f"transformers {metadata.version('transformers')}"
    except metadata.PackageNotFoundError:  # pragma: no cover - a core dependency
        return False, "transformers is not installed"


class Options(BaseModel):
    """The hf backend takes no engine arguments: its settings are --dtype, --quant, --device, --revision,
    --model-arg and --batch-tokens."""

    model_config = ConfigDict(extra="forbid")


def validate_options(options: BackendOptions) -> None:
    """Refuse what this backend cannot do, in one line, before anything is read or loaded: a --device that is not
    a device here; engine arguments (the hf backend takes none; its settings are --dtype, --quant, --device,
    --revision, --model-arg, --batch-tokens)."""
    if options.device and options.device != "auto":  # the default can always be resolved: no torch imported for it
        from .loading import resolve_device

        resolve_device(options.device)
    if options.engine_args:
        raise UsageError(f"--backend hf takes no engine arguments (got {', '.join(k for k, _ in options.engine_args)})"
                         f"; they belong to --backend vllm / openai")


def prepare(model: str, options: BackendOptions, *, kind: str | None = None) -> HFPrepared:
    """Resolve `model` and compute its key without loading weights (`loading.prepare_model`)."""
    from .loading import prepare_model

    prepared = prepare_model(model, dtype=options.dtype, quant=options.quant, device=options.device,
                             kind=kind, revision=options.revision, model_args=dict(options.model_args))
    return HFPrepared(prepared, options.batch_tokens)


class HFPrepared(PreparedBase):
    """A resolved model (tokenizer and identity; no weights yet). Wraps `loading.PreparedModel` or, for tests and
    benchmarks that reuse one model, an already `loading.LoadedModel`."""

    max_top_k = None  # the whole vocabulary
    label = LABEL

    def __init__(self, inner: Any, batch_tokens: int = 4096) -> None:
        self.inner, self.batch_tokens = inner, batch_tokens
        self.spec, self.tokenizer, self.device = inner.spec, inner.tokenizer, inner.device

    @property
    def provenance(self) -> dict[str, Any]:
        """The measured default dtype (`dtype_choice`) when --dtype was not given."""
        return self.inner.provenance

    def load(self) -> HFBackend:
        from .loading import LoadedModel

        loaded = self.inner if isinstance(self.inner, LoadedModel) else self.inner.load()
        return HFBackend(loaded, batch_tokens=self.batch_tokens)


class HFBackend(EngineBase):
    """`Backend` over a loaded transformers model (see the module docstring).

    Parameters
    ----------
    loaded : loading.LoadedModel
        The model, its tokenizer, spec and device.
    batch_tokens : int
        Token budget of one padded scoring batch (`--batch-tokens`); halved automatically on out-of-memory.
    """

    name = NAME
    capabilities = CAPABILITIES
    max_top_k = None
    label = LABEL

    def __init__(self, loaded: Any, batch_tokens: int = 4096) -> None:
        import transformers

        self.loaded, self.model, self.tokenizer = loaded, loaded.model, loaded.tokenizer
        self.spec, self.device, self.batch_tokens = loaded.spec, loaded.device, batch_tokens
        self.version = transformers.__version__
        tok = self.tokenizer
        self.stop_ids = frozenset(stop_token_ids(getattr(self.model, "generation_config", None), tok))
        self.bos_id = None if self.spec.kind == "masked" else bos_token_id(tok)[0]
        fallback = self.bos_id if self.bos_id is not None else min(self.stop_ids, default=0)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else fallback
        # choice prompts pad with the smallest stop id where the tokenizer has no pad token
        self._choice_pad = tok.pad_token_id if tok.pad_token_id is not None else min(self.stop_ids, default=0)
        self._prefixes = None

    # ------------------------------------------------------------------ scoring
    def score(self, sequences: Sequence[Sequence[int]], groups: Sequence[Hashable] | None = None) -> list[np.ndarray]:
        """Per-token log-probabilities (see `Backend.score`); members of a group share their prefix's forward."""
        from .prefix_scoring import score_causal_grouped

        if self.kind == "masked":
            raise Unsupported("a masked LM has no causal scores: use pll")
        groups = list(groups) if groups is not None else list(range(len(sequences)))
        return score_causal_grouped(self.model, sequences, groups, max_tokens=self.batch_tokens, pad_id=self.pad_id)

    def pll(self, sequences: Sequence[Sequence[int]], word_ids: Sequence[Sequence[int | None]], scheme: str
            ) -> list[np.ndarray]:
        """Masked-LM pseudo-log-likelihood per scored token (see `scoring.score_masked`); threads as in `score`."""
        from .scoring import score_masked

        if self.kind != "masked":
            raise Unsupported("pseudo-log-likelihood needs a masked LM")
        tok = self.tokenizer
        return score_masked(self.model, sequences, word_ids, scheme=scheme, mask_id=tok.mask_token_id,
                            pad_id=tok.pad_token_id or 0, max_tokens=self.batch_tokens)

    # ------------------------------------------------------------------ top-K
    def top_k(self, prefixes: Sequence[Sequence[int]], k: int) -> TopK:
        """Top-`k` raw logits after each prefix (each encoded from its first token, left-padded)."""
        import torch

        from .kvcache import encode_prompts
        from .tree import head_top_k

        with torch.inference_mode(), self._gqa():
            state = encode_prompts(self.model, prefixes, self._choice_pad)
            return head_top_k(self.model, state.last_hidden, k)

    def share_prefix(self, reference: Sequence[int]) -> None:
        """Declare the token ids every prompt of this collection begins with (the template's shared prefix):
        `expander` and `sample` then compute it once and continue it (`kvcache.SharedPrefixes`)."""
        from .kvcache import SharedPrefixes

        self._prefixes = SharedPrefixes(self.model, self._choice_pad, reference, bucket=SUFFIX_BUCKET)

    def encode_rows(self) -> int:
        """At most `ENCODE_ROWS` prompts of one group are encoded per forward pass."""
        return ENCODE_ROWS

    def prompt_group(self, prompt: Sequence[int]) -> Hashable:
        """Prompts with equal groups can share one `expander` (same shared-prefix cut and padded suffix length)."""
        return self._prefixes.group_key(prompt) if self._prefixes is not None else 0

    def combines_batches(self) -> bool:
        """Whether one `expander` may hold several encoding batches (`batches`): where every cache layer is a plain
        growing one (`kvcache.plain_layers`; sliding-window layers keep their own cache, which is not merged) and
        trie levels run as tree attention (the copy-based levels of other attention implementations copy a
        prompt's whole cache per live node, so they stay at one batch)."""
        from .tree import tree_attention_supported
        from .kvcache import plain_layers

        return plain_layers(self.model.config) and tree_attention_supported(self.model)

    def explore_rows(self, tokens: int) -> int:
        """How many prompts of up to `tokens` cache slots each one `expander` may hold: as many as fit a key/value
        cache of `EXPLORE_CACHE_BYTES` (at least 1). Bytes per slot are read from the shared prefix's real cache
        where one is declared (compressed or shared layers count as they are stored), else estimated from the
        model's layer count, key/value heads, head size and dtype."""
        import torch

        if self._prefixes is not None and self._prefixes.reference:
            layers = self._prefixes.prefix_state(self._prefixes.reference[:1]).cache.layers
            per_slot = sum(t[0, ..., 0, :].numel() * t.element_size() for layer in layers
                           for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                           if isinstance(t, torch.Tensor) and t.dim() >= 3 and t.shape[-2] > 0)
            if per_slot:
                return max(1, EXPLORE_CACHE_BYTES // (per_slot * max(1, tokens)))
        text = self.model.config.get_text_config(decoder=True)
        try:
            heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
            head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
            layers = text.num_hidden_layers
        except AttributeError:  # a config that names these otherwise: the cache size is unknown, no cap
            return 1 << 30
        itemsize = torch.finfo(self.model.dtype).bits // 8
        per_slot = layers * 2 * heads * head_dim * itemsize
        return max(1, EXPLORE_CACHE_BYTES // (per_slot * max(1, tokens)))

    def expander(self, prompts: Sequence[Sequence[int]], k: int, *, tree: bool | None = None,
                 batches: Sequence[int] | None = None) -> HFExpander:
        """Incremental top-K down the answer tries of `prompts`. `batches`: sizes of consecutive runs of prompts
        encoded in one forward each (each run one `prompt_group` when a prefix is shared); default: all at once."""
        import torch

        from .kvcache import concat_states, encode_prompts
        from .tree import HFExpander

        sizes = list(batches) if batches is not None else [len(prompts)]
        if sum(sizes) != len(prompts) or min(sizes) < 1:
            raise ValueError(f"batches {sizes} do not partition {len(prompts)} prompts")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        parts = [prompts[start:start + size] for start, size in zip(starts, sizes)]
        with torch.inference_mode(), self._gqa():
            if self._prefixes is not None:
                state = self._prefixes.encode_batches(parts)
            else:
                state = concat_states([encode_prompts(self.model, part, self._choice_pad) for part in parts],
                                      self.model.config)
        return HFExpander(self.model, state, k, tree, context=self._gqa)

    # ------------------------------------------------------------------ sampling
    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[Sequence[int]], settings: SamplingSettings
               ) -> list[list[Sample]]:
        """len(seeds[i]) samples of prompts[i] (see `Backend.sample`).

        With a shared prefix declared (forced choice), each prompt continues it and its samples share the prompt's
        cache (by distinct generated prefix up to `SHARED_PREFIX_MAX_TOKENS` new tokens, else one row per sample,
        `SAMPLE_ROWS` at a time); otherwise all prompts are encoded together (left-padded) and every sample gets
        its own row.
        """
        import torch

        from .kvcache import encode_prompts
        from .sampling import sample_from_state, sample_shared_prefixes

        params = settings
        stops = set(self.stop_ids)
        out: list[list[Sample]] = []
        with torch.inference_mode():  # no native_gqa here: sampling never ran under it (identical numbers)
            if self._prefixes is not None:
                for prompt, own in zip(prompts, seeds):
                    state = self._prefixes.encode([prompt])
                    drawn = []
                    for start in range(0, len(own), SAMPLE_ROWS):
                        batch = list(own[start:start + SAMPLE_ROWS])
                        if settings.max_new_tokens <= SHARED_PREFIX_MAX_TOKENS and not settings.min_new_tokens:
                            drawn += sample_shared_prefixes(self.model, state, 0, batch, params, stops)
                        else:
                            drawn += sample_from_state(self.model, state.select([0] * len(batch)), batch, params,
                                                       stops, self._choice_pad)
                    out.append(drawn)
                return out
            state = encode_prompts(self.model, prompts, self.pad_id)
            rows = [i for i, own in enumerate(seeds) for _ in own]
            flat = [int(s) for own in seeds for s in own]
            drawn = sample_from_state(self.model, state.select(rows), flat, params, stops, self.pad_id)
        it = iter(drawn)
        return [[next(it) for _ in own] for own in seeds]

    def close(self) -> None:
        self._prefixes = None

    def _gqa(self):
        import torch

        from .kvcache import native_gqa

        device = self.device if isinstance(self.device, torch.device) else torch.device(str(self.device))
        return native_gqa(device)


