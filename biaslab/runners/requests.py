"""What every protocol's request has (`Request`), and the per-sample seed of the sampling protocols."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """What every protocol's request has: its identity (`request_id` = hash(stimulus_id, protocol, rendering
    parameters, prompt version), docs/design.md section 3), the stimulus it comes from and the protocol ("prob",
    "choice", "meta", "gen"). Results are keyed by (model_key, request_id[, ...])."""

    request_id: str
    stimulus_id: str
    protocol: str


def sample_seed(base_seed: int, request_id: str, sample_index: int) -> int:
    """Per-sample seed derived from the run seed, the request and the sample index (63 bits): the first 8 bytes of
    sha256("base_seed:request_id:sample_index"), so a sample depends neither on chunking nor on the resume point."""
    digest = hashlib.sha256(f"{base_seed}:{request_id}:{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)
