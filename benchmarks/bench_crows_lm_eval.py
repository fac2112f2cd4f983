"""CrowS-Pairs: biaslab's whole-sentence scores against lm-evaluation-harness's own `crows_pairs_english` task, run
side by side on the same model and pairs, per pair and timed (issue 54, item 2).

Usage: python benchmarks/bench_crows_lm_eval.py --lm-eval-python /path/to/venv/bin/python [--pairs N]
       [--dataset crows-pairs-revised] [--model smollm2-135m] [--batch-size 16] [--passes float64 agreement speed]

lm-eval runs in an environment of its own (`pip install lm-eval==0.4.13 accelerate` beside torch; its pins differ
from biaslab's), as a subprocess: `lm-eval run --model hf --tasks crows_pairs_english_local --include_path DIR`,
where DIR holds a task that `include`s lm-eval's installed `crows_pairs/crows_pairs_english.yaml` unchanged (its
prompt, choices, target delimiter and process_results) and only points `dataset_path` at the local file (lm-eval's
hub dataset is not reachable here; `revised_en/crows_pairs_EN_revised+210.csv` is the file behind it). Both load the
same local folder (the alias's cached Hugging Face folder) in fp32 on the CPU; lm-eval with `softmax_dtype=float64`
(its own option: its default fp32 log_softmax drifts by ~1e-6 per token on this CPU, see bench_scoring_peers.py).
biaslab runs `runners collect --dataset ... --protocol prob --dtype fp32` into a fresh warehouse.

Three passes, each running both tools on every pair:

- float64: both tools in float64, batched as each is used (lm-eval `dtype=float64`, batch 16; biaslab's own
  collection through the Python API with the model's weights cast to float64 after loading, since `--dtype` offers
  none, and its default batching, prefix sharing included): what remains between the two is their arithmetic
  (which tokens are scored after which context, the BOS, the sums), not fp32 rounding; per sentence, the
  log-likelihood difference is what the issue bounds by 1e-5;
- agreement: fp32, each sentence scored alone (lm-eval `--batch_size 1`; biaslab `--batch-tokens 8`, one sentence a
  batch): for every pair, each sentence's log-likelihood from lm-eval's logged samples against biaslab's stored
  sum_logprob, pct_stereotype and likelihood_diff both ways;
- speed: fp32, each tool batched as it would be used (lm-eval `--batch_size 16`, biaslab's default token budget),
  wall clock of each command, model loading included (the float64 pass times biaslab's collection alone); the same
  differences, reported.

Why not fp32 alone: in fp32 a sentence's score moves with the batch it is computed in (padding changes the
attention kernel's path). On SmolLM2 most tokens move by ~1e-6, but a few early positions are sensitive. For
example, " people" after "Hispanic" moves by 1.8e-3 between an unpadded and a padded batch, in transformers alone
with either tool's code, and so does eager against SDPA attention. Comparing the tools per pair in fp32 therefore
needs the same batch composition on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import cpu_facts, write_json

TASK = """include: {include}
task: crows_pairs_english_local
tag: []
dataset_path: csv
dataset_name: null
dataset_kwargs:
  data_files:
    test: "{data}"
  delimiter: "\\t"
"""


def lm_eval_task(python: str, data: Path, folder: Path) -> None:
    """Write the local task that includes lm-eval's own crows_pairs_english.yaml."""
    where = subprocess.run([python, "-c", "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"],
                           check=True, capture_output=True, text=True).stdout.strip()
    include = Path(where) / "tasks" / "crows_pairs" / "crows_pairs_english.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "crows_local.yaml").write_text(TASK.format(include=include, data=data), encoding="utf-8")


def run_lm_eval(python: str, model_folder: Path, tasks: Path, out: Path, pairs: int | None, batch: int,
                dtype: str = "float32") -> float:
    command = [python, "-m", "lm_eval", "run", "--model", "hf", "--model_args",
               f"pretrained={model_folder},dtype={dtype},softmax_dtype=float64", "--tasks",
               "crows_pairs_english_local", "--include_path", str(tasks), "--device", "cpu", "--batch_size",
               str(batch), "--log_samples", "--output_path", str(out)]
    if pairs:
        command += ["--limit", str(pairs)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    return time.perf_counter() - start


def lm_eval_pairs(out: Path) -> dict[str, tuple[float, float]]:
    """pair id -> (ll sent_more, ll sent_less) from lm-eval's logged samples."""
    found = {}
    for path in out.rglob("samples_crows_pairs_english_local_*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            sample = json.loads(line)
            lls = [float(r[0]) for r in sample["filtered_resps"]]
            found[str(sample["doc"]["Unnamed: 0"])] = (lls[0], lls[1])
    return found


def run_biaslab(dataset: str, model: str, db: Path, data_dir: str | None, pair_ids: list[str] | None,
                batch_tokens: int | None = None) -> float:
    command = [sys.executable, "-m", "biaslab.cli.runners_entry", "collect", "--dataset", dataset, "--protocol",
               "prob", "--dtype", "fp32", "--model", model, "--db", str(db)]
    if batch_tokens:
        command += ["--batch-tokens", str(batch_tokens)]
    if data_dir:
        command += ["--data-dir", data_dir]
    if pair_ids:
        command += ["--where", "attrs.pair=" + "|".join(pair_ids)]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def run_biaslab_float64(dataset: str, model: str, db: Path, data_dir: str | None, pair_ids: list[str] | None,
                        ) -> float:
    """biaslab's own collection (`runners.collect.collect`, its default batching) with the model's weights cast to
    float64 after loading (the Python API's `loaded=`: `--dtype` offers no float64), timed from the call."""
    from biaslab.engines.hf.loading import load_model
    from biaslab.runners.collect import CollectConfig, collect

    loaded = load_model(model, dtype="fp32", device="cpu")
    loaded.model.double()
    where = {"attrs.pair": "|".join(pair_ids)} if pair_ids else {}
    start = time.perf_counter()
    collect(CollectConfig(dataset=dataset, protocol="prob", dtype="fp32", model=model, db=str(db), data_dir=data_dir,
                          where=where), loaded=loaded)
    return time.perf_counter() - start


def biaslab_pairs(db: Path) -> dict[str, tuple[float, float]]:
    import biaslab

    with biaslab.open(str(db)) as wh:
        rows = wh.query("SELECT s.item_id AS pair, s.attrs->>'sentence' AS sentence, q.sum_logprob "
                        "FROM sequence_scores q JOIN stimuli s USING (stimulus_id)")
    wide = rows.pivot_table(index="pair", columns="sentence", values="sum_logprob")
    return {str(p): (float(r["more"]), float(r["less"])) for p, r in wide.iterrows()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm-eval-python", required=True, help="A Python with lm-eval (and accelerate) installed.")
    parser.add_argument("--dataset", default="crows-pairs-revised", choices=["crows-pairs-revised", "crows-pairs"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pairs", type=int, default=None, help="The first N pairs of the file (default: all).")
    parser.add_argument("--batch-size", type=int, default=16, help="lm-eval's batch size in the speed pass.")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--passes", nargs="+", default=["float64", "agreement", "speed"],
                        choices=["float64", "agreement", "speed"], help="Which passes to run (default: all three).")
    args = parser.parse_args()

    from biaslab import loaders
    from biaslab.engines.aliases import ALIASES
    from biaslab.loaders.crows_pairs import ORIGINAL, REVISED

    info = loaders.get(args.dataset)
    data = info.path(loaders.default_data_dir(args.data_dir)) / (REVISED if args.dataset.endswith("revised")
                                                                 else ORIGINAL)
    folder = ALIASES[args.model]().folder if args.model in ALIASES else Path(args.model)
    ids = [s.item_id for s in info.load(loaders.default_data_dir(args.data_dir)) if s.attrs["sentence"] == "more"]
    chosen = ids[: args.pairs] if args.pairs else None
    result = {"dataset": args.dataset, "model": args.model, "cpu": cpu_facts()}
    passes = [("float64", args.batch_size, None), ("agreement", 1, 8), ("speed", args.batch_size, None)]
    for name, lm_batch, tokens in [p for p in passes if p[0] in args.passes]:
        work = Path(tempfile.mkdtemp(prefix="bench-crows-"))
        try:
            lm_eval_task(args.lm_eval_python, data, work / "tasks")
            t_lm = run_lm_eval(args.lm_eval_python, folder, work / "tasks", work / "lm_out", args.pairs, lm_batch,
                               "float64" if name == "float64" else "float32")
            if name == "float64":
                t_bl = run_biaslab_float64(args.dataset, args.model, work / "w.duckdb", args.data_dir, chosen)
            else:
                t_bl = run_biaslab(args.dataset, args.model, work / "w.duckdb", args.data_dir, chosen, tokens)
            theirs, ours = lm_eval_pairs(work / "lm_out"), biaslab_pairs(work / "w.duckdb")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        result[name] = _compared(theirs, ours, t_lm, t_bl, lm_batch, tokens)
        got = result[name]
        precision = "float64, both batched" if name == "float64" else "fp32"
        print(f"{name}: {got['pairs']} pairs of {args.dataset} on {args.model} ({precision}, CPU; lm-eval batch "
              f"{lm_batch}, biaslab {'one sentence a batch' if tokens else 'default batches'}): max |ll difference| "
              f"per sentence {got['max_abs_diff']:.2e} (mean {got['mean_abs_diff']:.2e}, worst pair "
              f"{got['worst_pair']}, {got['pairs_above_1e-5']} pairs above 1e-5); pct_stereotype lm-eval "
              f"{got['pct_stereotype']['lm_eval']:.2f} vs biaslab {got['pct_stereotype']['biaslab']:.2f}; "
              f"likelihood_diff {got['likelihood_diff']['lm_eval']:.4f} vs {got['likelihood_diff']['biaslab']:.4f}; "
              f"wall time lm-eval {t_lm:.1f} s, biaslab {t_bl:.1f} s ({t_lm / t_bl:.2f}x)")
    print(write_json("crows_lm_eval", result))


def _compared(theirs: dict, ours: dict, t_lm: float, t_bl: float, lm_batch: int, tokens: int | None) -> dict:
    """The per-pair agreement and the two aggregate scores of one pass."""
    common = sorted(set(theirs) & set(ours))
    diffs = {p: max(abs(theirs[p][k] - ours[p][k]) for k in (0, 1)) for p in common}
    pct = {name: 100 * sum(v[0] > v[1] for k, v in src.items() if k in common) / len(common)
           for name, src in (("lm_eval", theirs), ("biaslab", ours))}
    gap = {name: sum(abs(v[0] - v[1]) for k, v in src.items() if k in common) / len(common)
           for name, src in (("lm_eval", theirs), ("biaslab", ours))}
    worst = max(diffs, key=diffs.get)
    return {"pairs": len(common), "lm_eval_pairs": len(theirs), "biaslab_pairs": len(ours),
            "lm_eval_batch_size": lm_batch, "biaslab_batch_tokens": tokens or "default",
            "max_abs_diff": diffs[worst], "mean_abs_diff": sum(diffs.values()) / len(diffs), "worst_pair": worst,
            "pairs_above_1e-5": sum(d > 1e-5 for d in diffs.values()), "pct_stereotype": pct,
            "likelihood_diff": gap, "seconds": {"lm_eval": t_lm, "biaslab": t_bl}}


if __name__ == "__main__":
    main()
