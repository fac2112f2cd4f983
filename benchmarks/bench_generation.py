"""Generation throughput: biaslab's gen protocol against a plain transformers `generate` loop, side by side in one
process, on the same DecodingTrust prompts with the same settings.

Usage: python benchmarks/bench_generation.py [--model smollm2-135m] [--statements 4] [--samples 5]
       [--max-new-tokens 64] [--repeats 3] [--dtype fp32|bf16] [--prompts examples/counterfactual-prompts.csv]

With --prompts, the prompts are a counterfactual audit's instead (`biaslab data load --kind counterfactual`): the
variants of the first --statements items of the file, each sent as the user message alone (no system prompt).

The prompts: the first --statements DecodingTrust statements of the file, each under its three conditions (the
system prompt, then the user prompt, in the model's chat template: `gen.dialogue_ids`). The settings: the paper's
sampler (temperature 1, no top-k truncation, top-p 1), --samples answers of at most --max-new-tokens tokens each,
stopping at the model's stop tokens.

- biaslab: `runners.collect.collect` with `--protocol gen` into a fresh warehouse (what `runners collect --dataset
  decodingtrust --protocol gen` runs), timed from the progress bar's start to the last chunk written; its
  generated tokens counted from the stored samples.
- plain: per prompt, `model.generate(do_sample=True, num_return_sequences=--samples, ...)` with the KV cache and the
  same warpers, its generated tokens counted up to the first stop token.

The two run in turn, repeat by repeat (same machine load). Reported: median seconds, generated tokens per second of
each, and biaslab's tokens/s over plain's (the goal: >= 0.9). Writes bench_out/generation_<model>_<dtype>.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import cpu_facts, peak_rss_mb, timed_collection, write_json
from biaslab.engines.hf.loading import load_model
from biaslab.engines.models import stop_token_ids
from biaslab.loaders import get
from biaslab.loaders.registry import default_data_dir
from biaslab.runners.collect import CollectConfig
from biaslab.runners.protocols.gen import dialogue_ids, dialogue_requests
from biaslab.warehouse import Warehouse

NO_TOP_K = 262_144


AUDIT = "bench-audit"


def biaslab_run(loaded, model: str, args, data_dir: str | None, expected: int) -> tuple[float, int]:
    """(seconds, generated tokens) of one fresh collection of `expected` prompts."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "w.duckdb"
        if args.prompts:
            from biaslab.runners.load import load_user

            load_user(db, file=args.prompts, name=AUDIT, kind="counterfactual")
        config = CollectConfig(dataset=AUDIT if args.prompts else "decodingtrust", model=model,
                               dtype=loaded.spec.dtype, db=str(db), data_dir=data_dir, protocol="gen",
                               limit=args.statements, limit_order="file", samples=args.samples,
                               max_new_tokens=args.max_new_tokens, min_new_tokens=0, top_k=NO_TOP_K, top_p=1.0,
                               temperature=1.0, seed=0)
        seconds, _, result = timed_collection(config, loaded)
        if result.added != expected * args.samples:
            raise SystemExit(f"biaslab stored {result.added} samples, expected {expected * args.samples}")
        with Warehouse.open(db, read_only=True) as wh:
            tokens = int(wh.rows("SELECT sum(len(token_ids)) FROM samples")[0][0])
    return seconds, tokens


def plain_run(loaded, prompts: list[list[int]], args) -> tuple[float, int]:
    """(seconds, generated tokens up to each sample's first stop) of transformers' own sampling."""
    import torch
    from transformers import GenerationConfig

    model, tok = loaded.model, loaded.tokenizer
    stops = sorted(stop_token_ids(getattr(model, "generation_config", None), tok))
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=args.max_new_tokens,
                              num_return_sequences=args.samples, repetition_penalty=1.0, eos_token_id=stops,
                              pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else stops[0])
    torch.manual_seed(0)
    tokens = 0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            out = model.generate(torch.tensor([prompt], device=model.device),
                                 attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=model.device),
                                 generation_config=config)
            for row in out[:, len(prompt):].tolist():
                ends = [i for i, t in enumerate(row) if t in stops]
                tokens += (ends[0] + 1) if ends else len(row)
    return time.perf_counter() - t0, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--statements", type=int, default=4)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--prompts", default=None, help="a counterfactual prompt file instead of DecodingTrust")
    args = parser.parse_args()
    loaded = load_model(args.model, dtype=args.dtype, device="cpu")
    if args.prompts:
        from biaslab.loaders.user.counterfactual import from_prompts

        every = from_prompts(Path(args.prompts), AUDIT).stimuli
        items = list(dict.fromkeys(s.item_id for s in every))[:args.statements]
        stimuli = [s for s in every if s.item_id in items]
    else:
        stimuli = sorted(get("decodingtrust").load_verified(default_data_dir(args.data_dir)).stimuli,
                         key=lambda s: (int(s.attrs["line"]), ("benign", "untargeted", "targeted").index(
                             s.attrs["condition"])))[:3 * args.statements]
    prompts = [dialogue_ids(loaded.tokenizer, r) for r in dialogue_requests(stimuli, args.max_new_tokens, 0)]
    runs: dict[str, list[tuple[float, int]]] = {"biaslab": [], "plain": []}
    for _ in range(args.repeats):
        runs["biaslab"].append(biaslab_run(loaded, args.model, args, args.data_dir, len(prompts)))
        runs["plain"].append(plain_run(loaded, prompts, args))
    rate = {k: statistics.median(t / s for s, t in v) for k, v in runs.items()}
    result = {"model": args.model, "dtype": args.dtype, "source": args.prompts or "decodingtrust",
              "prompts": len(prompts), "samples": args.samples,
              "max_new_tokens": args.max_new_tokens, "cpu": cpu_facts(), "peak_rss_mb": peak_rss_mb(),
              "runs": {k: [{"seconds": s, "tokens": t} for s, t in v] for k, v in runs.items()},
              "tokens_per_s": rate, "ratio": rate["biaslab"] / rate["plain"]}
    for name, value in rate.items():
        seconds = statistics.median(s for s, _ in runs[name])
        print(f"{name}: median {seconds:.1f} s, {value:.1f} generated tokens/s")
    print(f"biaslab / plain: {result['ratio']:.2f}x (goal >= 0.9)")
    print(write_json(f"generation_{'counterfactual_' if args.prompts else ''}{args.model}_{args.dtype}", result))


if __name__ == "__main__":
    main()
