"""Make the lm-evaluation-harness fixture of `biaslab import` (issue 70, item 2): a small lm-eval run of the default
model (SmolLM2-135M-Instruct) on its own `bbq` and `crows_pairs_english` tasks, with `--log_samples`, kept as
`tests/runners/fixtures/lm_eval/` (its README says how it was made and what was trimmed).

Usage: python benchmarks/make_lm_eval_fixture.py --lm-eval-python /path/to/venv/bin/python [--per-category 8]
       [--pairs 60] [--out tests/runners/fixtures/lm_eval] [--keep FOLDER]

lm-eval runs in an environment of its own (`pip install "lm-eval[hf]==0.4.13"` beside torch 2.13.0; its pins differ
from biaslab's), as a subprocess, on the CPU in fp32 with `softmax_dtype=float64` and one request a batch (in fp32 a
score moves with the padding of the batch it is computed in: bench_crows_lm_eval.py), from the alias's cached Hugging
Face folder (the folder biaslab itself scores). Its hub datasets are not reachable here, so each task is a local
task that `include`s lm-eval's installed YAML unchanged (prompt, choices, process_docs, process_results, metrics)
and only points the dataset at local files:

- `bbq_local`: lm-eval's `bbq/bbq_multiple_choice.yaml` over a JSONL of the first `--per-category` examples of each
  BBQ category file in the data folder, alternating ambiguous and disambiguated contexts as the files do (lm-eval's
  own dataset, oskarvanderwal/bbq "All", is these files concatenated);
- `crows_pairs_english_local`: lm-eval's `crows_pairs/crows_pairs_english.yaml` over the revised English CrowS-Pairs
  file (the one behind lm-eval's hub dataset), `--limit` pairs.

The samples files are copied with each `doc` trimmed to the fields an import reads (BBQ: example_id, category,
context_condition, question_polarity, label, ans0-2; CrowS-Pairs: its id column, sent_more, sent_less,
stereo_antistereo, bias_type) and each request's prompt (`arguments` -> arg_0: BBQ's passage and question) blanked,
so the fixture holds no passage text; everything else (the choices' continuations, resps, filtered_resps, per-sample
metrics, hashes) is as lm-eval wrote it. The results JSON is copied unchanged.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench_crows_lm_eval import TASK as CROWS_TASK  # the same local CrowS-Pairs task the side-by-side bench runs

BBQ_TASK = """include: {include}
task: bbq_local
tag: []
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: "{data}"
"""
KEEP = {"bbq_local": ("example_id", "category", "context_condition", "question_polarity", "label", "ans0", "ans1",
                      "ans2"),
        "crows_pairs_english_local": ("Unnamed: 0", "sent_more", "sent_less", "stereo_antistereo", "bias_type")}


def lm_eval_folder(python: str) -> Path:
    where = subprocess.run([python, "-c", "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"],
                           check=True, capture_output=True, text=True).stdout.strip()
    return Path(where) / "tasks"


def bbq_subset(data: Path, per_category: int, out: Path) -> int:
    """The first `per_category` examples of each category file, one JSONL."""
    lines = []
    for path in sorted((data / "bbq" / "data").glob("*.jsonl")):
        lines += path.read_text(encoding="utf-8").splitlines()[:per_category]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def run(python: str, model: Path, tasks: Path, names: list[str], out: Path, limit: int | None) -> None:
    command = [python, "-m", "lm_eval", "run", "--model", "hf", "--model_args",
               f"pretrained={model},dtype=float32,softmax_dtype=float64", "--tasks", ",".join(names),
               "--include_path", str(tasks), "--device", "cpu", "--batch_size", "1", "--log_samples",
               "--output_path", str(out)]
    if limit:
        command += ["--limit", str(limit)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    subprocess.run(command, check=True, env=env)


def trimmed(path: Path, task: str) -> str:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        sample["doc"] = {k: sample["doc"][k] for k in KEEP[task] if k in sample["doc"]}
        for argument in sample["arguments"].values():  # the prompt (BBQ's passage and question): blanked
            argument["arg_0"] = ""
        rows.append(json.dumps(sample, ensure_ascii=False))
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm-eval-python", required=True)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--per-category", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default="tests/runners/fixtures/lm_eval")
    parser.add_argument("--keep", default=None, help="Also keep lm-eval's untrimmed output in this folder.")
    args = parser.parse_args()

    from biaslab import loaders
    from biaslab.engines.aliases import ALIASES
    from biaslab.loaders.crows_pairs import REVISED

    data = loaders.default_data_dir(args.data_dir)
    folder = ALIASES[args.model]().folder if args.model in ALIASES else Path(args.model)
    installed = lm_eval_folder(args.lm_eval_python)
    work = Path(tempfile.mkdtemp(prefix="lm-eval-fixture-"))
    try:
        tasks = work / "tasks"
        tasks.mkdir()
        examples = bbq_subset(data, args.per_category, work / "bbq_subset.jsonl")
        (tasks / "bbq_local.yaml").write_text(BBQ_TASK.format(
            include=installed / "bbq" / "bbq_multiple_choice.yaml", data=work / "bbq_subset.jsonl"), encoding="utf-8")
        (tasks / "crows_local.yaml").write_text(CROWS_TASK.format(
            include=installed / "crows_pairs" / "crows_pairs_english.yaml",
            data=data / "crows_pairs" / REVISED), encoding="utf-8")
        run(args.lm_eval_python, folder, tasks, ["bbq_local"], work / "out", None)
        run(args.lm_eval_python, folder, tasks, ["crows_pairs_english_local"], work / "out", args.pairs)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for path in sorted((work / "out").rglob("*.json*")):
            if path.name.startswith("samples_"):
                task = next(t for t in KEEP if path.name.startswith(f"samples_{t}_"))
                with gzip.open(out / f"samples_{task}.jsonl.gz", "wt", encoding="utf-8") as f:
                    f.write(trimmed(path, task))
            elif path.name.startswith("results_"):
                task = next(t for t in KEEP if t in json.loads(path.read_text(encoding="utf-8"))["results"])
                shutil.copyfile(path, out / f"results_{task}.json")
        if args.keep:
            shutil.copytree(work / "out", args.keep, dirs_exist_ok=True)
        print(f"{examples} BBQ examples and {args.pairs} CrowS-Pairs pairs scored by lm-eval on {folder}; fixture in "
              f"{out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
