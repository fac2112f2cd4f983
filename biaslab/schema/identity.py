"""Identity keys (docs/design.md section 3): the content hash every key is made of, and `request_id`.

`stimulus_id` is `Stimulus.stimulus_id` (the hash of every stimulus field) and `model_key` is `ModelSpec.model_key`
(`biaslab.schema.records`); both are built with `content_hash`. Changing how any of them serializes orphans stored
evidence: `tests/schema/test_identity_pins.py` pins literal values.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

ID_LENGTH = 16  # hex characters of sha256 kept in identity keys (64 bits)


def content_hash(payload: Any, length: int = ID_LENGTH) -> str:
    """Stable hex digest of a JSON-serializable payload: sha256 of its JSON with sorted keys and no whitespace.

    Parameters
    ----------
    payload : any JSON-serializable value (values JSON cannot hold are written with `str`).
    length : hex characters kept.

    Returns
    -------
    The first `length` hex characters of the digest.
    """
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]


def request_id(stimulus_id: str, protocol: str, params: dict[str, Any], prompt_version: str = "") -> str:
    """hash(stimulus_id, protocol, rendering parameters, prompt template version) (docs/design.md section 3).

    Parameters
    ----------
    stimulus_id : the stimulus the request renders.
    protocol : "prob", "choice", "meta" or "gen".
    params : every rendering parameter that changes what the model sees or what is computed.
    prompt_version : the prompt template's version ("" for none).
    """
    return content_hash({"s": stimulus_id, "p": protocol, "r": params, "v": prompt_version})
