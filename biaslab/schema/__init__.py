"""Pydantic schemas and identity: stimuli, model records, the hashes, and the Arrow schema of every table."""

from .identity import content_hash, request_id
from .records import ModelSpec
from .stimulus import CASES, CHOICE_OPTIONS, CONTEXTS, FORMS, STIMULUS_COLUMNS, Stimulus
from .user_dataset import DatasetDeclaration

__all__ = ["CASES", "CHOICE_OPTIONS", "CONTEXTS", "FORMS", "STIMULUS_COLUMNS", "DatasetDeclaration", "ModelSpec",
           "Stimulus", "content_hash", "request_id"]
