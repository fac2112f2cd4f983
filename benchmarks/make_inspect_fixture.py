"""Make the inspect_ai fixture of `biaslab import` (issue 70, item 2): a real inspect_ai eval log of inspect_evals'
`bbq` task, kept as `tests/runners/fixtures/inspect/bbq.json` (its README says how it was made).

Usage: /path/to/inspect-venv/bin/python benchmarks/make_inspect_fixture.py [--per-category 4]
       [--out tests/runners/fixtures/inspect/bbq.json] [--data-dir ../shared/datasets]

Run it with a Python that has inspect_ai (0.3.285) and the inspect_evals wheel (0.28.0, installed with --no-deps: its
`inspect-evals-utils` pin is not on the package index here) - not biaslab's. inspect_evals' `bbq` task is called as
it is (its record_to_sample, its sample ids "<Category>_<NNNNN>", its `multiple_choice()` solver and `choice()`
scorer); only what reaches the network is replaced: the Hugging Face loader returns the first `--per-category`
examples of each category file in the data folder, through the task's own record_to_sample, and the eval metadata
helper returns a fixed version. The model is inspect_ai's `mockllm/model` with fixed replies: "ANSWER: A/B/C" in a
seeded order, and every seventh reply a refusal the `choice()` scorer cannot read (an answer no letter names), so
the log holds both. No model runs; the fixture tests the reading of the log format, not a model.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import tempfile
import types
from pathlib import Path


def _stub(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-category", type=int, default=4)
    parser.add_argument("--out", default="tests/runners/fixtures/inspect/bbq.json")
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    args = parser.parse_args()

    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    folder = Path(args.data_dir) / "bbq" / "data"

    def load_hf_dataset_with_script(*, record_to_sample, subset, **_):
        lines = (folder / f"{subset}.jsonl").read_text(encoding="utf-8").splitlines()[: args.per_category]
        return MemoryDataset([record_to_sample(json.loads(line)) for line in lines], name="bbq")

    class _Version:
        comparability_version = "1"

        def to_metadata(self):
            return {"version": "1"}

    # inspect_evals without its package __init__ and without the helpers that reach the network
    spec = importlib.util.find_spec("inspect_evals")
    package = _stub("inspect_evals")
    package.__path__ = list(spec.submodule_search_locations)
    _stub("inspect_evals.constants", INSPECT_EVALS_CACHE_PATH=Path(tempfile.mkdtemp()))
    _stub("inspect_evals.hf_dataset_script_helper", load_hf_dataset_with_script=load_hf_dataset_with_script)
    _stub("inspect_evals.metadata", load_eval_metadata=lambda name: types.SimpleNamespace(version=_Version()))
    _stub("inspect_evals.bbq.huggingface_artifact.bbq", BBQ=None)
    from inspect_evals.bbq.bbq import BBQ_SUBSET_NAMES, bbq

    subsets = [s for s in BBQ_SUBSET_NAMES if (folder / f"{s}.jsonl").is_file()]
    task = bbq(subsets=subsets)
    rng = random.Random(0)
    replies = [ModelOutput.from_content("mockllm/model", "I would rather not say." if k % 7 == 6 else
                                        f"ANSWER: {rng.choice('ABC')}") for k in range(len(task.dataset))]
    for reply in replies:  # fixed usage: mockllm would otherwise count tokens with a tokenizer it downloads
        reply.usage = ModelUsage(input_tokens=0, output_tokens=0, total_tokens=0)
    model = get_model("mockllm/model", custom_outputs=replies)
    with tempfile.TemporaryDirectory() as logs:
        log = inspect_eval(task, model=model, log_dir=logs, log_format="json", display="none", max_connections=1,
                           max_samples=1)[0]
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(Path(log.location).read_bytes())
    if log.status != "success":
        raise SystemExit(f"the eval ended {log.status}: {log.error.message if log.error else ''}")
    print(f"{len(task.dataset)} samples of {len(subsets)} categories; accuracy "
          f"{log.results.scores[0].metrics['accuracy'].value:.4f}; log in {out}")


if __name__ == "__main__":
    main()
