"""Runners: one collect loop (`collect`) over the protocols (`protocols`: prob, choice, meta, gen), each asking an
engine (`biaslab.engines`) and appending raw evidence to the warehouse, resumable and idempotent."""
