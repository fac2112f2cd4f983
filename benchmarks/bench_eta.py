"""How true the progress bar's ETA is over a real exact-mode collection, against the time the run really took.

Usage: python benchmarks/bench_eta.py [--prompts 3600] [--dtype bf16|fp32] [--baseline-order]

Runs `runners.collect.collect` (what `runners collect --dataset winopron --limit N` runs) into a fresh warehouse
with the bar `runners collect` draws (`cli.progress.progress_bar`, never started: nothing is drawn) and records,
at each report, the bar's rate and the seconds it would show left. When the run has ended, every report's ETA is
set against the seconds that were really left (the last report to the run's end):

    ratio = ETA shown / seconds really left          (1 is exact; 0.5 says half the truth)

Printed: the first ETA and its ratio; the ETA the bar showed at 10%, 25%, 50% and 75% of the run (counted down
from the report before, as the bar does); the worst ratio (farthest from 1 by factor) over the reports after the
first, and over those from 30 s on (reports with under 5 s left are left out). --baseline-order runs
the explorations in `explorations` order (by group, cheapest first) instead of `spread` order, in the same process
after the production run, for the ratio side by side. Only public entry points are used, so the script also
measures an older checkout (`PYTHONPATH=<old tree> python benchmarks/bench_eta.py`); there, reports come as the
older code made them. JSON goes to bench_out/eta_<dtype>.json with every report.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import cpu_facts, first_prompts, write_json
from biaslab.cli.progress import average_rate, progress_bar, remaining_seconds
from biaslab.engines.hf.loading import load_model
from biaslab.runners.collect import CollectConfig, collect

#: fractions of the run at which the shown ETA is reported
MOMENTS = (0.1, 0.25, 0.5, 0.75)


def recorded_run(loaded, db: Path, prompts: int, data_dir: str | None) -> tuple[list[dict], float, float]:
    """Collect `prompts` WinoPron prompts into `db` with the bar recording each report: the reports (seconds since
    the bar started, items done, rate, ETA shown), when the bar started and when the run ended (monotonic)."""
    progress, factory = progress_bar("eta")
    reports: list[dict] = []
    started: list[float] = []

    def recording(total: int, done: int):
        advance = factory(total, done)
        task = progress.tasks[-1]
        started.append(time.monotonic())

        def report(n: int) -> None:
            advance(n)
            now = time.monotonic()
            reports.append({"t": now - started[0], "done": task.completed, "rate": average_rate(task),
                            "eta": remaining_seconds(task, now)})
        return report

    collect(CollectConfig(dataset="winopron", db=str(db), data_dir=data_dir, **first_prompts(prompts)),
            progress=recording, loaded=loaded)
    return reports, started[0], time.monotonic()


def summary(reports: list[dict], started: float, ended: float) -> dict:
    """The first ETA, the ETA shown at `MOMENTS` of the run and the worst ratio from 30 s on (module docstring)."""
    total = ended - started
    shown = [r for r in reports if r["eta"] is not None]
    for r in shown:
        r["truth"] = total - r["t"]
        r["ratio"] = r["eta"] / r["truth"] if r["truth"] > 0 else None
    at = {}
    for moment in MOMENTS:
        t = moment * total
        before = [r for r in shown if r["t"] <= t]
        if before:
            eta = max(0.0, before[-1]["eta"] - (t - before[-1]["t"]))
            at[f"{moment:.0%}"] = {"eta": eta, "truth": total - t, "ratio": eta / (total - t)}
    def worst(ratios: list) -> float | None:  # the ratio farthest from 1 (by factor: 0.5 and 2 are as bad)
        ratios = [x for x in ratios if x]
        return max(ratios, key=lambda x: max(x, 1 / x)) if ratios else None

    usable = [r for r in shown if r["ratio"] is not None and r["truth"] >= 5]
    return {"seconds": total, "reports": len(reports), "first": shown[0] if shown else None, "at": at,
            "worst_after_first": worst([r["ratio"] for r in usable[1:]]),
            "worst_from_30s": worst([r["ratio"] for r in usable if r["t"] >= 30]), "every_report": reports}


def line(label: str, s: dict) -> str:
    first = s["first"]
    moments = ", ".join(f"{k} {v['eta']:.0f} s / {v['truth']:.0f} s ({v['ratio']:.2f})" for k, v in s["at"].items())
    worst = {k: f"{s[k]:.2f}" if s[k] is not None else "n/a" for k in ("worst_after_first", "worst_from_30s")}
    return (f"{label}: {s['seconds']:.1f} s, {s['reports']} reports; first ETA {first['eta']:.0f} s at "
            f"{first['t']:.1f} s with {first['done']} done, truth {first['truth']:.0f} s (ratio {first['ratio']:.2f}); "
            f"shown / truth at {moments}; worst ratio after the first report {worst['worst_after_first']}, "
            f"from 30 s on {worst['worst_from_30s']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default=None, help="bf16 / fp32 (default: the CPU's default dtype)")
    ap.add_argument("--prompts", type=int, default=3600)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--baseline-order", action="store_true",
                    help="also run the explorations in `explorations` order (by group), after the production run")
    args = ap.parse_args()

    loaded = load_model(args.model, dtype=args.dtype)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["production"] = summary(*recorded_run(loaded, Path(tmp) / "a.duckdb", args.prompts, args.data_dir))
        if args.baseline_order:
            from biaslab.runners.protocols import choice

            production_order, choice.spread = choice.spread, lambda walks: walks
            try:
                results["by_group"] = summary(*recorded_run(loaded, Path(tmp) / "b.duckdb", args.prompts,
                                                            args.data_dir))
            finally:
                choice.spread = production_order
    path = write_json(f"eta_{loaded.spec.dtype}", {"model": args.model, "dtype": loaded.spec.dtype,
                                                   "prompts": args.prompts, **cpu_facts(), "runs": results})
    print(f"{args.prompts} WinoPron prompts (exact), {args.model} {loaded.spec.dtype}, CPU {cpu_facts()['cpu_model']}")
    for label, s in results.items():
        print(line(label, s))
    print(f"json: {path}")
    print(f"eta_worst_ratio_from_30s={results['production']['worst_from_30s']}")


if __name__ == "__main__":
    main()
