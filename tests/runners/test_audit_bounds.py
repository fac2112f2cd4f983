"""Audit plans with hostile or absurd values (issue 67, items 1, 3, 10, 11): Slurm options are checked against
Slurm's own syntax so that no plan text becomes a line of a job script; repeated keys, non-UTF-8 text, an empty or
deeply nested plan are one line; a plan's units are counted before anything else and capped; numeric values are
bounded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from biaslab.runners.audit import PlanError, expand, load_plan
from biaslab.runners.audit.slurm import sbatch_script

BASE = "name: p\nmodels: [{name: a, model: m}]\ndatasets: [{dataset: crows-pairs}]\n"

#: (slurm field, hostile value): each would have ended its #SBATCH line and run shell in every job
HOSTILE = [("partition", "x\ntouch P; exit 0\n#"), ("time", "1:00\ntouch P"), ("mem", "4G\n#SBATCH --array=0"),
           ("account", "lab; rm -rf ~"), ("partition", "gpu cpu"), ("time", "$(touch P)"), ("mem", "4G`id`"),
           ("account", "a\rb"), ("partition", "")]


def _plan(tmp_path, text: str):
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("field, value", HOSTILE)
def test_a_hostile_slurm_value_is_refused_in_one_line(tmp_path, field, value):
    import json

    path = _plan(tmp_path, BASE + f"slurm: {{{field}: {json.dumps(value)}}}\n")
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: slurm.{field}: ") and "is not a Slurm" in message and "\n" not in message


@pytest.mark.parametrize("args", [["--qos=high\n#SBATCH --x"], ["--comment=a b"], ["touch"], ["--x=$(id)"]])
def test_a_hostile_sbatch_argument_is_refused(tmp_path, args):
    import json

    with pytest.raises(PlanError, match=r"slurm\.sbatch_args\[0\]: is not a Slurm sbatch argument"):
        load_plan(_plan(tmp_path, BASE + f"slurm: {{sbatch_args: {json.dumps(args)}}}\n"))


def test_valid_slurm_values_make_a_script_whose_lines_are_all_sbatch_until_the_shell(tmp_path):
    path = _plan(tmp_path, BASE + "slurm: {partition: 'gpu,debug', time: '1-12:00:00', mem: 16G, account: my-lab,"
                                  " cpus_per_task: 4, sbatch_args: ['--qos=high', '--exclusive']}\n")
    plan = load_plan(path)
    script = sbatch_script(plan, "echo hi", array="0-3", job_name="biaslab-p", log=str(tmp_path / "%A_%a.out"))
    lines = script.splitlines()
    head = lines[1:lines.index("set -eo pipefail")]
    assert all(line.startswith("#SBATCH --") and " " not in line[len("#SBATCH "):] for line in head), head
    assert {"#SBATCH --partition=gpu,debug", "#SBATCH --time=1-12:00:00", "#SBATCH --mem=16G",
            "#SBATCH --account=my-lab", "#SBATCH --qos=high", "#SBATCH --exclusive"} <= set(head)
    assert script.endswith("\nexec echo hi\n")


@pytest.mark.parametrize("log", ["/tmp/a\nb/%j.out", "/tmp/with space/%j.out"])
def test_a_workdir_that_would_break_an_sbatch_line_is_refused(tmp_path, log):
    plan = load_plan(_plan(tmp_path, BASE))
    with pytest.raises(ValueError, match="whitespace or a control character"):
        sbatch_script(plan, "true", array=None, job_name="biaslab-p-merge", log=log)


@pytest.mark.parametrize("text, expected", [
    (BASE + "db: a.duckdb\ndb: b.duckdb\n", "the key 'db' repeats line 4"),
    ("name: p\nmodels: [{name: a, model: m, model: n}]\ndatasets: [{dataset: crows-pairs}]\n",
     "the key 'model' repeats line 2"),
    ("", "the plan is empty"),
    ("# only a comment\n", "the plan is empty"),
    (BASE + "workdir: \"a\\nb\"\n", "workdir: 'a\\nb' is not a path"),
    (BASE + "report: {bootstrap: 1000000000000}\n", "report.bootstrap: must be at most 100000"),
    (BASE + "report: {permutations: 10000000}\n", "report.permutations: must be at most 1000000"),
])
def test_plan_text_problems_are_one_line(tmp_path, text, expected):
    path = _plan(tmp_path, text)
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message, message


def test_a_non_utf8_and_a_deeply_nested_plan_are_one_line(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_bytes(b"name: p\xe9\n")
    with pytest.raises(PlanError, match=r"not UTF-8 text \(byte 7\)"):
        load_plan(path)
    path.write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(PlanError, match="nested too deeply|not valid YAML"):
        load_plan(path)
    path.write_text("name: p\n" + "x" * (1024 ** 2), encoding="utf-8")
    with pytest.raises(PlanError, match="a plan is at most 1 MiB"):
        load_plan(path)


def test_units_are_counted_before_anything_and_capped(tmp_path):
    """A 10^8-unit matrix took 7.6 GB before it printed anything: now it is refused at once, with the count."""
    values = ", ".join(str(i) for i in range(100))
    text = ("name: p\nmodels: [{name: a, model: m}]\n"
            f"datasets: [{{dataset: winopron, matrix: {{top_k: [{values}], temperature: [{values}], "
            f"seed: [{values}], samples: [{values}]}}}}]\n")
    plan = load_plan(_plan(tmp_path, text))
    with pytest.raises(PlanError, match=re.escape("expands to 100,000,000 units, more than max_units (1,000); "
                                                  "set max_units: 100000000")):
        expand(plan)  # counted from the matrix, no unit built (10^8 of them would take gigabytes)
    sharded = load_plan(_plan(tmp_path, BASE + "shards: 10000\n"))
    with pytest.raises(PlanError, match="expands to 10,000 units"):
        expand(sharded, validate=False)
    allowed = load_plan(_plan(tmp_path, BASE.replace("datasets:", "max_units: 2000\ndatasets:") + "shards: 1500\n"))
    assert len(expand(allowed, validate=False)) == 1500


def _hosted_plan(tmp_path, data_dir, url: str, model_cap: str = "", plan_cap: str = "") -> Path:
    """One hosted model x three units (a matrix of seeds), priced."""
    path = tmp_path / "plan.yaml"
    path.write_text(
        f"name: hosted\ndb: w.duckdb\ndata_dir: {data_dir}\n{plan_cap}models:\n"
        f"  - {{name: stub, model: stub-model, backend: openai-chat, api_key_env: STUB_KEY,\n"
        f"     engine_args: {{base_url: '{url}', extensions: true, price_in: 2.0, price_out: 8.0{model_cap}}}}}\n"
        "datasets:\n  - {dataset: winopron, limit: 6, where: {context: unprimed, option_order: MF}, "
        "settings: {mode: sample, samples: 3, top_k: 0}, matrix: {seed: [1, 2, 3]}}\n", encoding="utf-8")
    return path


def test_a_models_cost_cap_covers_all_its_units_and_the_dry_run_says_so(tmp_path, data_dir, monkeypatch):
    """Issue 67, item 5: `max_cost` capped each unit, so 3 units each under the cap spent 2.3x it. The cap now
    covers the model's units together: the dry run prints the total per model and for the plan and flags it, and
    the run sends nothing to a model over its cap, says why per unit, and exits 1."""
    from click.testing import CliRunner

    from biaslab.cli.main import biaslab
    from biaslab.runners.audit import budget
    from chat_stub import ChatStub

    stub = ChatStub(extensions=True)
    monkeypatch.setenv("STUB_KEY", "sk-test")
    try:
        open_plan = _hosted_plan(tmp_path, data_dir, stub.url)
        priced = budget(load_plan(open_plan), expand(load_plan(open_plan)))
        per_unit = [cost for _, cost, _ in priced.units.values()]
        assert len(per_unit) == 3 and priced.total == pytest.approx(sum(per_unit)) and not priced.refused
        cap = round(1.5 * max(per_unit), 6)  # above every unit's own cost, below their sum
        assert max(per_unit) < cap < sum(per_unit)
        plan = _hosted_plan(tmp_path, data_dir, stub.url, model_cap=f", max_cost: {cap}")
        dry = CliRunner().invoke(biaslab, ["audit", str(plan), "--dry-run"])
        assert dry.exit_code == 0 and f"hosted cost: stub: about ${sum(per_unit):.4f} for its units (max_cost " \
            f"${cap:g}: OVER, none of them will run)" in dry.output, dry.output
        ran = CliRunner().invoke(biaslab, ["audit", str(plan), "--yes"])
        assert ran.exit_code == 1 and stub.completions == 0, ran.output
        assert ran.output.count("refused stub · winopron") == 3 and "above its max_cost" in ran.output
        assert "3 units, 0 computed, 0 already stored, 3 refused" in ran.output
        plan_capped = _hosted_plan(tmp_path, data_dir, stub.url, plan_cap=f"max_cost: {cap}\n")
        over = CliRunner().invoke(biaslab, ["audit", str(plan_capped), "--yes"])
        assert over.exit_code == 1 and stub.completions == 0 and "above its max_cost" in over.output
        fits = _hosted_plan(tmp_path, data_dir, stub.url, model_cap=f", max_cost: {2 * sum(per_unit):.6f}")
        done = CliRunner().invoke(biaslab, ["audit", str(fits)])  # no terminal: the cap is the agreement
        assert done.exit_code == 0 and "3 units, 3 computed" in done.output and stub.completions > 0, done.output
    finally:
        stub.close()


def test_status_reads_the_queue_after_every_unit_is_surveyed(tmp_path, monkeypatch):
    """Issue 67, item 13: `audit status` surveyed each unit (a model's tokenizer each) after reading `squeue`, so the
    queue it showed was as old as the surveys took. Now every survey comes first, the queue and task states last."""
    import biaslab.runners.audit.slurm as slurm
    import biaslab.runners.collect as collect_module
    from biaslab.runners.collect import Survey

    plan = load_plan(_plan(tmp_path, "name: p\nmodels: [{name: a, model: m}, {name: b, model: n}]\n"
                                     "datasets: [{dataset: crows-pairs}]\n"))
    calls: list[str] = []
    monkeypatch.setattr(collect_module, "surveys", lambda configs, prepare: calls.append(f"surveys {prepare}")
                        or [Survey("k", 1, 2, 2) for _ in configs])
    monkeypatch.setattr(slurm, "queued", lambda: calls.append("squeue") or {})
    monkeypatch.setattr(slurm, "submitted", lambda plan: {"elsewhere": "7_0"})  # a job submitted: Slurm is asked
    rows = slurm.unit_states(plan, expand(plan, validate=False))
    assert calls == ["surveys started", "squeue"]  # every unit surveyed (models read only for unfinished work)
    assert [r["state"] for r in rows] == ["not started", "not started"] and rows[0]["requests"] == 2
