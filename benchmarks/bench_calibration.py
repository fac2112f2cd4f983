"""Calibration metrics with bootstrap intervals: all resamples at once (production) vs one resample at a time.

Usage: python benchmarks/bench_calibration.py [--datasets 5] [--pairs 40] [--bootstrap 1000] [--repeats 3]

Both run in this one process on the same synthetic pairs (a calibrated model: gold ~ Bernoulli(p_male)), per
dataset the 16 metrics of `calibration_metrics` with `--bootstrap` resamples:
- production: `stats.calibration_metrics` (metrics/calibration/resampled.py: one multiplicity matrix, every metric
  from weighted sums over items);
- loop: the same resamples, each metric function called once per resample (`stats.bootstrap_ci`, how the metric was
  computed before issue 36).
It checks that both give the same percentile intervals (max |difference|) and reports the time ratio. Writes
bench_out/bench_calibration.json with the CPU model and flags.
"""

from __future__ import annotations

import argparse

import numpy as np

from _common import cpu_facts, machine, median_time, write_json
from biaslab.metrics.calibration import stats


def loop_intervals(p, gold, n_bins: int, n_boot: int, seed: int) -> dict[str, tuple[float, float]]:
    """Percentile intervals of every metric, one metric function call per resample."""
    def part(by, gender):
        return lambda pp, gg: stats._group_ece(pp, gg, by, gender, n_bins)

    fns = {
        "ece_male_class_equal_width": lambda pp, gg: stats.male_class_ece(pp, gg, n_bins),
        "ece_male_class_equal_mass": lambda pp, gg: stats.male_class_ece(pp, gg, n_bins, stats.EQUAL_MASS),
        "ece_top_label_equal_width": lambda pp, gg: stats.top_label_ece(pp, gg, n_bins),
        "ece_top_label_equal_mass": lambda pp, gg: stats.top_label_ece(pp, gg, n_bins, stats.EQUAL_MASS),
        "macro_ce_top_label": lambda pp, gg: stats.macro_ce(*stats.top_label_confidence(pp, gg)),
        "ice_top_label": lambda pp, gg: stats.ice(*stats.top_label_confidence(pp, gg)),
        "brier_gold_label": stats.brier_gold, "brier_upstream_convention": stats.brier_upstream_convention,
        "gender_ece_top_label_equal_width": lambda pp, gg: stats.gender_ece(pp, gg, n_bins),
        "gender_ece_gap_top_label_equal_width": lambda pp, gg: stats._gender_gap(pp, gg, n_bins),
        "cc_ece_top_label_equal_width": lambda pp, gg: stats.class_conditional_ece(pp, gg, n_bins),
        "human_alignment": stats.human_alignment,
        **{stats.group_part_name(by, g): part(by, g) for by in ("predicted", "gold") for g in ("male", "female")},
    }
    out = {}
    for name, fn in fns.items():
        ci = stats.bootstrap_ci(fn, p, gold, n_boot=n_boot, seed=seed)
        out[name] = (ci.low, ci.high)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = []
    for _ in range(args.datasets):
        p = rng.uniform(0, 1, args.pairs)
        data.append((p, (rng.uniform(0, 1, args.pairs) < p).astype(int)))

    def production():
        return [stats.calibration_metrics(p, g, n_boot=args.bootstrap, seed=0) for p, g in data]

    def loop():
        return [loop_intervals(p, g, 10, args.bootstrap, 0) for p, g in data]

    fast_t, fast_all = median_time(production, args.repeats)
    slow_t, slow_all = median_time(loop, args.repeats)
    diff = 0.0
    for rows, slow in zip(production(), loop()):
        for r in rows:
            lo, hi = slow[r["name"]]
            for a, b in ((r["percentile_low"], lo), (r["percentile_high"], hi)):
                if np.isfinite(a) or np.isfinite(b):
                    diff = max(diff, abs(a - b))
    result = {"machine": machine(), "cpu": cpu_facts(), "dtype": "float64 (numpy)", "datasets": args.datasets,
              "pairs": args.pairs, "bootstrap": args.bootstrap,
              "production_s": fast_t, "loop_s": slow_t, "speedup": slow_t / fast_t,
              "max_abs_interval_difference": diff, "production_runs_s": fast_all, "loop_runs_s": slow_all}
    print(f"{args.datasets} datasets x {args.pairs} pairs, {args.bootstrap} resamples: production {fast_t:.3f} s, "
          f"loop {slow_t:.3f} s, speedup {slow_t / fast_t:.1f}x, max |interval difference| {diff:.2e}")
    write_json("bench_calibration", result)


if __name__ == "__main__":
    main()
