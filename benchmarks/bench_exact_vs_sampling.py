"""Exact choice probabilities vs sampling, on the same WinoPron prompts and model: agreement and time to precision.

Usage: python benchmarks/bench_exact_vs_sampling.py [--prompts 20] [--samples 2000] [--valid-target 200]

1. Agreement: for each prompt, `--samples` seeded samples (the paper's settings: T=0.5, top_k=40, 6 new tokens); the
   count of each outcome (each option, invalid) must lie in the 99% binomial interval of the exact probability.
   Exits non-zero when fewer than 95% of the prompts agree.
2. Time to the paper's precision: the contextual invariance paper keeps 200 *valid* samples per prompt. Sampling
   needs about 200 / p_valid samples for that; the time is measured per sample on this run and scaled by the
   samples each prompt needs (p_valid from the exact probabilities). Exact mode's time is measured directly.
Two samplers are timed: biaslab's shared-prefix sampler (the production path for short answers) and the
conventional way, Hugging Face `generate(do_sample=True, num_return_sequences=...)` with a KV cache (how the paper's
code samples), measured on a few prompts. Exact mode runs through `explore`, one prompt per forward (production
default). Everything runs on one loaded model in this process.
"""

from __future__ import annotations

import argparse
import math
import time

from scipy.stats import binom

from _common import peak_rss_mb, write_json
from biaslab import loaders
from biaslab.runners.answers import AnswerParser, decode
from biaslab.engines.models import stop_token_ids
from biaslab.runners.trie import INVALID, probabilities, walk
from biaslab.engines.hf.kvcache import encode_prompts
from biaslab.engines.hf.loading import load_model
from biaslab.runners.prompting import PromptSpec, render
from biaslab.engines.base import SamplingSettings
from biaslab.engines.hf.sampling import sample_shared_prefixes
from biaslab.engines.hf.tree import HFExpander


def explore(model, tok, prompts, parsers, *, max_new_tokens, k_store, stop_ids, pad_id, temperature, top_k):
    """The exact-mode tries of `prompts`: `walk` over the hf engine's expander, each prompt encoded from its first
    token."""
    import torch

    with torch.inference_mode():
        return walk(HFExpander(model, encode_prompts(model, prompts, pad_id), k_store), tok, parsers,
                    max_new_tokens=max_new_tokens, stop_ids=stop_ids, temperature=temperature, top_k=top_k)


def hf_generate_seconds_per_sample(model, tok, prompts, n: int, stops: set[int]) -> float:
    """Seconds per sample of transformers' own sampling (T=0.5, top_k=40, top_p=1, 6 new tokens, KV cache)."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=True, temperature=0.5, top_k=40, top_p=1.0, max_new_tokens=6,
                              num_return_sequences=n, repetition_penalty=1.0, eos_token_id=sorted(stops),
                              pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else min(stops))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                           generation_config=config)
    return (time.perf_counter() - t0) / (n * len(prompts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--valid-target", type=int, default=200)
    ap.add_argument("--hf-prompts", type=int, default=2, help="prompts for the HF generate timing")
    ap.add_argument("--hf-samples", type=int, default=256, help="samples per prompt for the HF generate timing")
    ap.add_argument("--exact-batch", type=int, default=1, help="prompts per exact-mode forward (production default 1)")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()

    loaded = load_model(args.model)
    model, tok = loaded.model, loaded.tokenizer
    spec = PromptSpec.load()
    params = SamplingSettings(temperature=0.5, top_k=40, top_p=1.0, max_new_tokens=6)
    stimuli = loaders.get("winopron").load(loaders.default_data_dir(args.data_dir))
    chosen = stimuli[:: max(1, len(stimuli) // args.prompts)][: args.prompts]  # spread over templates / contexts
    prompts = [tok(render(spec, tok, s).text, add_special_tokens=False)["input_ids"] for s in chosen]
    parsers = [AnswerParser(tuple(s.options), spec.closing) for s in chosen]
    stops = stop_token_ids(model.generation_config, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(stops)

    t0 = time.perf_counter()
    tries = []
    for start in range(0, len(prompts), args.exact_batch):
        tries += explore(model, tok, prompts[start:start + args.exact_batch], parsers[start:start + args.exact_batch],
                         max_new_tokens=6,
                         k_store=64, stop_ids=stops, pad_id=pad, temperature=0.5, top_k=40)
    exact_s = time.perf_counter() - t0
    exact = [probabilities(t, p.options, 0.5, 40) for t, p in zip(tries, parsers)]

    rows, agree, sample_s = [], 0, 0.0
    for i, (prompt, parser, probs) in enumerate(zip(prompts, parsers, exact)):
        t0 = time.perf_counter()
        state = encode_prompts(model, [prompt], pad)
        drawn = sample_shared_prefixes(model, state, 0, [10_000 * i + j for j in range(args.samples)], params, stops)
        sample_s += time.perf_counter() - t0
        answers = [parser.parse(decode(tok, s.token_ids))[1] for s in drawn]
        ok, detail = True, {}
        for outcome in (*parser.options, INVALID):
            count = sum(a == (None if outcome == INVALID else outcome) for a in answers)
            p = min(max(probs[outcome], 0.0), 1.0)
            lo, hi = binom.ppf(0.005, args.samples, p), binom.ppf(0.995, args.samples, p)
            ok &= lo <= count <= hi
            detail[outcome] = {"exact": p, "sampled": count / args.samples, "interval": [lo, hi]}
        agree += ok
        rows.append({"stimulus": chosen[i].item_id, "context": chosen[i].context, "agrees": bool(ok), **detail})

    per_sample_s = sample_s / (args.samples * len(prompts))
    hf_per_sample_s = hf_generate_seconds_per_sample(model, tok, prompts[: args.hf_prompts], args.hf_samples, stops)
    valid = [1.0 - probs[INVALID] - probs.get("unresolved", 0.0) for probs in exact]
    needed = [math.ceil(args.valid_target / v) if v > 0 else math.inf for v in valid]
    sampling_to_precision_s = sum(n * per_sample_s for n in needed)
    hf_to_precision_s = sum(n * hf_per_sample_s for n in needed)
    result = {
        "model": args.model, "dtype": loaded.spec.dtype, "prompts": len(prompts), "samples_per_prompt": args.samples,
        "agreeing_prompts": agree, "exact_seconds": exact_s, "sampling_seconds_measured": sample_s,
        "seconds_per_sample": per_sample_s, "valid_probability": valid, "samples_needed_for_target": needed,
        "sampling_seconds_to_target": sampling_to_precision_s,
        "speedup_exact_vs_sampling": sampling_to_precision_s / exact_s,
        "hf_generate_seconds_per_sample": hf_per_sample_s, "hf_generate_seconds_to_target": hf_to_precision_s,
        "speedup_exact_vs_hf_generate": hf_to_precision_s / exact_s, "peak_rss_mb": peak_rss_mb(), "rows": rows,
    }
    print(f"{len(prompts)} WinoPron prompts, {args.model} {loaded.spec.dtype}, T=0.5 top_k=40, 6 new tokens")
    print(f"agreement: {agree}/{len(prompts)} prompts inside the 99% binomial interval for every outcome "
          f"({args.samples} samples each)")
    print(f"exact mode: {exact_s:.2f} s for all prompts ({exact_s / len(prompts):.3f} s per prompt)")
    print(f"sampling: {per_sample_s * 1000:.2f} ms per sample; mean p(valid) {sum(valid) / len(valid):.3f}; "
          f"{args.valid_target} valid samples per prompt need {sum(needed):,} samples = "
          f"{sampling_to_precision_s:.0f} s")
    print(f"Hugging Face generate: {hf_per_sample_s * 1000:.2f} ms per sample -> {hf_to_precision_s:.0f} s")
    print(f"exact mode is {result['speedup_exact_vs_hf_generate']:.0f}x faster than HF generate and "
          f"{result['speedup_exact_vs_sampling']:.0f}x faster than biaslab's shared-prefix sampler "
          f"at the paper's precision")
    print(f"json: {write_json('exact_vs_sampling', result)}")
    if agree < math.ceil(0.95 * len(prompts)):
        raise SystemExit(f"agreement too low: {agree}/{len(prompts)}")


if __name__ == "__main__":
    main()
