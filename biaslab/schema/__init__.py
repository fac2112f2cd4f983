"""Pydantic schemas: stimuli, model specs, runs and raw-evidence rows."""

from .records import ModelSpec, RunRecord, SequenceScore, TokenScore, request_id
from .stimulus import CASES, CONTEXTS, FORMS, STIMULUS_COLUMNS, Stimulus, content_hash

__all__ = [
    "CASES", "CONTEXTS", "FORMS", "STIMULUS_COLUMNS", "ModelSpec", "RunRecord", "SequenceScore",
    "Stimulus", "TokenScore", "content_hash", "request_id",
]
