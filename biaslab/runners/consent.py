"""A billed engine's consent, apart from the one road of `runners.collect`: the estimate of what a collection would
send, agreed to (or refused above its cost cap, or not confirmed) before anything is sent (`billed`); a hosted
model's snapshot settled after that agreement, and agreed to again where it leaves more pending (`settled`); a batch
rerun's earlier batches (`submitted_batches`), whose requests are fetched, not priced again, and the late agreement
that asks about anything sent beyond what was agreed (`beyond`)."""

from __future__ import annotations

from collections.abc import Callable

from . import runs

__all__ = ["billed", "beyond", "settled", "stderr_line", "submitted_batches"]


def stderr_line(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def settled(wh, config, handle, protocol, requests, work, notes: list[str], confirm, notify, agree_late):
    """(the pending work, the notes, the late agreement) once the provider has said which snapshot answers (one
    1-token request, after the cost was agreed to). Under another snapshot than the one assumed, the work pending
    under its key is read again; where it is more than was agreed to, it is estimated and agreed to again."""
    assumed, agreed = handle.model_key, protocol.planned(work)[0]  # the requests the user agreed to send
    handle.prepared.settle()
    handle.refresh()
    if handle.model_key == assumed:
        return work, notes, agree_late
    work = protocol.pending(wh, handle.model_key, requests)
    planned = protocol.planned(work)[0]
    if planned <= agreed:
        return work, notes, agree_late
    seen = (f"snapshot {handle.prepared.snapshot!r} answers now, not the one this warehouse last saw: {planned} "
            f"requests are pending under it")
    asked, agree_late = billed(handle.prepared, protocol, work, confirm,
                               submitted_batches(wh, config, handle, protocol), notify)
    return work, [*notes, seen, *asked], agree_late


def submitted_batches(wh, config, handle, protocol) -> list[tuple[str, int]]:
    """(batch id, requests in it) of the provider batches that earlier runs of this same work (model key, dataset,
    protocol version with its settings, shard) submitted and that ended 'pending' (the batch had not ended: a rerun
    fetches it); [] outside a chat API's batch mode."""
    if not handle.prepared.batch:
        return []
    from .batches import submitted

    pending_runs = [r["run_id"] for r in runs.same_work(wh, handle.model_key, config, protocol, ("pending",))]
    return submitted(wh, handle.model_key, config.backend, pending_runs)


def billed(prepared, protocol, work, confirm, submitted=(), notify=None
            ) -> tuple[list[str], Callable[[int], str] | None]:
    """(notes, a late agreement or None): the estimate of a billed engine's pending work, refused above its
    max_cost or when not confirmed (one line; nothing sent, no run row); [] for other engines or nothing pending.

    A batch rerun whose pending requests were all submitted before (`submitted`: the batches of this work's runs
    that ended pending) only fetches their results: nothing is estimated or asked, `notify` says so, and the late
    agreement returned (its `fetch_only` True) asks, as above, about any request the batches turn out not to hold,
    before it is sent. Where the batches hold only some of them, the others are estimated and agreed to now and the
    late agreement (`beyond`) asks about anything sent beyond those."""
    from ..errors import UsageError

    if not prepared.billed or not work.count:
        return [], None
    requests, chars, out = protocol.planned(work)

    def agree(count: int) -> str:
        """The estimate of `count` of the pending requests, agreed to (its line), else UsageError."""
        share = count / requests if requests else 1.0
        planned = prepared.estimate(count, int(chars * share), int(out * share))
        why = planned.refused()
        if why:
            raise UsageError(f"{planned.line()}: {why}")
        if confirm is not None and not confirm(planned.line()):
            raise UsageError(f"not confirmed: nothing was sent ({planned.line()})")
        return planned.line()

    held = min(sum(n for _, n in submitted), requests)
    if not held:
        return [f"estimated before sending: {agree(requests)}"], None
    batches = ", ".join(batch for batch, _ in submitted)
    if held >= requests:
        line = (f"fetching: the {requests} pending requests were submitted before (batch {batches}); their results "
                f"are fetched, nothing is sent again unless a batch holds no reply for it (asked first)")
        (notify or stderr_line)(line)
        agree.fetch_only = True  # type: ignore[attr-defined]  # nothing new is agreed to: the run only fetches
        return [line], agree
    # some pending requests are in earlier batches (fetched, not sent again): only the others are priced and asked
    # now; the late agreement asks about any request beyond those (one a batch holds no reply for) before it is sent
    sent = requests - held
    return [f"estimated before sending: {agree(sent)} ({held} more pending requests are in batch {batches}: "
            f"fetched, not sent again)"], beyond(agree, sent)


def beyond(agree: Callable[[int], str], agreed: int) -> Callable[[int], str]:
    """A late agreement that lets `agreed` newly submitted requests pass (agreed to before the run) and asks `agree`
    about every request submitted beyond them, before it is sent."""
    left = [agreed]

    def late(count: int) -> str:
        covered = min(count, left[0])
        left[0] -= covered
        return agree(count - covered) if count > covered else ""
    return late
