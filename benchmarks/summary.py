"""One table of the latest benchmark results: each benchmark's key ratios, their targets, and its peak memory.

Usage: python benchmarks/summary.py [--markdown] [--dir bench_out]

Reads the JSON every `bench_*.py` script writes to bench_out/ (run them first; each is one command) and prints one
row per headline number: the benchmark, what is measured, the value, the target from issue 9, whether it is met, and
the peak resident memory the script recorded. Benchmarks without a target (e.g. append throughput) show "-".
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import OUT_DIR

Row = tuple[str, str, str, bool | None]  # measure, value, target, met (None: no target)


def _ratio(v: float) -> str:
    return f"{v:,.2f}x" if v < 100 else f"{v:,.0f}x"


def warehouse_append(d: dict[str, Any]) -> list[Row]:
    return [(f"bulk append, {d['rows']:,} token rows", f"{d['bulk_rows_per_s']:,.0f} rows/s", "-", None),
            ("bulk vs row-by-row INSERT", _ratio(d["ratio_bulk_vs_row_by_row"]), "-", None)]


def scoring(d: dict[str, Any]) -> list[Row]:
    eff = d["efficiency_vs_bare_forward"]
    diff = d["max_abs_logprob_diff_vs_naive_fp32"]
    return [("biaslab vs naive per-candidate loop", _ratio(d["speedup_vs_naive"]), "-", None),
            ("efficiency: throughput vs bare forward", f"{eff:.2f}", ">= 0.8", eff >= 0.8),
            ("efficiency without prefix sharing", f"{d['efficiency_no_sharing_vs_bare_forward']:.2f}", "-", None),
            ("fp32 max abs token logprob diff vs naive", f"{diff:.1e}", "<= 1e-4", diff <= 1e-4)]


def scoring_peers(d: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for peer, ratio in d["speedup_vs"].items():
        setting = d["seconds"][peer]["setting"]
        rows.append((f"biaslab vs {peer} ({setting}, {d['dtype']})", _ratio(ratio), ">= 3x", ratio >= 3))
    for name, a in d.get("agreement_fp32", {}).items():
        if name != "biaslab":
            v = a["max_abs_diff_vs_biaslab"]
            rows.append((f"fp32 max abs sentence logprob diff, {name}", f"{v:.1e}", "<= 1e-4", v <= 1e-4))
    return rows


def exact_vs_sampling(d: dict[str, Any]) -> list[Row]:
    agree, n = int(d["agreeing_prompts"]), int(d["prompts"])
    hf, own = d["speedup_exact_vs_hf_generate"], d["speedup_exact_vs_sampling"]
    return [(f"exact vs HF generate sampling, {d.get('valid_target', 200)} valid/prompt", _ratio(hf), ">= 50x",
             hf >= 50),
            ("exact vs biaslab's shared-prefix sampler", _ratio(own), ">= 50x", own >= 50),
            ("prompts agreeing with sampling (99% interval)", f"{agree}/{n}", ">= 95%", agree >= 0.95 * n)]


def metrics_latency(d: dict[str, Any]) -> list[Row]:
    slowest = d.get("slowest_command") or max(d["commands"], key=lambda c: d["commands"][c]["median_s"])
    seconds = d["commands"][slowest]["median_s"]
    rows: list[Row] = [(f"slowest metric command ({slowest})", f"{seconds:.2f} s", "< 5 s", seconds < 5)]
    for name, r in d["commands"].items():
        if name != slowest and name.startswith("metrics"):
            rows.append((name, f"{r['median_s']:.2f} s", "< 5 s", r["median_s"] < 5))
    return rows


def main_job(d: dict[str, Any]) -> list[Row]:
    ratio = d["ratio_to_limit"]
    cpu = f", {d['cpu_model']} [{' '.join(d['cpu_flags'])}]" if "cpu_model" in d else ""
    return [(f"exact WinoPron, {d['prompts']} prompts, {d['dtype']}{cpu}: production vs limit", f"{ratio:.2f}",
             "<= 1.5", ratio <= 1.5),
            ("prompts/s (production)", f"{d['prompts_per_second']:.2f}", "-", None)]


def compare(d: dict[str, Any]) -> list[Row]:
    cpu = d.get("cpu", {})
    where = f", {cpu['cpu_model']} [{' '.join(cpu['cpu_flags'])}]" if cpu.get("cpu_model") else ""
    seconds = d["compare_median_s"]
    return [(f"compare contextuality, {d['settings']} settings x {d['prompts']:,} prompts{where}", f"{seconds:.2f} s",
             "< 10 s", seconds < 10),
            ("ratio to metrics contextuality on the same warehouse", f"{d['ratio_compare_to_metrics']:.2f}", "-",
             None)] + ([("biaslab view stimulus page, median (p95)",
                         f"{d['stimulus_page_median_s'] * 1000:.0f} ms ({d['stimulus_page_p95_s'] * 1000:.0f} ms)",
                         "< 300 ms", d["stimulus_page_p95_s"] < 0.3)] if "stimulus_page_median_s" in d else [])


def startup(d: dict[str, Any]) -> list[Row]:
    target = d["target_ratio"]
    return [(f"{name}: ratio to plain DuckDB ({row['median_s'] * 1000:.0f} ms vs "
             f"{row['baseline_median_s'] * 1000:.0f} ms)", f"{row['ratio']:.2f}", f"<= {target:g}", row["met"])
            for name, row in d["rows"].items()]


def chat_concurrency(d: dict[str, Any]) -> list[Row]:
    return [(f"chat collect at {d['concurrency']} in flight, {d['latency_s'] * 1000:.0f} ms latency: rate vs a plain "
             "async client", f"{d['ratio_collect_to_baseline']:.2f}", f">= {d['target']:g}", d["met"]),
            ("the same requests, one chunk at a time (before issue 57)", f"{d['ratio_per_chunk_to_baseline']:.2f}",
             "-", None)]


def view(d: dict[str, Any]) -> list[Row]:
    return [(f"biaslab view {row['page']}: warm (cold {row['cold_s'] * 1000:.0f} ms)",
             f"{row['warm_median_s'] * 1000:.0f} ms", f"<= {d['target_s'] * 1000:.0f} ms", row["warm_met"])
            for row in d["pages"]]


HEADLINES: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "bench_compare": compare, "startup": startup, "chat_concurrency": chat_concurrency, "view": view,
    "scoring": scoring, "scoring_peers": scoring_peers, "exact_vs_sampling": exact_vs_sampling,
    "warehouse_append": warehouse_append, "metrics_latency": metrics_latency,
    "main_job_bf16": main_job, "main_job_fp32": main_job,
}


def peak_rss(d: dict[str, Any]) -> str:
    """The script's recorded peak RSS; for the peer comparison also biaslab's own (before the peers load)."""
    if "peak_rss_mb_biaslab" in d:
        return f"{d['peak_rss_mb_biaslab']:,.0f} (biaslab) / {d['peak_rss_mb']:,.0f} (with peers)"
    if "peak_rss_mb" in d:
        return f"{d['peak_rss_mb']:,.0f}"
    if "compare_s" in d:
        return "-"
    commands = d.get("commands", {})
    return f"{max(c['peak_rss_mb'] for c in commands.values()):,.0f}" if commands else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=str(OUT_DIR))
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table (as in docs/performance.md)")
    args = ap.parse_args()
    table = []
    for path in sorted(Path(args.dir).glob("*.json")):
        data = json.loads(path.read_text())
        rss_text = peak_rss(data)
        rows = HEADLINES.get(path.stem, lambda d: [("(no headline defined)", "", "-", None)])(data)
        for i, (measure, value, target, met) in enumerate(rows):
            flag = "-" if met is None else ("yes" if met else "NO")
            table.append((path.stem if i == 0 else "", measure, value, target, flag, rss_text if i == 0 else ""))
    header = ("benchmark", "measure", "value", "target", "met?", "peak RSS MB")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for row in table:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(str(r[i])) for r in [header, *table]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *table]:
        print("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))))


if __name__ == "__main__":
    main()
