"""`runners collect`: dataset -> stimuli -> pending requests -> model -> warehouse, resumable and idempotent.

Order of work: validate every argument and find the stimuli before loading any model; register the model and the
run; skip requests already stored for this model; write chunk by chunk; mark the run finished (or failed /
interrupted).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import loaders
from ..loaders.errors import DataError
from ..schema import Stimulus
from ..warehouse import Warehouse
from ..engines.base import BackendOptions, require
from ..engines.hf.loading import model_row
from .protocols import protocols_for
from .requests import SCORING_VERSION, score_requests
from .score_collect import collect_scores, pending_chunks, pending_requests

PLL_SCHEMES = ("original", "within_word_l2r")

#: sampling defaults per protocol: the contextual invariance paper's forced choice, and the misgendering
#: meta-evaluation's open generation (5 continuations of exactly 50 tokens, top_k 50, top_p 0.95)
SAMPLING_DEFAULTS: dict[str, dict[str, Any]] = {
    "choice": {"samples": 200, "temperature": 0.5, "top_k": 40, "top_p": 1.0, "max_new_tokens": 6,
               "min_new_tokens": 0},
    "gen": {"samples": 5, "temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_new_tokens": 50,
            "min_new_tokens": None},  # None: = max_new_tokens
    # metaprompting (runners/metaprompt.py): the choice settings, with room for multi-token nouns as answers
    "meta": {"samples": 200, "temperature": 0.5, "top_k": 40, "top_p": 1.0, "max_new_tokens": 8,
             "min_new_tokens": 0},
}
#: samples generated together in one batch (rows of the KV cache) by the gen protocol
GEN_ROWS_PER_BATCH = 64


@dataclass
class CollectConfig:
    dataset: str
    protocol: str | None = None
    model: str = "smollm2-135m"
    backend: str = "hf"
    dtype: str | None = None
    quant: str = "none"
    device: str | None = None
    revision: str | None = None       # hub revision (branch, tag or commit)
    model_args: dict[str, str] = field(default_factory=dict)   # --model-arg key=value (constructor arguments)
    engine_args: dict[str, Any] = field(default_factory=dict)  # backend settings (vllm / openai), passed through
    db: str = "warehouse/biaslab.duckdb"
    data_dir: str | None = None
    limit: int | None = None
    pll: str = "original"
    max_tokens: int = 4096
    chunk_size: int = 256
    loader_options: dict[str, Any] = field(default_factory=dict)
    # choice protocol (the contextual invariance paper's settings are the defaults)
    mode: str = "exact"
    # sampling settings: None = the protocol's default (SAMPLING_DEFAULTS)
    samples: int | None = None
    seed: int = 0
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    min_new_tokens: int | None = None   # gen protocol: stop tokens suppressed this long (default: max_new_tokens)
    k_store: int = 64
    prompt: str = "forced_choice_v1"
    prompt_batch: int = 96            # exact mode: prompts explored together (choice_collect.DEFAULT_PROMPT_BATCH)
    threads: int | None = None        # torch CPU threads; None = every core in this process's CPU affinity
    shard: str | None = None          # "i/n": this job collects shard i (0-based) of n
    out_shard: str | None = None      # folder for shard warehouses (then --db is not used)
    accept_modified: bool = False     # load dataset files that differ from their pinned sha256 (as modified copies)
    notes: list[str] = field(default_factory=list)  # lines for the command output (e.g. modified files accepted)

    def __post_init__(self) -> None:
        from ..loaders.options import pop_flag

        self.accept_modified, self.loader_options = pop_flag(  # also accepted as -o accept_modified=true
            self.loader_options, "accept_modified", self.accept_modified)
        protocol = self.protocol or (protocols_for(self.dataset) or ("prob",))[0]
        for name, value in SAMPLING_DEFAULTS.get(protocol, SAMPLING_DEFAULTS["choice"]).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.min_new_tokens is None:
            self.min_new_tokens = self.max_new_tokens
        if protocol == "meta" and self.prompt == "forced_choice_v1":  # the default --prompt means the protocol's own
            self.prompt = "metaprompt_v1"

    def validate(self) -> None:
        """Refuse absurd parameters before any model is loaded."""
        loaders.get(self.dataset)  # unknown dataset -> ValueError naming the known ones
        module = self.backend_module()  # unknown or not installed: one line, before anything is read or loaded
        if self.backend == "hf":
            from ..engines.hf.loading import resolve_device

            resolve_device(self.device)  # --device cuda without a GPU: one line, before anything is read or loaded
            if self.engine_args:
                raise ValueError(f"--backend hf takes no engine arguments (got {', '.join(sorted(self.engine_args))}"
                                 f"); they belong to --backend vllm / openai")
        elif hasattr(module, "validate_options"):
            module.validate_options(self.backend_options())
        supported = protocols_for(self.dataset)
        if not supported:
            raise ValueError(f"dataset {self.dataset}: no runner protocol is available for it yet")
        self.protocol = self.protocol or supported[0]
        if self.protocol not in supported:
            raise ValueError(f"--protocol {self.protocol} is not available for {self.dataset}; use one of {supported}")
        if self.protocol != "gen" and self.min_new_tokens:
            raise ValueError("--min-new-tokens applies to --protocol gen only")
        if self.protocol == "gen":
            self.sampling_params().validate()
            if self.samples < 1:
                raise ValueError(f"--samples must be at least 1, got {self.samples}")
            if not 0 <= self.min_new_tokens <= self.max_new_tokens:
                raise ValueError(f"--min-new-tokens must be between 0 and --max-new-tokens ({self.max_new_tokens})")
        if self.pll not in PLL_SCHEMES:
            raise ValueError(f"--pll must be one of {PLL_SCHEMES}, got {self.pll!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be at least 1, got {self.limit}")
        if (self.shard is None) != (self.out_shard is None):
            raise ValueError("--shard i/n and --out-shard DIR go together")
        if self.shard is not None:
            self.shard_position()
        if self.max_tokens < 8 or self.chunk_size < 1 or self.prompt_batch < 1:
            raise ValueError("--batch-tokens must be at least 8, --chunk-size and --prompt-batch at least 1")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {self.threads}")
        if self.protocol in ("choice", "meta"):
            if self.mode not in ("exact", "sample"):
                raise ValueError(f"--mode must be exact or sample, got {self.mode!r}")
            self.sampling_params().validate()
            if self.mode == "exact":
                if self.top_p != 1.0:
                    raise ValueError("--mode exact computes top-k / temperature sampling: use --top-p 1.0 "
                                     "(or --mode sample)")
                if not 1 <= self.top_k <= self.k_store:
                    raise ValueError(f"--top-k must be between 1 and --k-store ({self.k_store}) in exact mode")
                if self.k_store < 64:
                    raise ValueError("--k-store must be at least 64 (DESIGN.md section 4)")
            elif self.samples < 1:
                raise ValueError(f"--samples must be at least 1, got {self.samples}")
            from .prompting import PromptSpec

            if self.protocol == "meta":
                from .metaprompt import MetaPromptSpec

                MetaPromptSpec.load(self.prompt)
            else:
                PromptSpec.load(self.prompt)
        require(module.NAME, module.CAPABILITIES, self.capability_protocol())

    def capability_protocol(self, kind: str = "causal") -> str:
        """The protocol name `backends.base.require` checks: prob (pll for a masked LM), choice-exact,
        choice-sample or gen."""
        if self.protocol in ("choice", "meta"):
            return f"choice-{self.mode}"
        if self.protocol == "prob" and kind == "masked":
            return "pll"
        return self.protocol or "prob"

    def backend_module(self):
        """The backend's module (`backends.get`), refused in one line when unknown or its engine is missing."""
        from .. import engines as backends

        module = backends.get(self.backend)
        ok, why = module.installed()
        if not ok:
            raise ValueError(f"--backend {self.backend} is not available: {why}")
        return module

    def backend_options(self) -> BackendOptions:
        """The engine choices as `BackendOptions` (model and engine arguments in sorted order)."""
        return BackendOptions(dtype=self.dtype, quant=self.quant, device=self.device, revision=self.revision,
                              model_args=tuple(sorted(self.model_args.items())),
                              engine_args=tuple(sorted(self.engine_args.items())), batch_tokens=self.max_tokens)

    def shard_position(self) -> tuple[int, int]:
        """(index, count) from "i/n", 0 <= i < n."""
        try:
            index, count = (int(x) for x in str(self.shard).split("/"))
        except ValueError:
            raise ValueError(f"--shard must look like i/n (e.g. 0/4), got {self.shard!r}") from None
        if not (count >= 1 and 0 <= index < count):
            raise ValueError(f"--shard {self.shard}: need 0 <= i < n")
        return index, count

    def database(self) -> Path:
        """The warehouse this collection writes: --db, or the shard's own file in --out-shard."""
        if self.out_shard is None:
            return Path(self.db)
        index, count = self.shard_position()
        return Path(self.out_shard) / f"shard-{index:04d}-of-{count:04d}.duckdb"

    def sampling_params(self):
        from ..engines.hf.sampling import SamplingParams

        return SamplingParams(self.temperature, self.top_k, self.top_p, self.max_new_tokens)


def shard_of(stimulus_id: str, count: int) -> int:
    """Shard of a stimulus: its content hash modulo the shard count (stable across machines and runs)."""
    return int(stimulus_id, 16) % count


def shard_stimuli(stimuli: list[Stimulus], index: int, count: int) -> list[Stimulus]:
    return [s for s in stimuli if shard_of(s.stimulus_id, count) == index]


def stimuli_from_warehouse(wh: Warehouse, dataset: str) -> list[Stimulus]:
    """Rebuild `Stimulus` objects from stored rows (same content, hence the same stimulus_id)."""
    cursor = wh.con.execute("SELECT * FROM stimuli WHERE dataset = ? ORDER BY item_id, stimulus_id", [dataset])
    columns = [d[0] for d in cursor.description]
    out = []
    for row in cursor.fetchall():
        record = dict(zip(columns, row))
        sid = record.pop("stimulus_id")
        record["attrs"] = json.loads(record["attrs"]) if record["attrs"] else {}
        record = {k: v for k, v in record.items() if v is not None}
        stimulus = Stimulus.model_validate(record)
        if stimulus.stimulus_id != sid:
            raise DataError(wh.path, f"stored stimulus {sid} does not round-trip (got {stimulus.stimulus_id})",
                            field="stimulus_id")
        out.append(stimulus)
    return out


def dataset_stimuli(wh: Warehouse, config: CollectConfig) -> list[Stimulus]:
    """Load the dataset from the data directory into `stimuli` (idempotent); without the files, use stored rows.

    Either way the stimuli come back in one canonical order (item_id, then stimulus_id), so `--limit N` and chunk
    boundaries select the same stimuli whichever source was used.
    """
    info = loaders.get(config.dataset)
    root = loaders.default_data_dir(config.data_dir)
    if info.path(root).is_dir():
        loaded = info.load_verified(root, accept_modified=config.accept_modified, **config.loader_options)
        config.notes.extend(loaded.notes())
        stimuli = loaded.stimuli
        wh.append("stimuli", [s.to_row() for s in stimuli])
        return sorted(stimuli, key=lambda s: (s.item_id, s.stimulus_id))
    stored = stimuli_from_warehouse(wh, info.name)
    if not stored:
        raise DataError(info.path(root), f"dataset {config.dataset} is neither in the data directory nor in "
                                         f"{wh.path} (set --data-dir or BIASLAB_DATA)")
    return stored


@dataclass
class CollectResult:
    run_id: str
    model_key: str
    stimuli: int
    requests: int
    pending: int
    added: int
    note: str = ""


def collect(config: CollectConfig, *, progress: Callable[[int, int], Callable[[int], None]] | None = None,
            loaded=None) -> CollectResult:
    """Run one collection. `progress(total, done)` returns a callback advanced by the items just written.

    `loaded` (a `loading.LoadedModel` or a `Backend`) skips model loading, for tests and benchmarks that reuse
    one model. Otherwise the backend's capabilities are checked first (`validate`), the model is resolved without
    weights (`prepare`), and the weights are loaded only when some request is pending.
    """
    config.validate()
    # shared: the DuckDB write lock is held only while something is written (each chunk's append), so `biaslab sql`,
    # `info`, `metrics` and `report` can read the warehouse while the model computes
    with Warehouse.open(config.database(), shared=True) as wh:
        stimuli = dataset_stimuli(wh, config)
        if config.dataset == "tango":  # prompts only: templates built from generations are not prompts
            stimuli = [s for s in stimuli if s.options is None]
        if config.limit is not None:
            stimuli = stimuli[: config.limit]
        if not stimuli:
            raise ValueError(f"dataset {config.dataset}: no stimuli to collect")
        if config.shard is not None:
            stimuli = shard_stimuli(stimuli, *config.shard_position())
        prepared = (_given(loaded, config) if loaded is not None
                    else _Handle(config.backend_module().prepare(config.model, config.backend_options())))
        require(config.backend, _capabilities(prepared, config), config.capability_protocol(prepared.spec.kind))
        _check_k_store(config, prepared.prepared)
        try:
            if config.protocol == "choice":
                return _collect_choice(wh, config, stimuli, prepared, progress)
            if config.protocol == "meta":
                from .metaprompt import collect_meta

                return collect_meta(wh, config, stimuli, prepared, progress)
            if config.protocol == "gen":
                return _collect_generations(wh, config, stimuli, prepared, progress)
            return _collect_scores(wh, config, stimuli, prepared, progress)
        finally:
            if loaded is None and prepared.backend is not None:
                prepared.backend.close()


def _check_k_store(config: CollectConfig, prepared) -> None:
    """Refuse exact mode when --k-store exceeds the K the engine returns (`max_top_k`: the server's probed limit,
    vLLM's max_logprobs), before any run row is written or any engine starts."""
    k = getattr(prepared, "max_top_k", None)
    if config.protocol in ("choice", "meta") and config.mode == "exact" and k is not None and config.k_store > k:
        raise ValueError(f"--k-store {config.k_store} exceeds the {k} top log-probabilities --backend "
                         f"{config.backend} returns here; lower --k-store (>= 64) or raise the engine's limit")


class _Handle:
    """A prepared model plus the backend once loaded (`backend`: None until some request is pending)."""

    def __init__(self, prepared, backend=None) -> None:
        self.prepared, self.backend = prepared, backend
        self.spec, self.tokenizer = prepared.spec, prepared.tokenizer
        self.model_key = prepared.spec.model_key
        self.device = getattr(prepared, "device", None)

    def load(self):
        if self.backend is None:
            self.backend = self.prepared.load()
        return self.backend


def _given(loaded, config: CollectConfig) -> "_Handle":
    """A model passed in: a `loading.LoadedModel` runs through the Hugging Face backend; a `Backend` as is."""
    from ..engines.hf.loading import LoadedModel

    if isinstance(loaded, LoadedModel):
        from ..engines.hf.backend import HFPrepared

        prepared = HFPrepared(loaded, config.max_tokens)
        return _Handle(prepared, prepared.load())
    return _Handle(loaded, loaded)


def _capabilities(handle: "_Handle", config: CollectConfig) -> frozenset[str]:
    if handle.backend is not None:
        return handle.backend.capabilities
    return config.backend_module().CAPABILITIES


def _collect_scores(wh: Warehouse, config: CollectConfig, stimuli: list[Stimulus], prepared,
                    progress) -> CollectResult:
    note = ""
    if config.dataset == "tango":
        stimuli, note = _tango_templates(wh, prepared.model_key, stimuli)
    scheme = config.pll if prepared.spec.kind == "masked" else "causal"
    requests = score_requests(stimuli, config.protocol, scheme)
    register_model(wh, prepared.spec)
    todo = pending_requests(wh, prepared.model_key, requests)
    run_id = _start_run(wh, config, prepared, {"scheme": scheme, "protocol_version": f"{SCORING_VERSION}:{scheme}"})
    with _finishing(wh, run_id, "sequence_scores") as stats:
        backend = _load_if_pending(wh, prepared, todo)
        advance = progress(len(requests), len(requests) - len(todo)) if progress else None
        chunks = pending_chunks(requests, todo, config.chunk_size)
        stats["added"] = collect_scores(wh, backend, chunks, run_id=run_id, on_progress=advance)
    return CollectResult(run_id, prepared.model_key, len(stimuli), len(requests), len(todo), stats["added"], note)


def register_model(wh: Warehouse, spec) -> None:
    """The spec's `models` row, with the columns this warehouse's `models` table has (the backend columns come
    with a schema migration; older files keep the identity columns)."""
    columns = {d[0] for d in wh.con.execute("SELECT * FROM models LIMIT 0").description}
    wh.append("models", [{k: v for k, v in model_row(spec).items() if k in columns}])


def _start_run(wh: Warehouse, config: CollectConfig, prepared, extra: dict[str, Any],
               generation_config: dict[str, Any] | None = None) -> str:
    if config.shard is not None:
        _stamp_shard(wh, config, prepared.model_key, extra)
    from ..engines.threads import use_threads

    params = {k: v for k, v in vars(config).items() if k not in ("db", "notes")}
    params["threads"] = use_threads(config.threads)  # the count actually used, in the run's provenance
    params["backend_version"] = prepared.spec.backend_version
    return wh.start_run(f"runners collect --dataset {config.dataset}", {**params, **extra},
                        generation_config=generation_config, device=str(prepared.device or config.backend),
                        model_key=prepared.model_key)


def _stamp_shard(wh: Warehouse, config: CollectConfig, model_key: str, extra: dict[str, Any]) -> None:
    """Record what a shard file holds, so that `biaslab warehouse merge` can refuse mixed shards."""
    index, count = config.shard_position()
    identity = {"dataset": config.dataset, "protocol": config.protocol, "model_key": model_key,
                "protocol_version": extra.get("protocol_version"), "count": count, "index": index,
                "limit": config.limit}
    previous = wh.get_meta("shard")
    if previous is not None and json.loads(previous) != identity:
        raise ValueError(f"{wh.path} already holds shard {previous}; use another --out-shard folder")
    wh.set_meta("shard", json.dumps(identity, sort_keys=True))


def _load_if_pending(wh: Warehouse, prepared: "_Handle", pending):
    """The backend, its weights loaded only when some request is pending (a rerun with nothing to do loads
    nothing; then the handle's backend, possibly None, is returned and never called).

    The warehouse connection is released first: loading and computing take long, and readers may look meanwhile.
    """
    wh.release()
    if pending:
        return prepared.load()
    return prepared.backend


class RunInterrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, SIGHUP) received during a collection: the run ends 'interrupted'."""


@contextmanager
def _terminations_interrupt():
    """While collecting, SIGTERM and SIGHUP raise RunInterrupted (like Ctrl-C) so the run is marked and the chunk in
    flight rolled back; the previous handlers come back afterwards. Only the main thread can install handlers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise RunInterrupted(f"received {signal.Signals(signum).name}")

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _finishing(wh: Warehouse, run_id: str, table: str):
    """Mark the run finished, interrupted (Ctrl-C, SIGTERM, SIGHUP) or failed (any other exception: out of memory,
    disk full, a bug), with the rows it added to `table` (the protocol's evidence table; for a run that did not
    finish, its rows stored there under its run_id: the chunks committed before it stopped). A SIGKILL cannot be
    caught: `biaslab warehouse check` finds such runs by their dead process and `--repair` marks them
    interrupted."""
    import sys

    stats = {"added": 0}
    status = "failed"
    with _terminations_interrupt():
        try:
            yield stats
            status = "finished"
        except KeyboardInterrupt:  # includes RunInterrupted
            status = "interrupted"
            raise
        finally:
            try:
                if status != "finished":
                    stats["added"] = wh.con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?",
                                                    [run_id]).fetchone()[0]
                wh.finish_run(run_id, status=status, rows_added=stats["added"])
            except Exception as exc:  # e.g. the disk is still full: keep the original error, say what is left
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                print(f"biaslab: could not mark run {run_id[:8]} {status} ({reason}); "
                      f"`biaslab warehouse check --repair --db {wh.path}` marks it later", file=sys.stderr)


def choice_render_params(config: CollectConfig, params) -> dict:
    """The rendering parameters of a forced-choice request (part of its request id). In exact mode the explored
    trie depends on the settings through pruning, so each (temperature, top_k, k_store) is its own request."""
    if config.mode == "exact":
        return {"mode": "exact", "max_new_tokens": params.max_new_tokens, "k_store": config.k_store,
                "temperature": params.temperature, "top_k": params.top_k}
    return {"mode": "sample", "max_new_tokens": params.max_new_tokens}


def _collect_choice(wh: Warehouse, config: CollectConfig, stimuli: list[Stimulus], prepared,
                    progress) -> CollectResult:
    from .choice_collect import (ENGINE, choice_requests, collect_exact, collect_samples, pending_choice,
                                 pending_samples)
    from .prompting import PromptSpec

    spec = PromptSpec.load(config.prompt)
    params = config.sampling_params()
    render_params = choice_render_params(config, params)
    requests = choice_requests(stimuli, prepared.tokenizer, spec, render_params)
    register_model(wh, prepared.spec)
    if config.mode == "exact":
        todo = pending_choice(wh, prepared.model_key, requests)
    else:
        from ..engines.hf.sampling import sample_seed

        seeds = {(r.request_id, i): sample_seed(config.seed, r.request_id, i)
                 for r in requests for i in range(config.samples)}
        pending = pending_samples(wh, prepared.model_key, requests, config.samples, seeds, params)
        todo = [r for r, _ in pending]
    generation = {"do_sample": True, "temperature": params.temperature, "top_k": params.top_k,
                  "top_p": params.top_p, "max_new_tokens": params.max_new_tokens, "repetition_penalty": 1.0,
                  "mode": config.mode, "prompt_version": spec.version}
    version = f"{spec.version}:{json.dumps(render_params, sort_keys=True)}"
    if config.mode == "sample":
        version += f":seed={config.seed}:T={params.temperature}:k={params.top_k}:p={params.top_p}"
    run_id = _start_run(wh, config, prepared, {"protocol_version": version, "engine": ENGINE},
                        generation_config=generation)
    with _finishing(wh, run_id, "choice_requests" if config.mode == "exact" else "samples") as stats:
        backend = _load_if_pending(wh, prepared, todo)
        advance = progress(len(requests), len(requests) - len(todo)) if progress else None
        if config.mode == "exact":
            stats["added"] = collect_exact(wh, backend, todo, spec, params=params, k_store=config.k_store,
                                           chunk_size=max(1, min(config.chunk_size, 32)), run_id=run_id,
                                           prompt_batch=config.prompt_batch,
                                           on_progress=advance)
        else:
            stats["added"] = collect_samples(wh, backend, pending, seeds, spec, params=params, rows_per_batch=256,
                                             run_id=run_id, on_progress=advance)
    return CollectResult(run_id, prepared.model_key, len(stimuli), len(requests), len(todo), stats["added"])


def _collect_generations(wh: Warehouse, config: CollectConfig, stimuli: list[Stimulus], prepared,
                         progress) -> CollectResult:
    from .generation import GEN_VERSION, collect_generations, gen_requests, pending_generations

    params = config.sampling_params()
    requests = gen_requests(stimuli, params.max_new_tokens, config.min_new_tokens)
    register_model(wh, prepared.spec)
    pending = pending_generations(wh, prepared.model_key, requests, config.samples, config.seed, params)
    generation = {"do_sample": True, "temperature": params.temperature, "top_k": params.top_k,
                  "top_p": params.top_p, "max_new_tokens": params.max_new_tokens,
                  "min_new_tokens": config.min_new_tokens, "repetition_penalty": 1.0, "samples": config.samples,
                  "seed": config.seed, "prompt_version": GEN_VERSION}
    version = (f"{GEN_VERSION}:seed={config.seed}:T={params.temperature}:k={params.top_k}:p={params.top_p}"
               f":n={params.max_new_tokens}:min={config.min_new_tokens}")
    run_id = _start_run(wh, config, prepared, {"protocol_version": version}, generation_config=generation)
    with _finishing(wh, run_id, "samples") as stats:
        backend = _load_if_pending(wh, prepared, pending)
        advance = progress(len(requests), len(requests) - len(pending)) if progress else None
        chunk = max(1, min(config.chunk_size, GEN_ROWS_PER_BATCH // config.samples))
        stats["added"] = collect_generations(wh, backend, requests, pending, samples=config.samples, seed=config.seed,
                                             params=params, min_new_tokens=config.min_new_tokens, chunk_size=chunk,
                                             run_id=run_id, on_progress=advance)
    return CollectResult(run_id, prepared.model_key, len(stimuli), len(requests), len(pending), stats["added"])


def _tango_templates(wh: Warehouse, model_key: str, prompts: list[Stimulus]) -> tuple[list[Stimulus], str]:
    """TANGO `prob`: the templates built from this model's stored generations (stored in `stimuli` too)."""
    from ..lexicon.tango_convert import load_nlp
    from .tango_templates import templates_from_generations

    templates, counts = templates_from_generations(wh, model_key, prompts, load_nlp())
    if counts.generations == 0:
        raise ValueError(f"tango --protocol prob scores templates built from this model's own generations, and "
                         f"{wh.path} has none for model {model_key}: run `runners collect --dataset tango "
                         f"--protocol gen` with the same model (and --limit) first")
    note = (f"{counts.generations} stored generations -> {counts.templates} templates ({counts.no_pronoun} without "
            f"a pronoun, {counts.not_candidate} of non-candidate families, {counts.unconvertible} containing the "
            f"slot marker)")
    if not templates:
        raise ValueError(f"tango: no template to score: {note}")
    wh.append("stimuli", [s.to_row() for s in templates])
    return sorted(templates, key=lambda s: (s.item_id, s.stimulus_id)), note
