"""Command-line entry points: `biaslab` (data, SQL, metrics, reports) and `runners` (model runs)."""
