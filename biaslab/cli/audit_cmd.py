"""`biaslab audit`: an audit plan (models x datasets in one YAML file) run here or as a Slurm job array, its state,
and its leaderboard (`biaslab.runners.audit`, `biaslab.metrics.leaderboard`)."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from pathlib import Path

import click

from .common import Group

PLAN = click.argument("plan", type=click.Path(dir_okay=False, exists=True))
DB = click.option("--db", "db", type=click.Path(dir_okay=False), default=None,
                  help="Warehouse (default: the plan's `db`, relative to the plan file).")


class AuditGroup(Group):
    """`biaslab audit PLAN ...` runs the plan (the `run` subcommand); `biaslab audit status|report|merge PLAN` the
    others."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("audit", cls=AuditGroup, context_settings={"help_option_names": ["-h", "--help"]},
             short_help="Run an audit plan (models x datasets in one file) here or on Slurm; its state and "
                        "leaderboard.")
def audit_group() -> None:
    """Audit plans: models x datasets in one YAML file (see examples/audit-two-models.yaml and docs/scaling.md).

    \b
      biaslab audit PLAN --dry-run            the units, what is stored, the estimated cost; writes nothing
      biaslab audit PLAN                      run every unit here, one after another (a rerun resumes)
      biaslab audit PLAN --executor slurm     one Slurm job array (a task per unit) and a merge job after it
      biaslab audit status PLAN               stored, running, pending or failed, per unit
      biaslab audit report PLAN --out DIR     the leaderboard: a row per model, a column per headline measure
    """


def _plan(plan: str, db: str | None, validate: bool = True):
    from ..runners.audit import expand, load_plan

    loaded = load_plan(plan, db)
    return loaded, expand(loaded, validate=validate)


def _count(n: int, what: str = "unit") -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _table(title: str, rows: list[dict], columns: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(row.get(c, "")) for c in columns))
    Console(width=max(shutil.get_terminal_size((140, 24)).columns, 100)).print(table)


@audit_group.command("run")
@PLAN
@DB
@click.option("--executor", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="local: every unit in this process, one after another; slurm: one job array (a task per unit, "
                   "each into its own shard file) and a merge job that runs after every task has ended.")
@click.option("--dry-run", is_flag=True,
              help="List the units, what each has stored and what it would compute, and the estimated cost of "
                   "hosted models; runs nothing and writes nothing to the warehouse or the plan's folders. Reads "
                   "no model computed here (no tokenizer, no GGUF conversion): a unit whose work finished is "
                   "answered from its run's record; one that never finished shows '?' for what needs the model.")
@click.option("--yes", "-y", is_flag=True, help="Hosted models: send without asking (the cost is still printed).")
def run_command(plan: str, db: str | None, executor: str, dry_run: bool, yes: bool) -> None:
    """Run the audit PLAN: every model x dataset x settings (x shard) unit whose evidence is not stored yet.

    The plan is validated whole first (one line naming the place otherwise). Units already stored are skipped, and
    an interrupted unit resumes: rerunning the plan computes only what is missing.
    """
    loaded, units = _plan(plan, db)
    if dry_run:
        _dry_run(loaded, units)
        return
    if executor == "slurm":
        _submit(loaded, units, Path(plan))
        return
    _local(loaded, units, yes)


def _dry_run(plan, units) -> None:
    from ..runners.collect import surveys

    rows, pending, requests, surveyed, unknown = [], 0, 0, {}, 0
    for unit, found in zip(units, surveys([u.config for u in units], prepare=False)):
        if found is None:  # a model computed here, no finished run of this work: not prepared in a dry run
            unknown += 1
            rows.append({"unit": unit.label, "model key": "?", "stimuli": "?", "requests": "?", "stored": "?",
                         "to compute": "?", "estimate": "known once the model is read"})
            continue
        surveyed[unit.name] = found
        pending += found.pending
        requests += found.requests
        rows.append({"unit": unit.label, "model key": found.model_key[:12], "stimuli": found.stimuli,
                     "requests": found.requests, "stored": found.requests - found.pending, "to compute": found.pending,
                     "estimate": found.estimate or ("-" if found.pending else "nothing to do")})
    _table(f"audit {plan.name}: {_count(len(units))} into {plan.database}", rows,
           ["unit", "model key", "stimuli", "requests", "stored", "to compute", "estimate"])
    todo = sum(1 for r in rows if r["to compute"] != "?" and r["to compute"])
    unread = f", {unknown} not known without their model" if unknown else ""
    click.echo(f"{_count(len(units))}: {todo} with work to do, {len(units) - todo - unknown} stored{unread}; "
               f"{pending} of {requests} requests to compute (dry run: nothing was run or written)")
    if unknown:
        click.echo(f"{_count(unknown)} of models computed here (hf, vllm) have no finished run of their work: a dry "
                   f"run reads no such model (no tokenizer, no GGUF conversion), so their model key and requests are "
                   f"known once the model is read (`biaslab audit run` reads it and computes them)")
    from ..runners.audit import budget

    for line in budget(plan, units, surveyed).lines():
        click.echo(f"hosted cost: {line}")


def _local(plan, units, yes: bool) -> None:
    from ..runners.audit import run_local
    from .progress import progress_bar, work_factory
    from .runners_collect import confirmation, has_cost_cap, interrupted_line

    started = time.perf_counter()
    bar, _ = progress_bar(f"audit {plan.name}")
    overall = None
    lines: list[str] = []
    current = {}
    computed = []

    def progress(unit):
        nonlocal overall
        current["unit"] = unit
        if overall is None:
            if not bar.live_started:
                bar.start()
            overall = bar.add_task(f"audit {plan.name}: units", total=len(units), completed=0, resumed=0,
                                   last=None, first=None)
        return work_factory(bar, unit.label)

    def on_unit(unit, result):
        line = (f"{unit.label}: {result.requests} requests, {result.pending} pending, {result.added} "
                f"{result.added_unit} added (model {result.model_key[:12]}, run {result.run_id[:8]})")
        lines.append(line)
        computed.extend([unit] if result.pending else [])
        if overall is not None:
            bar.update(overall, advance=1, last=time.monotonic())
            for task in list(bar.tasks):  # one bar for the plan, one for the unit at work
                if task.id != overall:
                    bar.remove_task(task.id)
        if not bar.console.is_terminal:
            bar.console.print(line, soft_wrap=True, highlight=False, markup=False)

    from ..runners.audit import billed, budget

    priced = budget(plan, units)  # nothing sent: a model (or the plan) over its cap has none of its units run
    refused = dict(priced.refused)
    try:
        with bar:
            capped = all(has_cost_cap(u.config) for u in units if billed(u)) or plan.max_cost is not None
            run_local(units, progress=progress, on_unit=on_unit,
                      confirm=confirmation(bar, yes, capped=lambda: capped), refused=refused)
    except KeyboardInterrupt:
        unit = current.get("unit")
        again = shlex.join(["biaslab", "audit", str(plan.path), "--db", str(plan.database)])
        click.echo(f"audit {plan.name}: " + (interrupted_line(unit.config).replace(unit.config.command_line(), again)
                                             if unit else f"interrupted; resume with {again}"), err=True)
        raise SystemExit(130) from None
    if bar.console.is_terminal:
        for line in lines:
            click.echo(line)
    _summary(plan, units, len(computed), refused, priced.lines(), time.perf_counter() - started)


def _summary(plan, units, computed: int, refused: dict[str, str], costs: list[str], seconds: float) -> None:
    """The run's last lines: the hosted costs, the units computed, stored and refused, and why each refused one was
    (exit 1 when any was)."""
    stored = len(units) - computed - len(refused)
    for line in costs:
        click.echo(f"hosted cost: {line}")
    click.echo(f"audit {plan.name}: {_count(len(units))}, {computed} computed, {stored} already stored, "
               f"{len(refused)} refused, in {seconds:.1f} s; warehouse {plan.database}")
    if refused:
        labels = {u.name: u.label for u in units}
        for name, why in refused.items():
            click.echo(f"refused {labels.get(name, name)}: {why}", err=True)
        raise SystemExit(1)


def _submit(plan, units, plan_file: Path) -> None:
    from ..runners.audit import pending_jobs, submit_slurm
    from ..runners.collect import survey, surveys

    busy = pending_jobs(plan)
    todo, skipped = [], []
    for unit, found in zip(units, surveys([u.config for u in units])):  # each model prepared once
        if found.pending == 0:
            skipped.append(f"{unit.label}: stored")
        elif unit.name in busy:
            skipped.append(f"{unit.label}: its task is still queued or running")
        elif Path(unit.shard_config(plan.work_folder).database()).exists() and \
                survey(unit.shard_config(plan.work_folder)).pending == 0:
            skipped.append(f"{unit.label}: stored in its shard file, merged by the merge job")
        else:
            todo.append(unit)
    array, merge, folder = submit_slurm(plan, todo, plan_file.resolve())
    for line in skipped:
        click.echo(f"skipped {line}")
    if array:
        click.echo(f"submitted job array {array} ({len(todo)} tasks, one per unit) and merge job {merge} "
                   f"(afterany:{array}); scripts and the task list in {folder}")
    else:
        click.echo(f"nothing to compute: submitted merge job {merge} only; scripts in {folder}")
    click.echo(f"follow it: biaslab audit status {plan_file}; logs in {plan.work_folder / 'logs'}")


@audit_group.command("status")
@PLAN
@DB
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
def status_command(plan: str, db: str | None, fmt: str) -> None:
    """Per unit of PLAN: stored, partly stored, running or pending (Slurm's queue), failed (with the task's error),
    stored in its shard file (not merged yet), or not started; from the warehouse, the tasks' state files and
    `squeue`. Reads only."""
    from ..runners.audit import unit_states

    loaded, units = _plan(plan, db, validate=False)  # reads only: a unit's engine is imported only if it is read
    rows = unit_states(loaded, units)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    _table(f"audit {loaded.name}: {len(units)} units in {loaded.database}", rows,
           ["unit", "state", "requests", "stored", "job", "error"])
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    click.echo(", ".join(f"{n} {state}" for state, n in counts.items()))


@audit_group.command("task", hidden=True)
@PLAN
@DB
@click.option("--job", type=click.Path(file_okay=False, exists=True), required=True)
@click.option("--task", type=int, required=True)
def task_command(plan: str, db: str | None, job: str, task: int) -> None:
    """One task of a submitted job array (run by Slurm): collect its unit into its shard file."""
    from ..runners.audit import run_task
    from .progress import progress_bar

    loaded, units = _plan(plan, db)
    bar, factory = progress_bar(f"audit {loaded.name} task {task}")
    with bar:
        run_task(loaded, units, Path(job), task, progress=factory)
    click.echo(f"task {task}: finished")


@audit_group.command("merge")
@PLAN
@DB
def merge_command(plan: str, db: str | None) -> None:
    """Merge every unit's shard files (WORKDIR/shards/) into the plan's warehouse (idempotent), then list the units
    that failed or are missing. The Slurm executor's merge job runs this after every task has ended."""
    from ..runners.audit import merge_all, unit_states

    loaded, units = _plan(plan, db)
    for collection, added in merge_all(loaded):
        click.echo(f"{collection}: " + (", ".join(f"{t} +{n}" for t, n in added.items() if n) or "nothing new"))
    missing = [r for r in unit_states(loaded, units) if r["state"] != "stored"]
    for row in missing:
        click.echo(f"not stored: {row['unit']}: {row['state']}" + (f" ({row['error']})" if row["error"] else ""))
    click.echo(f"{len(units) - len(missing)} of {len(units)} units stored in {loaded.database}"
               + (f"; rerun `biaslab audit {plan} --executor slurm` for the rest" if missing else ""))


@audit_group.command("report")
@PLAN
@DB
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Folder of the report.")
@click.option("--study-reports/--no-study-reports", default=True, show_default=True,
              help="Also write each study's own report under OUT/studies/ (the leaderboard links them).")
@click.option("--view-url", default=None, metavar="URL",
              help="Where `biaslab view` answers for the leaderboard's view links (default http://127.0.0.1:8765, "
                   "`biaslab view`'s default; give the host and port you run it on).")
def report_command(plan: str, db: str | None, out: str, study_reports: bool, view_url: str | None) -> None:
    """The leaderboard of PLAN: OUT/index.html (sortable), OUT/leaderboard.json and OUT/leaderboard.csv, a row per
    model and a column per headline measure of each study (the value, its 95% interval, its coverage), with each
    model's paired comparison against the reference model (the plan's `report.reference`, else its first model),
    Holm and Benjamini-Hochberg adjusted across the table. Reads only the warehouse (and writes OUT)."""
    from ..errors import UsageError
    from ..metrics.leaderboard import leaderboard
    from ..runners.audit import model_keys

    loaded, units = _plan(plan, db)
    if not loaded.database.exists():
        raise UsageError(f"no warehouse at {loaded.database}: run the plan first (biaslab audit {plan})")
    keys = model_keys(loaded, units)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    observations, links, view_links, notes = _observations(loaded, out_dir, study_reports, _view_url(view_url))
    tables = leaderboard(observations, {key: name for name, key in keys.items()}, keys[loaded.reference],
                         bootstrap=loaded.report.bootstrap, permutations=loaded.report.permutations,
                         seed=loaded.report.seed)
    if notes:
        import pandas as pd

        tables["notes"] = pd.concat([tables["notes"], pd.DataFrame({"note": notes})], ignore_index=True)
    index = _write_leaderboard(loaded, keys, tables, out_dir, links, view_links)
    width = tables["cells"][["study", "measure", "group"]].drop_duplicates().shape[0]
    click.echo(f"wrote {index} ({len(keys)} models x {width} columns), {out_dir / 'leaderboard.csv'}, "
               f"{out_dir / 'leaderboard.json'}")
    for note in tables["notes"]["note"]:
        click.echo(f"note: {note}", err=True)


def _studies_of(plan, handle) -> list[tuple[str, dict]]:
    """(study, its options) for the plan's datasets: each study with comparisons that reads one of them, and for
    each dataset no such study reads (a user's own) the counterfactual study where the warehouse (`handle`) holds it
    as a counterfactual audit, else the options study."""
    from ..metrics.registry import get_study, studies

    wanted = list(dict.fromkeys(e.dataset for e in plan.datasets))
    chosen = [(name, {}) for name, study in studies().items()
              if study.compare is not None and name != "options" and set(study.dataset_names) & set(wanted)]
    covered = {d for name, _ in chosen for d in get_study(name).dataset_names}
    from ..metrics.counterfactual.tables import audits

    found = audits(handle)  # the counterfactual audits loaded into the plan's warehouse
    return chosen + [("counterfactual" if d in found else "options", {"dataset": d}) for d in wanted
                     if d not in covered]


def _view_url(given: str | None) -> str:
    """The base URL of the view links: `given` (http or https, a host, an optional port, no path, query or
    credentials), else `biaslab view`'s default."""
    from urllib.parse import urlsplit

    from .common import VIEW_URL

    if given is None:
        return VIEW_URL
    parts = urlsplit(given)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query \
            or parts.fragment or parts.username or parts.password or not port_ok:
        raise click.BadParameter("give http(s)://HOST[:PORT] (no path, query or credentials)", param_hint="--view-url")
    return f"{parts.scheme}://{parts.netloc}"


def _observations(plan, out_dir: Path, study_reports: bool, view_url: str):
    """(study label, its comparison observations) per study of the plan, the links to the study reports written
    under OUT/studies/ and to their `biaslab view` pages, and a note for each study without evidence or report."""
    from ..errors import NoEvidence
    from ..metrics.registry import get_study
    from urllib.parse import urlencode

    from ..warehouse.handle import open_warehouse
    from .metrics_cmd import write_study_report

    observations, links, view_links, notes = [], {}, {}, []
    with open_warehouse(str(plan.database)) as handle:
        for name, options in _studies_of(plan, handle):
            label = f"{name}:{options['dataset']}" if options.get("dataset") else name
            try:
                observations.append((label, get_study(name).comparer(handle, **options)))
            except NoEvidence as exc:
                notes.append(f"{label}: {exc}")
                continue
            view_links[label] = f"{view_url}/study/{name}" + (f"?{urlencode(options)}" if options else "")
            if study_reports and get_study(name).report is not None:
                folder = out_dir / "studies" / label.replace(":", "-")
                why = write_study_report(name, options, folder, str(plan.database))
                if why:
                    notes.append(f"{label}: no study report: {why}")
                else:
                    links[label] = f"studies/{folder.name}/index.html"
    return observations, links, view_links, notes


def _write_leaderboard(plan, keys: dict[str, str], tables: dict, out_dir: Path, links: dict, view_links: dict
                       ) -> Path:
    """OUT/index.html, OUT/leaderboard.csv (a row per cell, its comparison beside it) and OUT/leaderboard.json."""
    from ..metrics.html_report import write_page
    from ..metrics.leaderboard import leaderboard_html
    from ..metrics.results import records

    page = leaderboard_html(tables, title=f"Audit {plan.name}: leaderboard", db=str(plan.database),
                            reference=plan.reference, links=links, view_links=view_links)
    index = write_page(out_dir, f"Audit {plan.name}", [page])
    compared = ("estimate", "ci_low", "ci_high", "p_value", "p_holm", "p_bh", "test", "n_items", "n_excluded",
                "low_coverage")
    merged = tables["cells"].merge(
        tables["comparisons"].drop(columns=["value", "valid_share"]).rename(
            columns={c: f"{c}_vs_reference" for c in compared}),
        on=["row", "study", "measure", "group"], how="left")
    merged.to_csv(out_dir / "leaderboard.csv", index=False)
    (out_dir / "leaderboard.json").write_text(json.dumps(
        {"plan": plan.name, "warehouse": str(plan.database), "reference": plan.reference,
         "models": keys, "cells": records(tables["cells"]), "comparisons": records(tables["comparisons"]),
         "notes": list(tables["notes"]["note"])}, indent=1, allow_nan=False), encoding="utf-8")
    return index

