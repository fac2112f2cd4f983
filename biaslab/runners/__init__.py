"""Runners: model loading, batching, scoring, exact choice probabilities and sampling. Raw evidence only."""
