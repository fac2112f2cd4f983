"""Whether a hub id can be read here, decided in seconds before transformers tries (and retries) the network.

A name that is not a built-in alias, a local folder or a `.gguf` file is a Hugging Face hub id. Reading one needs
its files in the local Hugging Face cache or a reachable hub. `hub_access` checks, in this order:

1. HF_HUB_OFFLINE set: transformers reads the cache only and fails fast by itself: nothing to do;
2. the id's config.json in the cache (`huggingface_hub.try_to_load_from_cache`) and the hub reachable: read as
   usual (new revisions are checked); cached and the hub unreachable: read from the cache (`local_files_only`);
3. not cached: a TCP connection to the hub's host (HF_ENDPOINT, default huggingface.co, port 443) within
   `CONNECT_SECONDS`; when it fails, one line naming the model, the built-in aliases close to the name and what is
   missing, instead of transformers' five retries (about half a minute).
"""

from __future__ import annotations

import difflib
import os
import socket
from urllib.parse import urlparse

from ..errors import DataError
from .aliases import ALIASES

#: seconds allowed for the TCP connection that tells whether the hub is reachable
CONNECT_SECONDS = 3.0
_TRUE = {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set to a true value."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint() -> tuple[str, int]:
    """(host, port) of the hub: HF_ENDPOINT, default https://huggingface.co."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def hub_reachable(timeout: float = CONNECT_SECONDS) -> bool:
    """Whether a TCP connection to the hub's host opens within `timeout` seconds (DNS included)."""
    host, port = hub_endpoint()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def cached(name: str, revision: str | None = None) -> bool:
    """Whether the hub id's config.json is in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id=name, filename="config.json", revision=revision)
    except Exception:  # an id huggingface_hub refuses (bad characters, ...): not cached
        return False
    return isinstance(found, str)


def _aliases_hint(name: str) -> str:
    close = difflib.get_close_matches(name, list(ALIASES), n=3, cutoff=0.5)
    if close:
        return f"did you mean {' or '.join(close)}? "
    return f"built-in aliases: {', '.join(sorted(ALIASES))}; "


def hub_access(name: str, revision: str | None = None) -> dict:
    """Extra keyword arguments for reading hub id `name` with transformers ({} or {"local_files_only": True});
    raises ValueError in one line when it can be read neither from the cache nor from the hub."""
    if hub_offline():
        if cached(name, revision):
            return {}
        raise DataError(f"--model {name}: not a built-in alias, local folder or .gguf file, and not in the Hugging "
                        f"Face cache; the hub is switched off here (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE), so it "
                        f"is not downloaded; {_aliases_hint(name)}or give the path of a local model folder")
    is_cached = cached(name, revision)
    if hub_reachable():
        return {}
    if is_cached:
        return {"local_files_only": True}
    host, _ = hub_endpoint()
    raise DataError(f"--model {name}: not a built-in alias, local folder or .gguf file, not in the Hugging Face "
                    f"cache, and the hub ({host}) cannot be reached from here to download it; "
                    f"{_aliases_hint(name)}or give the path of a local model folder")
