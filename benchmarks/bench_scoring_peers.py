"""Sequence scoring: biaslab vs lm-evaluation-harness and minicons on the same sentences, speed and agreement.

Usage: python benchmarks/bench_scoring_peers.py [--model smollm2-135m] [--dataset ruff] [--stimuli 100] [--repeats 3]
       (needs the `bench` extra: pip install -e .[bench])

The work is the one of `bench_scoring.py`: the `prob` protocol's requests (every candidate pronoun filled into each
stimulus; RUFF: 100 stimuli = 400 sentences), each scored as log p(sentence) = sum over its tokens of
log p(x_t | BOS, x_<t), BOS prepended. Every scorer loads the same local model folder (the alias's cached bf16
Hugging Face folder) on the CPU:

- biaslab: `score_causal_grouped` (the production path), token-budget batches of `--batch-tokens`;
- lm-evaluation-harness: `lm_eval.models.huggingface.HFLM(pretrained=<folder>, dtype=..., device="cpu",
  batch_size=B)`, `loglikelihood` on `Instance(("", sentence))`. With an empty context HFLM encodes the continuation
  with `add_special_tokens=False` and uses `[prefix_token_id]` as the context, which is the tokenizer's BOS id when
  it has one (SmolLM2: `<|im_start|>`, id 1), i.e. exactly biaslab's BOS + sentence; the script checks that the
  token ids are identical for every sentence;
- minicons: `scorer.IncrementalLMScorer(<folder>, device="cpu", dtype=...)`,
  `sequence_score(batch, reduction=lambda x: x.sum(0).item(), bos_token=True)`: `bos_token=True` prepends the BOS
  token string and minicons never scores the first token, so again BOS + sentence with every sentence token scored
  (token ids checked too). minicons takes whatever list it is given as one batch; the script feeds it slices of B.

Timing runs in bf16 (the default dtype here); each peer is timed at each batch size of `--peer-batch-sizes`
(lm-eval's `batch_size="auto"` settles on its `max_batch_size`, 64) and its fastest setting is the one compared.
Times are medians of `--repeats`. Agreement runs in fp32 (bf16 rounding alone moves a sentence's sum by ~0.1):
max |sum log-prob difference| per sentence vs biaslab, and vs a float64 reference (one forward pass per sentence in
float64, log_softmax in float64) that tells which fp32 result is nearer the exact value. lm-eval is checked twice
in fp32: as shipped (log_softmax in the model's dtype; PyTorch's fp32 CPU log_softmax uses a fast exp that biases
each token by ~1e-6..1e-5, ~2e-4 over a sentence) and with `softmax_dtype="float64"` (HFLM's own option).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import time
import warnings

import numpy as np
import torch

from _common import median_time, peak_rss_mb, prob_sequences, write_json
from biaslab.engines.hf.loading import prepare_model
from biaslab.engines.models import bos_token_id
from biaslab.engines.hf.prefix_scoring import score_causal_grouped

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class LmEvalPeer:
    name = "lm_eval_hflm"

    def __init__(self, folder: str, dtype: str):
        from lm_eval.models.huggingface import HFLM

        self.lm = HFLM(pretrained=folder, dtype={"bf16": "bfloat16", "fp32": "float32"}[dtype], device="cpu",
                       batch_size=1)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """What HFLM.loglikelihood feeds the model for ("", text): [prefix_token_id] + continuation tokens."""
        out = []
        for t in texts:
            cont = self.lm.tok_encode(t, add_special_tokens=False)
            assert cont[0] != self.lm.prefix_token_id  # else HFLM would use cont[0] as the context
            out.append([self.lm.prefix_token_id, *cont])
        return out

    def score(self, texts: list[str], batch_size: int) -> np.ndarray:
        from lm_eval.api.instance import Instance

        self.lm.batch_size_per_gpu = batch_size  # what HFLM(batch_size=...) sets
        requests = [Instance("loglikelihood", {}, ("", t), i) for i, t in enumerate(texts)]
        return np.array([ll for ll, _ in self.lm.loglikelihood(requests, disable_tqdm=True)])


class MiniconsPeer:
    name = "minicons"

    def __init__(self, folder: str, dtype: str):
        from minicons import scorer

        self.scorer = scorer.IncrementalLMScorer(folder, device="cpu", dtype=TORCH_DTYPES[dtype])

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        enc = self.scorer.encode(texts, bos_token=True)
        return [ids[mask.bool()].tolist() for ids, mask in zip(enc["input_ids"], enc["attention_mask"])]

    def score(self, texts: list[str], batch_size: int) -> np.ndarray:
        out: list[float] = []
        for start in range(0, len(texts), batch_size):
            out += self.scorer.sequence_score(texts[start:start + batch_size], reduction=lambda x: x.sum(0).item(),
                                              bos_token=True)
        return np.array(out)


PEERS = (LmEvalPeer, MiniconsPeer)


def biaslab_breakdown(run, seqs: list[list[int]], groups: list) -> dict[str, float | int]:
    """Where biaslab's time goes in one run: the wall seconds of its three model calls (prefix encoding, suffix
    extension over the cached prefix, output head + log-sum-exp at every scored position), and the work each does.
    The wrappers are installed on `prefix_scoring`'s module globals for this run only."""
    from biaslab.engines.hf import prefix_scoring as ps

    spent = {"encode_prompts": 0.0, "extend": 0.0, "_gather_logprobs": 0.0, "score_causal": 0.0}
    originals = {name: getattr(ps, name) for name in spent}

    def timed(name):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return originals[name](*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0
        return call

    for name in spent:
        setattr(ps, name, timed(name))
    try:
        t0 = time.perf_counter()
        run()
        total = time.perf_counter() - t0
    finally:
        for name, fn in originals.items():
            setattr(ps, name, fn)
    by_group: dict = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    body_tokens = head_rows = 0
    for members in by_group.values():
        cut = ps.common_prefix_length([seqs[i] for i in members]) if len(members) > 1 else 0
        cut = cut if cut >= ps.MIN_SHARED else 0
        body_tokens += cut + sum(len(seqs[i]) - cut for i in members)
        # the prefix's log-probabilities are computed once; each member's own tokens once per member
        head_rows += max(cut - 1, 0) + sum(len(seqs[i]) - max(cut, 1) for i in members)
    return {"total_s": total, "prefix_forward_s": spent["encode_prompts"], "suffix_forward_s": spent["extend"],
            "head_logsumexp_s": spent["_gather_logprobs"], "unshared_groups_s": spent["score_causal"],
            "other_s": total - sum(spent.values()),
            "body_tokens_biaslab": body_tokens, "body_tokens_peers": sum(len(s) for s in seqs),
            "head_rows_biaslab": head_rows, "head_rows_peers": sum(len(s) - 1 for s in seqs)}


def float64_reference(folder: str, seqs: list[list[int]]) -> np.ndarray:
    """Sum log-prob per sentence with the model and the log-softmax in float64, one sentence per forward pass."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    out = []
    with torch.inference_mode():
        for ids in seqs:
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0], dim=-1)
            out.append(float(logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum()))
    del model
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="bf16", choices=sorted(TORCH_DTYPES), help="dtype of the timed runs")
    ap.add_argument("--dataset", default="ruff")
    ap.add_argument("--stimuli", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--peer-batch-sizes", default="16,64,400", help="comma-separated batch sizes tried per peer")
    ap.add_argument("--skip-fp32", action="store_true", help="skip the fp32 / float64 agreement check")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    batch_sizes = [int(b) for b in args.peer_batch_sizes.split(",")]

    prepared = prepare_model(args.model, dtype=args.dtype, device="cpu")
    folder = prepared.folder
    ours = prepared.load()
    tok = ours.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else bos_token_id(tok)[0]
    texts, seqs, groups = prob_sequences(tok, args.dataset, args.stimuli, args.data_dir)
    n_tokens = sum(len(s) - 1 for s in seqs)  # scored tokens

    def biaslab_sums(model) -> np.ndarray:
        got = score_causal_grouped(model, seqs, groups, max_tokens=args.batch_tokens, pad_id=pad)
        return np.array([float(np.sum(g)) for g in got])

    # --- timing, in the run dtype -------------------------------------------------------------------------------
    sums = {"biaslab": biaslab_sums(ours.model)}
    t_ours, runs_ours = median_time(lambda model=ours.model: biaslab_sums(model), args.repeats)
    timing: dict[str, dict] = {"biaslab": {"median_s": t_ours, "runs_s": runs_ours,
                                           "setting": f"token-budget batches of {args.batch_tokens}"}}
    breakdown = biaslab_breakdown(lambda model=ours.model: biaslab_sums(model), seqs, groups)
    rss_biaslab = peak_rss_mb()  # before any peer is loaded: biaslab's own footprint
    same_tokens: dict[str, int] = {}
    sweep: dict[str, dict[int, float]] = {}
    for Peer in PEERS:
        peer = Peer(folder, args.dtype)
        same_tokens[Peer.name] = sum(a == b for a, b in zip(peer.token_ids(texts), seqs))
        sweep[Peer.name] = {}
        for bs in batch_sizes:
            sums[f"{Peer.name}@{bs}"] = peer.score(texts, bs)  # warm-up run, also kept for bf16 agreement
            sweep[Peer.name][bs] = median_time(lambda peer=peer, bs=bs: peer.score(texts, bs), args.repeats)[0]
        best = min(sweep[Peer.name], key=sweep[Peer.name].get)
        timing[Peer.name] = {"median_s": sweep[Peer.name][best], "setting": f"batch_size={best}",
                             "by_batch_size": sweep[Peer.name]}
        sums[Peer.name] = sums[f"{Peer.name}@{best}"]
        del peer
        gc.collect()
    run_dtype_diff = {name: float(np.max(np.abs(sums[name] - sums["biaslab"]))) for name in (p.name for p in PEERS)}
    del ours
    gc.collect()

    # --- agreement, fp32 and a float64 reference ----------------------------------------------------------------
    agreement: dict[str, dict[str, float]] = {}
    fp32_s: dict[str, float] = {}  # one run each, for information (the timing claim is the run dtype's)

    def once(name, fn):
        t0 = time.perf_counter()
        out = fn()
        fp32_s[name] = time.perf_counter() - t0
        return out

    if not args.skip_fp32:
        ref = float64_reference(folder, seqs)
        model32 = prepare_model(args.model, dtype="fp32", device="cpu").load().model
        biaslab_sums(model32)  # warm-up
        fp32 = {"biaslab": once("biaslab", lambda: biaslab_sums(model32))}
        del model32
        gc.collect()
        lm = LmEvalPeer(folder, "fp32")
        fp32["lm_eval_hflm"] = once("lm_eval_hflm", lambda: lm.score(texts, 64))
        lm.lm.softmax_dtype = torch.float64
        fp32["lm_eval_hflm_softmax_fp64"] = once("lm_eval_hflm_softmax_fp64", lambda: lm.score(texts, 64))
        del lm
        gc.collect()
        mc = MiniconsPeer(folder, "fp32")
        fp32["minicons"] = once("minicons", lambda: mc.score(texts, 64))
        del mc
        for name, v in fp32.items():
            agreement[name] = {"max_abs_diff_vs_biaslab": float(np.max(np.abs(v - fp32["biaslab"]))),
                               "max_abs_diff_vs_float64": float(np.max(np.abs(v - ref))),
                               "median_abs_diff_vs_float64": float(np.median(np.abs(v - ref)))}

    peers = [p.name for p in PEERS]
    fastest = min(peers, key=lambda p: timing[p]["median_s"])
    ratios = {p: timing[p]["median_s"] / t_ours for p in peers}
    result = {
        "model": args.model, "folder": folder, "dtype": args.dtype, "dataset": args.dataset,
        "sentences": len(seqs), "scored_tokens": n_tokens, "repeats": args.repeats,
        "identical_token_ids": {p: f"{same_tokens[p]}/{len(seqs)}" for p in peers},
        "seconds": timing, "speedup_vs": ratios, "fastest_peer": fastest,
        "speedup_vs_fastest_peer": ratios[fastest], "target_speedup": 3.0,
        "max_abs_sum_logprob_diff_vs_biaslab_run_dtype": run_dtype_diff,
        "agreement_fp32": agreement, "agreement_target": 1e-4, "fp32_seconds_single_run_batch_64": fp32_s,
        "biaslab_breakdown": breakdown, "peak_rss_mb_biaslab": rss_biaslab, "peak_rss_mb": peak_rss_mb(),
    }
    print(f"{len(seqs)} sentences ({args.dataset} prob, {args.stimuli} stimuli), {n_tokens:,} scored tokens, "
          f"{args.model} {args.dtype} on cpu ({torch.get_num_threads()} threads); median of {args.repeats}")
    print(f"{'scorer':<16}{'setting':<34}{'seconds':>9}{'sent/s':>9}{'biaslab x':>11}  {'max|diff| ' + args.dtype:>16}")
    for name in ["biaslab", *peers]:
        t = timing[name]["median_s"]
        ratio = "" if name == "biaslab" else f"{ratios[name]:.2f}"
        diff = "" if name == "biaslab" else f"{run_dtype_diff[name]:.2e}"
        print(f"{name:<16}{timing[name]['setting']:<34}{t:>9.2f}{len(seqs) / t:>9.0f}{ratio:>11}  {diff:>16}")
    for p in peers:
        print(f"  {p} by batch size: " + ", ".join(f"{b}: {s:.2f} s" for b, s in sweep[p].items()))
    print("identical token ids: " + ", ".join(f"{p} {v}" for p, v in result["identical_token_ids"].items()))
    if agreement:
        print(f"{'fp32 agreement (sum logprob)':<30}{'max|diff| vs biaslab':>22}{'max|diff| vs float64':>22}"
              f"{'median vs f64':>15}{'fp32 s (1 run)':>16}")
        for name, a in agreement.items():
            print(f"{name:<30}{a['max_abs_diff_vs_biaslab']:>22.2e}{a['max_abs_diff_vs_float64']:>22.2e}"
                  f"{a['median_abs_diff_vs_float64']:>15.2e}{fp32_s[name]:>16.2f}")
    b = breakdown
    print(f"biaslab time: prefix forward {b['prefix_forward_s']:.2f} s + suffix forward {b['suffix_forward_s']:.2f} s "
          f"+ output head/log-sum-exp {b['head_logsumexp_s']:.2f} s + other {b['other_s']:.2f} s; body tokens "
          f"{b['body_tokens_biaslab']:,} (peers {b['body_tokens_peers']:,}), head rows "
          f"{b['head_rows_biaslab']:,} (peers {b['head_rows_peers']:,})")
    print(f"biaslab is {ratios[fastest]:.2f}x faster than the fastest peer ({fastest}); target 3x: "
          f"{'met' if ratios[fastest] >= 3 else 'MISSED'}; peak RSS {rss_biaslab:.0f} MB before the peers load, "
          f"{result['peak_rss_mb']:.0f} MB overall")
    print(f"json: {write_json('scoring_peers', result)}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
