"""Metrics: statistics over stored evidence, one module per study."""
