"""`biaslab audit --executor slurm` against a real Slurm: the one-node cluster of `scripts/slurm-one-node.sh`
(slurmctld and slurmd on 127.0.0.1, Debian's slurm-wlm and munge), which `.ci/run` starts.

A plan of 2 tiny models x 2 datasets x 2 shards runs as one job array and a dependent merge job; one task is
cancelled with `scancel` while it waits, `biaslab audit status` names it failed, a second `biaslab audit` submits
only that unit, and the merged warehouse equals a local run of the same plan row for row."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab

from test_audit import _evidence, second_tiny, write_plan  # noqa: F401 - second_tiny is a fixture

#: seconds a submission may take to end (8 tasks of ~6 s each, two at a time, then the merge)
WAIT_S = 600


def cluster_up() -> str:
    """"" when a Slurm node answers here, else why not."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "Slurm is not installed (apt-get install slurm-wlm munge; bash scripts/slurm-one-node.sh start)"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout
    except subprocess.TimeoutExpired:
        return "sinfo does not answer"
    if not any(s.strip() in ("idle", "mixed", "allocated") for s in states.splitlines()):
        return "no Slurm node is up (bash scripts/slurm-one-node.sh start)"
    return ""


needs_cluster = pytest.mark.skipif(bool(cluster_up()), reason=cluster_up() or "")


def run(*args: str):
    result = CliRunner().invoke(biaslab, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def wait_for(job: str) -> None:
    """Until Slurm no longer lists `job` (queued or running)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        listed = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True, text=True).stdout
        if not listed.strip():
            return
        time.sleep(1)
    pytest.fail(f"Slurm job {job} did not end within {WAIT_S} s: {listed}")


def submitted(output: str) -> tuple[str, str, int]:
    """(array job id, merge job id, tasks) from `biaslab audit --executor slurm`'s output."""
    import re

    found = re.search(r"submitted job array (\d+) \((\d+) tasks, one per unit\) and merge job (\d+)", output)
    assert found, output
    return found[1], found[3], int(found[2])


@needs_cluster
def test_a_plan_runs_as_a_slurm_array_a_cancelled_task_is_rerun_and_the_merge_equals_a_local_run(
        tmp_path, data_dir, tiny_gpt2_dir, second_tiny):  # noqa: F811 - the fixture
    plan = write_plan(tmp_path, [("a", tiny_gpt2_dir), ("b", second_tiny)], data_dir, shards=2, db="s.duckdb",
                      extra="slurm: {max_parallel: 2, cpus_per_task: 1}\n")
    array, merge, tasks = submitted(run("audit", str(plan), "--executor", "slurm"))
    assert tasks == 8
    subprocess.run(["scancel", f"{array}_7"], check=True)  # the last task: still waiting (two run at a time)
    wait_for(merge)
    states = json.loads(run("audit", "status", str(plan), "--format", "json"))
    assert [s["state"] for s in states] == ["stored"] * 7 + ["failed"], states
    assert states[7]["job"] == f"{array}_7" and "without starting" in states[7]["error"]
    log = (tmp_path / "s.duckdb.audit" / "logs" / f"{merge}.out").read_text()
    assert "7 of 8 units stored" in log and f"not stored: {states[7]['unit']}: failed" in log, log

    array2, merge2, tasks2 = submitted(run("audit", str(plan), "--executor", "slurm"))
    assert tasks2 == 1 and array2 != array
    wait_for(merge2)
    states = json.loads(run("audit", "status", str(plan), "--format", "json"))
    assert [s["state"] for s in states] == ["stored"] * 8, states
    assert "8 of 8 units stored" in (tmp_path / "s.duckdb.audit" / "logs" / f"{merge2}.out").read_text()

    local = tmp_path / "local.duckdb"
    run("audit", str(plan), "--db", str(local))
    merged, here = _evidence(tmp_path / "s.duckdb"), _evidence(local)
    assert sum(len(v) for v in merged.values()) > 1000
    assert merged == here
    again = run("audit", str(plan), "--executor", "slurm")
    assert "nothing to compute" in again  # a third submission: only a merge job, which adds nothing
    wait_for(again.split("merge job ")[1].split(" ")[0].split(";")[0])
    assert _evidence(tmp_path / "s.duckdb") == here


def test_the_batch_scripts_carry_the_plans_slurm_options(tmp_path, data_dir, tiny_gpt2_dir):
    from biaslab.runners.audit import load_plan, sbatch_script

    plan = load_plan(write_plan(tmp_path, [("a", tiny_gpt2_dir)], data_dir, extra=(
        "slurm: {partition: gpu, time: '01:00:00', gpus_per_task: 1, account: lab, mem: 16G, "
        "setup: 'source env/bin/activate', sbatch_args: [--qos=low]}\n")))
    script = sbatch_script(plan, "biaslab audit task p.yaml --task \"$SLURM_ARRAY_TASK_ID\"", array="0-3",
                           job_name="biaslab-tiny", log="logs/%A_%a.out")
    lines = script.splitlines()
    assert lines[:4] == ["#!/bin/bash", "#SBATCH --job-name=biaslab-tiny", "#SBATCH --output=logs/%A_%a.out",
                         "#SBATCH --array=0-3"]
    assert {"#SBATCH --partition=gpu", "#SBATCH --time=01:00:00", "#SBATCH --gpus-per-task=1",
            "#SBATCH --account=lab", "#SBATCH --mem=16G", "#SBATCH --qos=low"} <= set(lines)
    assert lines[-3:] == ["set -eo pipefail", "source env/bin/activate",
                          'exec biaslab audit task p.yaml --task "$SLURM_ARRAY_TASK_ID"']
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr
    assert Path(plan.work_folder).name == "w.duckdb.audit"
