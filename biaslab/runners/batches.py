"""The warehouse side of a chat API's batch mode (`--batch`): which batches were submitted for which requests
(`api_batches`), so that a rerun fetches a batch's results instead of submitting it again (docs/design.md
section 10). The engine (`engines/chat.py`, "Batches") asks this journal; it never touches the warehouse itself.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone

from ..schema import evidence


class BatchJournal:
    """The batches of one model in one warehouse.

    Parameters
    ----------
    wh : the open warehouse (appends are their own transactions: a submitted batch is recorded at once).
    model_key, provider, run_id : what each row names.
    agree : where the run did not ask before starting (a rerun that only fetches), called with the number of
        requests about to be submitted anew before they are sent; it raises when they are not agreed to.
    """

    def __init__(self, wh, model_key: str, provider: str, run_id: str | None,
                 agree: Callable[[int], object] | None = None) -> None:
        self.wh, self.model_key, self.provider, self.run_id = wh, model_key, provider, run_id
        self.agree = agree
        self._said = 0.0

    def submitting(self, count: int) -> None:
        """Called before `count` requests are submitted in a new batch: asks `agree` where the run has not."""
        if self.agree is not None:
            self.agree(count)

    def open_batches(self, custom_ids: list[str]) -> list[tuple[str, list[str]]]:
        """(batch id, its custom ids) of this model's recorded batches that hold any of `custom_ids`, oldest
        first."""
        rows = self.wh.rows("SELECT batch_id, custom_ids FROM api_batches WHERE model_key = ? AND provider = ? "
                            "AND len(list_intersect(custom_ids, ?::VARCHAR[])) > 0 ORDER BY submitted_at, batch_id",
                            [self.model_key, self.provider, custom_ids])
        return [(batch_id, list(ids)) for batch_id, ids in rows]

    def record(self, batch_id: str, custom_ids: list[str]) -> None:
        """Record a batch the provider accepted (before waiting for it: an interruption keeps it)."""
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        self.wh.append("api_batches", evidence.arrow("api_batches", {
            "batch_id": [batch_id], "custom_ids": [custom_ids]}, model_key=self.model_key, provider=self.provider,
            submitted_at=now, run_id=self.run_id))

    def waiting(self, batch_id: str, state: str, done: int, total: int) -> None:
        """A plain line on stderr while a batch runs, at most every 30 s."""
        now = time.monotonic()
        if now - self._said >= 30.0:
            self._said = now
            print(f"batch {batch_id}: {state}, {done} of {total} requests done", file=sys.stderr, flush=True)


def submitted(wh, model_key: str, provider: str, run_ids: list[str]) -> list[tuple[str, int]]:
    """(batch id, requests in it) of the batches that the runs `run_ids` recorded for this model and provider,
    oldest first."""
    if not run_ids:
        return []
    return [(batch_id, int(n)) for batch_id, n in wh.rows(
        "SELECT batch_id, len(custom_ids) FROM api_batches WHERE model_key = ? AND provider = ? "
        "AND list_contains(?::VARCHAR[], run_id) ORDER BY submitted_at, batch_id", [model_key, provider, run_ids])]
