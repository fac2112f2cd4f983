"""Pydantic schemas and identity: stimuli, model records, the hashes, and the Arrow schema of every table."""

from .identity import content_hash, request_id
from .records import ModelSpec
from .stimulus import CASES, CONTEXTS, FORMS, STIMULUS_COLUMNS, Stimulus

__all__ = ["CASES", "CONTEXTS", "FORMS", "STIMULUS_COLUMNS", "ModelSpec", "Stimulus", "content_hash", "request_id"]
