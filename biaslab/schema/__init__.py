"""Pydantic schemas and identity: stimuli, model records, the hashes, and the Arrow schema of every table."""

from .identity import content_hash, request_id
from .records import ModelSpec
from .stimulus import (ATTRIBUTES, CASES, CHOICE_OPTIONS, CONTEXTS, FORMS, STIMULUS_COLUMNS, SeenStimulus, Stimulus,
                       stimulus_type)
from .user_dataset import DatasetDeclaration

__all__ = ["ATTRIBUTES", "CASES", "CHOICE_OPTIONS", "CONTEXTS", "FORMS", "STIMULUS_COLUMNS", "DatasetDeclaration",
           "ModelSpec", "SeenStimulus", "Stimulus", "content_hash", "request_id", "stimulus_type"]
