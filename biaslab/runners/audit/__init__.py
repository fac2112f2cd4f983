"""Audit plans: models x datasets in one file (`biaslab audit PLAN`), expanded into units of work and run one after
another in this process (`run_local`) or as one Slurm job array with a dependent merge job (`submit_slurm`).

A plan (YAML, `Plan`) lists models (a name, the `--model` and the engine's settings, never a key: a hosted model
names the environment variable that holds it) and datasets (with the protocol and its settings, limits, `--where`,
and an optional matrix of settings). It is validated whole before anything runs: unknown keys are refused and the
first problem is one line naming the file and the place (``plan.yaml: models[1].dtype: ...``); every unit's
`CollectConfig` is validated as `runners collect` validates its flags.

A unit is one collection (model x dataset x protocol x settings) and, with ``shards: N``, one shard of it. Its
identity is the collection's own: what it stores is keyed by the model key, the dataset, the protocol and the
settings, so a unit already stored is found by `survey` (read-only) and skipped, and a rerun computes only what is
missing (`collect` resumes). Slurm tasks each write their unit into a shard file of their own
(``WORKDIR/shards/<collection>/shard-i-of-n.duckdb``), and the merge job merges each collection's folder into the
plan's warehouse (`biaslab warehouse merge`, idempotent).

Slurm is driven through its own commands (`sbatch --array`, `squeue`, `scancel`): no scheduler of our own. A task
records its state in ``WORKDIR/tasks/<unit>.json`` (running, finished, failed, with the Slurm job and the error), so
`status` can say what failed without Slurm's accounting database.
"""

from .budget import Budget, billed, budget
from .local import run_local
from .plan import (DatasetEntry, ModelEntry, Plan, PlanError, ReportEntry, SlurmEntry, Unit, expand, load_plan,
                   model_keys)
from .slurm import (merge_all, pending_jobs, queued, read_state, run_task, sbatch_script, submit_slurm, submitted,
                    unit_states)

__all__ = ["Plan", "ModelEntry", "DatasetEntry", "SlurmEntry", "ReportEntry", "Unit", "PlanError", "load_plan",
           "expand", "model_keys", "run_local", "sbatch_script", "submit_slurm", "run_task", "merge_all", "queued",
           "submitted", "pending_jobs", "unit_states", "read_state", "Budget", "billed", "budget"]
