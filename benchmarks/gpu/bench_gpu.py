"""The GPU proof: biaslab's own collection path on a random-weight model of a real architecture, within a time budget.

Usage (the device runs it through run_device.sh; see README.md beside this file):

    python benchmarks/gpu/bench_gpu.py [--shape llama-3.1-8b] [--budget-s 400] [--out DIR]
    python benchmarks/gpu/bench_gpu.py --cpu-smoke          # tiny shape, 20 prompts, on CPU: the same JSON keys

What it does, in order (each phase's seconds and results go into the JSON):

1. **Model.** Builds the shape's config (written below, `SHAPES`) with the vocabulary of the default model's tokenizer
   (SmolLM2's, carried in `.gpu_kit/tokenizer`, so WinoPron prompts tokenize for real and its chat template
   applies), initializes random weights directly on the device in bf16, saves them as a local Hugging Face folder,
   and loads that folder with biaslab's own loader (`engines.hf.loading.load_model`: the weights' sha256 for the
   model key, dtype, device), as `runners collect --model FOLDER` would. Random weights give meaningless answers,
   and alone they would also give a false cost: the answer tokens would almost never reach a node's top-k, so the
   exact trie would stop at its root. So a fixed logit (`--answer-bias`, default 20) is added to every token that can
   begin or continue an accepted answer (`answer_bias`): the walk then explores every path the parser accepts
   within the top-k, the largest trie the protocol builds, an upper bound of a trained model's cost.
2. **Sweep.** Exact mode (`runners.collect.collect`, the code of `runners collect --dataset winopron`) on a few
   hundred prompts under each `--prompt-batch` and exploration-cache size, each into a fresh warehouse after a
   warm-up; the fastest setting is kept. (`--batch-tokens` sizes scoring batches only: exact mode never reads it.)
3. **Exact mode, all prompts** (3,600) with the best setting: wall time = GPU-seconds on one GPU, prompts/s. When
   the budget cannot hold all of them, the prompts that fit are run and the 3,600-prompt time is extrapolated from
   their rate (`exact_extrapolated` says so).
4. **Bare forward.** Plain batched forward passes over exactly the distinct tokens the production run computed (the
   template's shared prefix once, then per prompt its own suffix and the tokens of every trie node it explored,
   read back from the warehouse), plus the output head, log-sum-exp and top-64 at every decision point: the
   "limit" of `benchmarks/bench_main_job.py`, here with CUDA-synchronized timing and 64 / 256 rows per forward
   (the faster is kept). `efficiency_vs_bare_forward` = limit seconds / production seconds over the same prompts
   (1.0: production adds nothing to the arithmetic).
5. **The paper's protocol.** Hugging Face `generate` sampling (T 0.5, top_k 40, top_p 1, 6 new tokens, 200 samples
   per prompt in one call) on as many prompts as the budget allows; `paper_protocol_gpu_seconds` = 3,600 x 200
   samples / the measured samples per second: the cost of 200 answers per prompt if every answer were valid, a
   lower bound of the paper's protocol (which samples until 200 answers are valid). `ratio_paper_to_exact` = that /
   `exact_gpu_seconds_3600`; `ratio_paper_reported_to_exact` sets the paper's own 14 H200-hours per model
   (50,400 s) against it.
6. **bf16 vs fp32** (when the budget allows): a SmolLM2-135M-shaped random model collected in both dtypes on the
   same prompts; the largest difference of an exact choice probability.

Second-call phases (flags): `--quant nf4` (bitsandbytes) loads the same folder quantized; `--shape
qwen3-moe-30b-a3b --layers N` a mixture-of-experts shape that transformers ships; `--oom-check` limits the
process's GPU memory so that a huge scoring batch (`prob` protocol, Winogender) cannot fit, and compares what the
halving retry stored with a run at a normal batch.

Every number is from this run; nothing is written down in advance. The JSON (`gpu_<shape>.json` under --out) holds
at least: device, exact_prompts_per_s, exact_gpu_seconds_3600, paper_protocol_gpu_seconds, ratio_paper_to_exact,
efficiency_vs_bare_forward, peak_memory_gib, dtype, model_shape.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
KIT = ROOT / ".gpu_kit"
PAPER_H200_SECONDS = 14 * 3600  # the contextual-invariance paper: 14 H200-hours of sampling per model
PAPER_SAMPLES = 200              # valid answers per prompt in the paper's protocol
ALL_PROMPTS = 3600               # WinoPron: 360 templates x 5 contexts x 2 option orders

#: model shapes (Hugging Face config fields); the vocabulary and special tokens come from the carried tokenizer
SHAPES: dict[str, dict] = {
    # Meta Llama 3.1 8B's dimensions (its own vocabulary of 128,256 is replaced by the default model's)
    "llama-3.1-8b": dict(model_type="llama", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, intermediate_size=14336, rope_theta=500000.0,
                         max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False),
    # SmolLM2-135M's dimensions (the default model), for the dtype comparison
    "smollm2-135m": dict(model_type="llama", hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, intermediate_size=1536, rope_theta=100000.0,
                         max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True),
    # Qwen3-30B-A3B's dimensions (128 experts, 8 active); --layers cuts the 48 layers where memory or disk is short
    "qwen3-moe-30b-a3b": dict(model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                              num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768,
                              num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1, rope_theta=1000000.0,
                              max_position_embeddings=8192, rms_norm_eps=1e-6, tie_word_embeddings=False),
    # the CPU smoke test's shape
    "tiny": dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, rope_theta=10000.0, max_position_embeddings=4096,
                 rms_norm_eps=1e-5, tie_word_embeddings=False),
}
#: the files of a tokenizer folder that travel with the model (prepare.sh copies the same)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json",
                   "special_tokens_map.json")
REQUIRED_KEYS = ("device", "exact_prompts_per_s", "exact_gpu_seconds_3600", "paper_protocol_gpu_seconds",
                 "ratio_paper_to_exact", "efficiency_vs_bare_forward", "peak_memory_gib", "dtype", "model_shape")


# ------------------------------------------------------------------------------------------------ time and memory
class Budget:
    """Seconds left of `total` since construction; phases take a share of what is left."""

    def __init__(self, total: float) -> None:
        self.total, self.start = float(total), time.perf_counter()

    def used(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return max(0.0, self.total - self.used())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def timed(device: torch.device, out: dict, key: str):
    """Wall seconds of the block, with the device synchronized at both ends, into out[key]."""
    sync(device)
    t0 = time.perf_counter()
    yield
    sync(device)
    out[key] = time.perf_counter() - t0


def peak_memory_gib(device: torch.device) -> float:
    """Peak GPU memory allocated by torch (CUDA), else the process's peak resident memory."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def device_facts(device: torch.device) -> dict:
    facts = {"device_type": device.type, "torch": torch.__version__, "python": platform.python_version()}
    try:
        import transformers
        facts["transformers"] = transformers.__version__
    except ImportError:
        pass
    for name in ("duckdb", "pydantic", "ibis", "bitsandbytes"):
        try:
            facts[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001  (absent or broken: recorded as such)
            facts[name] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(device=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                     gpu_memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count)
        try:
            import subprocess
            facts["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                             capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            facts["driver"] = None
    else:
        sys.path.insert(0, str(HERE.parent))
        from _common import cpu_facts
        cpu = cpu_facts()
        facts.update(device=f"CPU: {cpu.get('cpu_model', platform.processor())}", cpu=cpu)
    return facts


# ------------------------------------------------------------------------------------------------ the model
def build_model(shape: str, tokenizer_dir: Path, folder: Path, device: torch.device, layers: int | None = None,
                seed: int = 0) -> dict:
    """Random bf16 weights of `shape` made on `device`, saved with the tokenizer as a Hugging Face folder."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    fields = dict(SHAPES[shape])
    if layers:
        fields["num_hidden_layers"] = layers
    model_type = fields.pop("model_type")
    eos = tok.eos_token_id
    config = AutoConfig.for_model(model_type, vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=eos,
                                  pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos, **fields)
    times: dict = {}
    torch.manual_seed(seed)
    with timed(device, times, "init_seconds"), torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    shutil.rmtree(folder, ignore_errors=True)
    with timed(device, times, "save_seconds"):
        model.save_pretrained(folder)
        for name in TOKENIZER_FILES:  # tokenizer, chat template, generation config (stop tokens); no weights
            if (tokenizer_dir / name).is_file():
                shutil.copy2(tokenizer_dir / name, folder / name)
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    dims = {k: v for k, v in fields.items() if k not in ("max_position_embeddings", "rms_norm_eps")}
    return {"model_shape": {"name": shape, "model_type": model_type, "vocab_size": len(tok), **dims},
            "parameters_billion": round(params / 1e9, 3), **times}


# ------------------------------------------------------------------------------------------------ answer tokens
def answer_bias(loaded, data_dir: Path, bias: float, limit: int = ALL_PROMPTS) -> dict:
    """Add `bias` to the output head's logits of the tokens that spell an option whole (" she", "She", ...) or close
    an answer after one ("'", "'}", ...): a forward hook on the head module, which production, the bare forward and
    `generate` all call.

    Why: with random weights the answer tokens are almost never among a node's top-k (40 of 49,152), so the exact
    trie would stop at its root and exact mode would look far cheaper than on a trained model. With the bias, as on
    a trained model, the options' spellings lead the first node and the closings the next, and the walk explores
    them and whatever else reaches the top-k. `trie_nodes_per_prompt` in the JSON says how large the tries were."""
    spec, requests = choice_requests_for(loaded, data_dir, limit)
    tok = loaded.tokenizer
    pieces = {i: tok.decode([i]) for i in range(len(tok))}
    chosen: set[int] = set()
    for options in sorted({r.options for r in requests}):
        parser = requests[next(i for i, r in enumerate(requests) if r.options == options)].parser(spec)
        words = {o.lower() for o in options}
        spellings = [f"{sp}{o[:1].upper() + o[1:] if cap else o}" for o in options for sp in ("", " ")
                     for cap in (False, True)]
        for i, text in pieces.items():
            core = text.strip()
            if core.lower() in words:
                chosen.add(i)
            elif core and not core[0].isalnum() and any(parser.status(w + text, ended=False)[0] == "valid"
                                                        for w in spellings):
                chosen.add(i)
    ids = torch.as_tensor(sorted(chosen), device=loaded.device)
    head = loaded.model.get_output_embeddings()

    def hook(module, inputs, output):
        output[..., ids] += bias
        return output

    head.register_forward_hook(hook)
    return {"answer_tokens_biased": len(chosen), "answer_bias": bias}


# ------------------------------------------------------------------------------------------------ exact mode
def collect_exact(loaded, db: Path, data_dir: Path, limit: int, prompt_batch: int | None = None,
                  explore_cache_bytes: int | None = None) -> tuple[float, object]:
    """`runners.collect.collect` of WinoPron exact mode on `limit` prompts into a fresh warehouse `db`: (seconds
    from the first forward to the last chunk written, the result)."""
    from biaslab.engines.hf import backend as hf_backend
    from biaslab.runners.collect import CollectConfig, collect

    extra = {} if prompt_batch is None else {"prompt_batch": prompt_batch}
    # --limit counts templates (10 prompts each): the first ceil(limit / 10) of the file, `limit` rounded up to tens
    config = CollectConfig(dataset="winopron", model=loaded.spec.name, dtype=loaded.spec.dtype, db=str(db),
                           data_dir=str(data_dir), limit=-(-limit // 10), limit_order="file", **extra)
    started: list[float] = []

    def progress(total: int, done: int):
        sync(loaded.device)
        started.append(time.perf_counter())
        return lambda n: None

    saved = hf_backend.EXPLORE_CACHE_BYTES
    if explore_cache_bytes:
        hf_backend.EXPLORE_CACHE_BYTES = explore_cache_bytes
    try:
        result = collect(config, progress=progress, loaded=loaded)
    finally:
        hf_backend.EXPLORE_CACHE_BYTES = saved
    sync(loaded.device)
    return time.perf_counter() - started[0], result


def sweep(loaded, work: Path, data_dir: Path, prompts: int, settings: list[tuple[int, int]], budget: Budget,
          share: float) -> tuple[list[dict], tuple[int, int]]:
    """Each (prompt_batch, exploration cache bytes) on the same `prompts` prompts, while the phase's share of the
    budget lasts; the fastest is returned (the default setting when none ran)."""
    deadline = budget.used() + share * budget.left()
    out: list[dict] = []
    collect_exact(loaded, work / "warmup.duckdb", data_dir, min(prompts, 32))  # kernels, allocator, caches
    for i, (batch, cache) in enumerate(settings):
        if out and budget.used() > deadline:
            break
        seconds, result = collect_exact(loaded, work / f"sweep{i}.duckdb", data_dir, prompts, batch, cache)
        out.append({"prompt_batch": batch, "explore_cache_gib": cache / 2**30, "prompts": result.requests,
                    "seconds": seconds, "prompts_per_s": result.requests / seconds})
    best = max(out, key=lambda r: r["prompts_per_s"])
    return out, (best["prompt_batch"], int(best["explore_cache_gib"] * 2**30))


# ------------------------------------------------------------------------------------------------ bare forward
@torch.inference_mode()
def bare_forward_seconds(model, prefix: list[int], rows: list[list[int]], decisions: list[list[int]], pad_id: int,
                         group: int) -> float:
    """Synchronized seconds of: the prefix once; the rows (length-sorted, `group` per forward, each padded to its
    longest) over a copy of the prefix's cache; head + log-sum-exp + top-64 at the decision positions."""
    from transformers import DynamicCache

    sys.path.insert(0, str(HERE.parent))
    from bench_main_job import decision_forward, group_inputs

    base, head = model.base_model, model.get_output_embeddings()
    device = next(model.parameters()).device
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    sync(device)
    t0 = time.perf_counter()
    prefix_cache = DynamicCache(config=model.config)
    base(input_ids=torch.as_tensor([prefix], device=device), past_key_values=prefix_cache, use_cache=True)
    for start in range(0, len(order), group):
        members = order[start:start + group]
        # the prefix per row is a device copy here, counted (~1 ms on a GPU)
        ids, mask, positions, cache, di, dj = group_inputs(model, prefix_cache, len(prefix), rows, decisions,
                                                           members, pad_id, device)
        decision_forward(base, head, ids, mask, positions, cache, di, dj, device)
    sync(device)
    return time.perf_counter() - t0


def bare_forward(loaded, db: Path, groups: list[int]) -> dict:
    """The limit over the distinct tokens of the production run stored in `db` (see the module docstring)."""
    sys.path.insert(0, str(HERE.parent))
    from bench_main_job import explored_tokens
    from biaslab.engines.hf.prefix_scoring import common_prefix_length

    tok = loaded.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    prompts, trie = explored_tokens(db, loaded.model_key, tok)
    cut = common_prefix_length(prompts)
    rows = [p[cut:] + t for p, t in zip(prompts, trie)]
    decisions = [[len(p) - cut - 1 + j for j in range(len(t) + 1)] for p, t in zip(prompts, trie)]
    bare_forward_seconds(loaded.model, prompts[0][:cut], rows[:min(len(rows), 64)], decisions, pad, 64)  # warm-up
    seconds = {g: bare_forward_seconds(loaded.model, prompts[0][:cut], rows, decisions, pad, g) for g in groups}
    best = min(seconds, key=seconds.get)
    distinct = cut + sum(len(r) for r in rows)
    return {"bare_seconds": seconds[best], "bare_rows_per_forward": best, "prompts": len(prompts),
            "bare_seconds_by_rows_per_forward": {str(g): s for g, s in seconds.items()},
            "shared_prefix_tokens": cut, "distinct_tokens": distinct,
            "decision_points": sum(len(d) for d in decisions)}


# ------------------------------------------------------------------------------------------------ sampling
def choice_requests_for(loaded, data_dir: Path, limit: int):
    """The exact-mode requests (prompt ids, answer parsers) of the first `limit` WinoPron prompts."""
    from biaslab.runners.collect import CollectConfig
    from biaslab.runners.protocols.choice import choice_requests

    config = CollectConfig(dataset="winopron", model=loaded.spec.name, db=os.devnull, data_dir=str(data_dir),
                           limit=limit)
    plugin = config.plugin()
    from biaslab import loaders
    stimuli = loaders.get("winopron").load(Path(data_dir))[:limit]
    return plugin.spec, choice_requests(stimuli, loaded.tokenizer, plugin.spec, plugin.settings.render_params())


@torch.inference_mode()
def paper_sampling(loaded, data_dir: Path, budget: Budget, share: float, max_prompts: int,
                   samples: int = PAPER_SAMPLES) -> dict:
    """HF `generate` sampling of the paper (T 0.5, top_k 40, top_p 1, 6 new tokens), `samples` per prompt in one
    call, prompt after prompt until the phase's share of the budget is spent (at least 2 prompts; the first is a
    warm-up, not counted)."""
    from transformers import GenerationConfig

    from biaslab.engines.models import stop_token_ids
    from biaslab.runners.answers import decode

    spec, requests = choice_requests_for(loaded, data_dir, max_prompts)
    tok, model, device = loaded.tokenizer, loaded.model, loaded.device
    eos = sorted(stop_token_ids(getattr(model, "generation_config", None), tok)) or [tok.eos_token_id]
    config = GenerationConfig(do_sample=True, temperature=0.5, top_k=40, top_p=1.0, max_new_tokens=6,
                              repetition_penalty=1.0, num_return_sequences=samples, eos_token_id=eos,
                              pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos[0])
    deadline = budget.used() + share * budget.left()
    counted_seconds, counted_samples, counted_prompts, valid, tokens = 0.0, 0, 0, 0, 0
    for i, req in enumerate(requests):
        if i >= 2 and budget.used() > deadline:
            break
        ids = torch.as_tensor([req.prompt_ids], device=device)
        torch.manual_seed(i)
        sync(device)
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        sync(device)
        seconds = time.perf_counter() - t0
        new = out[:, ids.shape[1]:].tolist()
        if i == 0:
            continue  # warm-up
        parser = req.parser(spec)
        valid += sum(parser.parse(decode(tok, [t for t in row if t not in eos]))[1] is not None for row in new)
        counted_seconds += seconds
        counted_samples += len(new)
        counted_prompts += 1
        tokens += sum(len(row) for row in new)
    rate = counted_samples / counted_seconds
    return {"sampling_prompts": counted_prompts, "samples": counted_samples, "sampling_seconds": counted_seconds,
            "samples_per_s": rate, "generated_tokens": tokens, "valid_fraction_random_weights": valid / counted_samples,
            "samples_per_prompt": samples, "paper_protocol_gpu_seconds": ALL_PROMPTS * PAPER_SAMPLES / rate,
            "paper_protocol_conversion": f"{ALL_PROMPTS} prompts x {PAPER_SAMPLES} samples / {rate:.1f} samples/s "
                                         f"(every sample counted valid: a lower bound of sampling until "
                                         f"{PAPER_SAMPLES} answers are valid)"}


# ------------------------------------------------------------------------------------------------ bf16 vs fp32
def dtype_difference(tokenizer_dir: Path, work: Path, data_dir: Path, device: torch.device, prompts: int,
                     shape: str = "smollm2-135m") -> dict:
    """Exact choice probabilities of one random model of `shape` (SmolLM2-135M's) in bf16 and fp32 on the same
    prompts."""
    import duckdb

    from biaslab.engines.hf.loading import load_model

    folder = work / f"{shape}-random"
    built = build_model(shape, tokenizer_dir, folder, device, seed=1)
    probs = {}
    for dtype in ("fp32", "bf16"):
        loaded = load_model(str(folder), dtype=dtype, device=str(device))
        _, result = collect_exact(loaded, work / f"dtype-{dtype}.duckdb", data_dir, prompts, prompt_batch=1)
        con = duckdb.connect(str(work / f"dtype-{dtype}.duckdb"), read_only=True)
        probs[dtype] = dict(((r, o), p) for r, o, p in con.execute(
            "SELECT request_id, option, prob FROM choice_probs WHERE model_key = ?", [result.model_key]).fetchall())
        con.close()
        del loaded
        gc.collect()
    common = probs["fp32"].keys() & probs["bf16"].keys()
    diffs = sorted(abs(probs["fp32"][k] - probs["bf16"][k]) for k in common)
    return {"dtype_check_prompts": prompts, "dtype_check_values": len(diffs), "dtype_check_shape": shape,
            "dtype_check_parameters_billion": built["parameters_billion"],
            "bf16_vs_fp32_max_abs_diff": diffs[-1] if diffs else None,
            "bf16_vs_fp32_median_abs_diff": diffs[len(diffs) // 2] if diffs else None,
            "dtype_check_request_ids_equal": probs["fp32"].keys() == probs["bf16"].keys()}


# ------------------------------------------------------------------------------------------------ out of memory
def oom_check(loaded, work: Path, data_dir: Path, limit: int) -> dict:
    """The `prob` protocol (Winogender) stored twice: at the default --batch-tokens, then with one huge batch under a
    GPU memory cap that cannot hold it (caught, halved, completed); the stored log-probabilities compared."""
    import duckdb

    from biaslab.engines.hf import batching
    from biaslab.runners.collect import CollectConfig, collect

    device = loaded.device
    if device.type != "cuda":
        return {"oom_check": "skipped: needs CUDA (the cap is torch.cuda.set_per_process_memory_fraction)"}
    seen = {"oom": 0}
    original = batching.is_oom

    def counting(exc):
        hit = original(exc)
        seen["oom"] += hit
        return hit

    runs = {}
    for label, tokens, cap in (("normal", 4096, None), ("huge", 4_000_000, True)):
        db = work / f"oom-{label}.duckdb"
        config = CollectConfig(dataset="winogender", model=loaded.spec.name, dtype=loaded.spec.dtype, db=str(db),
                               data_dir=str(data_dir), limit=limit, max_tokens=tokens)
        batching.is_oom = counting
        if cap:
            free, total = torch.cuda.mem_get_info(device)
            used = total - free
            torch.cuda.set_per_process_memory_fraction(min(1.0, (used + 2 * 2**30) / total), device)
        try:
            result = collect(config, loaded=loaded)
        finally:
            batching.is_oom = original
            torch.cuda.set_per_process_memory_fraction(1.0, device)
            torch.cuda.empty_cache()
        con = duckdb.connect(str(db), read_only=True)
        runs[label] = {(r, s): v for r, s, v in con.execute(
            "SELECT request_id, option, logprob_sum FROM sequence_scores WHERE model_key = ?",
            [result.model_key]).fetchall()}
        con.close()
    common = runs["normal"].keys() & runs["huge"].keys()
    diffs = [abs(runs["normal"][k] - runs["huge"][k]) for k in common]
    return {"oom_caught": seen["oom"], "oom_rows_normal": len(runs["normal"]), "oom_rows_huge": len(runs["huge"]),
            "oom_same_keys": runs["normal"].keys() == runs["huge"].keys(),
            "oom_max_abs_diff_logprob_sum": max(diffs) if diffs else None}


# ------------------------------------------------------------------------------------------------ main
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="override the shape's layer count (say so in RESULTS)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--quant", default="none", choices=["none", "nf4"], help="nf4: bitsandbytes 4-bit (CUDA)")
    ap.add_argument("--budget-s", type=float, default=float(os.environ.get("BUDGET_S", 400)),
                    help="seconds for everything after the model is built (default $BUDGET_S, else 400): the sweep, "
                         "the sampling sample and the dtype check shrink to fit; the exact run extrapolates if short")
    ap.add_argument("--prompts", type=int, default=ALL_PROMPTS, help="exact-mode prompts (default all 3,600)")
    ap.add_argument("--sweep-prompts", type=int, default=384)
    ap.add_argument("--sample-prompts", type=int, default=100, help="at most this many prompts are sampled")
    ap.add_argument("--dtype-check-prompts", type=int, default=100, help="0: no bf16-vs-fp32 check")
    ap.add_argument("--answer-bias", type=float, default=20.0,
                    help="logit added to the answer tokens (see answer_bias; 0: plain random weights, "
                         "a root-only trie)")
    ap.add_argument("--oom-check", action="store_true", help="force an out-of-memory and check the halving retry")
    ap.add_argument("--tokenizer", default=None,
                    help="tokenizer folder (default: .gpu_kit/tokenizer from prepare.sh, else the default model's)")
    ap.add_argument("--data-dir", default=None,
                    help="datasets folder (default: .gpu_kit/datasets from prepare.sh, else $BIASLAB_DATA)")
    ap.add_argument("--work", default=None, help="folder for the model and warehouses (default: a temporary one)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench_out" / "gpu"))
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="tiny shape, 20 prompts, on CPU, small sweep and sample: proves the kit, same JSON keys")
    args = ap.parse_args(argv)
    if args.tokenizer is None:
        if (KIT / "tokenizer").is_dir():
            args.tokenizer = str(KIT / "tokenizer")
        else:  # here, not on the device: the default model's folder (converted once by biaslab's alias code)
            from biaslab.engines.aliases import resolve_smollm2
            args.tokenizer = str(resolve_smollm2().folder)
    if args.data_dir is None:
        args.data_dir = str(KIT / "datasets") if (KIT / "datasets").is_dir() else os.environ.get("BIASLAB_DATA", "")
    if args.cpu_smoke:
        args.shape, args.device, args.prompts = "tiny", "cpu", 20
        args.sweep_prompts, args.sample_prompts, args.dtype_check_prompts = 10, 3, 4
    return args


def run(args: argparse.Namespace, work: Path, result: dict) -> None:
    """The phases, each writing into `result` (see the module docstring)."""
    from biaslab.engines.hf.loading import load_model

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer_dir, data_dir = Path(args.tokenizer), Path(args.data_dir)
    result.update(device_facts(device))
    folder = work / f"model-{args.shape}"
    result.update(build_model(args.shape, tokenizer_dir, folder, device, args.layers))
    budget = Budget(args.budget_s)  # the model is built: the budget starts with biaslab's own path
    with timed(device, result, "load_seconds"):  # biaslab's loader: the weights' sha256, dtype, device
        loaded = load_model(str(folder), dtype="bf16", quant=args.quant, device=str(device))
    result.update(dtype="bf16" if args.quant == "none" else f"bf16+{args.quant}", quant=args.quant,
                  model_key=loaded.model_key)
    if args.answer_bias:
        result.update(answer_bias(loaded, data_dir, args.answer_bias))
    big = 16 << 30 if device.type == "cuda" else 2 << 30
    settings = [(96, 2 << 30), (256, big), (1024, big)] if not args.cpu_smoke else [(4, 2 << 30), (16, 2 << 30)]
    result["sweep"], (batch, cache) = sweep(loaded, work, data_dir, args.sweep_prompts, settings, budget, 0.15)
    result.update(best_prompt_batch=batch, best_explore_cache_gib=cache / 2**30)
    rate = max(r["prompts_per_s"] for r in result["sweep"])
    fits = int(rate * 0.45 * budget.left())
    n = max(min(args.prompts, fits), min(args.prompts, args.sweep_prompts))
    seconds, res = collect_exact(loaded, work / "exact.duckdb", data_dir, n, batch, cache)
    result.update(exact_prompts=res.requests, exact_seconds=seconds, exact_prompts_per_s=res.requests / seconds,
                  exact_extrapolated=res.requests < ALL_PROMPTS,
                  exact_gpu_seconds_3600=seconds * ALL_PROMPTS / res.requests)
    groups = [64, 256] if device.type == "cuda" else [8, 64]
    bare = bare_forward(loaded, work / "exact.duckdb", groups)
    result.update(bare, efficiency_vs_bare_forward=bare["bare_seconds"] / seconds,
                  trie_nodes_per_prompt=bare["decision_points"] / bare["prompts"],
                  production_tokens_per_s=bare["distinct_tokens"] / seconds,
                  bare_tokens_per_s=bare["distinct_tokens"] / bare["bare_seconds"])
    result.update(paper_sampling(loaded, data_dir, budget, 0.5, args.sample_prompts))
    result.update(ratio_paper_to_exact=result["paper_protocol_gpu_seconds"] / result["exact_gpu_seconds_3600"],
                  ratio_paper_reported_to_exact=PAPER_H200_SECONDS / result["exact_gpu_seconds_3600"])
    if args.oom_check:
        result.update(oom_check(loaded, work, data_dir, 200))
    result["peak_memory_gib"] = peak_memory_gib(device)
    del loaded
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if args.dtype_check_prompts and args.quant == "none" and (budget.left() > 60 or args.cpu_smoke):
        result.update(dtype_difference(tokenizer_dir, work, data_dir, device, args.dtype_check_prompts,
                                       "tiny" if args.cpu_smoke else "smollm2-135m"))
    result["budget_used_seconds"] = budget.used()


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"gpu_{args.shape}{'_' + args.quant if args.quant != 'none' else ''}"
    result: dict = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "model_shape": args.shape,
                    "budget_s": args.budget_s, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="biaslab-gpu-"))
    status = 0
    try:
        run(args, work, result)
    except Exception as exc:  # noqa: BLE001  (whatever failed is the finding: written down, then exit 1)
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
        traceback.print_exc()
        status = 1
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    missing = [k for k in REQUIRED_KEYS if k not in result]
    result["missing_keys"] = missing
    path = out / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str))
    summary = {k: result.get(k) for k in REQUIRED_KEYS}
    print(json.dumps(summary, indent=2, default=str))
    print(f"wrote {path}")
    return status or (1 if missing else 0)


if __name__ == "__main__":
    sys.exit(main())
