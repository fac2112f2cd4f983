"""`engines.chat.call_chunks` (issue 57): each chunk's results in order, with calls running across chunk boundaries
up to the concurrency given, the chunks before a failure still delivered and the calls not started after it
cancelled."""

from __future__ import annotations

import threading
import time

import pytest

from biaslab.engines.chat import call_chunks
from biaslab.errors import EngineError


def test_results_come_per_chunk_in_order_with_calls_running_across_chunks():
    workers, size, chunks = 8, 4, 8
    # each call waits until `workers` calls run at once: with chunks of 4, that needs calls of two chunks at a time
    barrier = threading.Barrier(workers, timeout=20)

    def call(value):
        def run():
            barrier.wait()
            return value
        return run

    plan = [[call(c * size + i) for i in range(size)] for c in range(chunks)]
    got = list(call_chunks(iter(plan), workers))
    assert got == [[c * size + i for i in range(size)] for c in range(chunks)]


def recording() -> tuple[list, threading.Lock, object]:
    """(the values of the calls started so far, its lock, `call(value)`: a call that records its start and returns
    `value`)."""
    started: list = []
    lock = threading.Lock()

    def call(value):
        def run():
            with lock:
                started.append(value)
            return value
        return run

    return started, lock, call


def test_a_chunk_waits_for_the_caller_only_after_the_next_chunks_were_started():
    started, lock, call = recording()
    chunks = call_chunks(iter([[call(1), call(2)], [call(3), call(4)], [call(5), call(6)]]), workers=2)
    assert next(chunks) == [1, 2]
    # while the caller holds chunk 0 (storing it; the generator is suspended), chunk 1's calls run
    for _ in range(500):
        with lock:
            if {3, 4} <= set(started):
                break
        threading.Event().wait(0.01)
    assert {3, 4} <= set(started)
    assert list(chunks) == [[3, 4], [5, 6]]


def test_the_chunks_before_a_failure_are_delivered_and_later_calls_are_cancelled():
    ran = []
    lock = threading.Lock()
    gate = threading.Event()

    def call(value):
        def run():
            with lock:
                ran.append(value)
            if value == 5:
                raise EngineError("the provider refused request 5")
            if value > 5:
                gate.wait(5)  # later calls would still be waiting; they must be cancelled, not all run
            return value
        return run

    plan = [[call(c * 2 + i) for i in range(2)] for c in range(40)]  # 80 calls, request 5 in chunk 2 fails
    chunks = call_chunks(iter(plan), workers=2)
    got = [next(chunks), next(chunks)]
    assert got == [[0, 1], [2, 3]]
    with pytest.raises(EngineError, match="request 5"):
        next(chunks)
    gate.set()
    assert len(ran) < 20  # most of the 80 calls never started


@pytest.mark.parametrize("pipelined", [False, True])
def test_no_request_starts_after_a_fatal_failure(pipelined):
    """Issue 56, item 5: at one request in flight, the failing request is the last one sent (the queue used to race
    the cancellation: the worker took the next request before the caller cancelled it)."""
    import sys

    from biaslab.engines.chat import call_all

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)  # the worker keeps the interpreter after the failure: the race, made certain
    try:
        _no_request_after_a_failure(pipelined, call_all)
    finally:
        sys.setswitchinterval(interval)


def _calls(sent: list) -> list:
    """Four requests; the first fails after its reply was awaited (the interpreter free meanwhile, as over HTTP)."""
    def call(value):
        def run():
            sent.append(value)  # the request is sent ...
            time.sleep(0.02)  # ... and its reply awaited
            if value == 0:
                raise EngineError("401: the key was refused")
            return value
        return run
    return [call(v) for v in range(4)]


def _no_request_after_a_failure(pipelined, call_all):
    for _ in range(5):
        sent: list = []
        calls = _calls(sent)
        with pytest.raises(EngineError, match="401"):
            if pipelined:
                list(call_chunks(iter([calls[:2], calls[2:]]), workers=1))
            else:
                call_all(lambda run: run(), calls, workers=1)
        time.sleep(0.1)  # a request the worker took after the failure would have been sent by now
        assert sent == [0]


def test_gathered_chunks_answered_while_the_caller_stored_come_in_one_group():
    started, lock, call = recording()
    plan = [[call(2 * c), call(2 * c + 1)] for c in range(6)]
    groups = call_chunks(iter(plan), workers=2, gather=True)
    assert next(groups) == [[0, 1]]  # the first chunk as soon as it is in, alone
    # while the caller stores it, the 4 chunks submitted ahead are answered (never more than 2 calls at once)
    for _ in range(500):
        with lock:
            if {2, 3, 4, 5, 6, 7, 8, 9} <= set(started):
                break
        threading.Event().wait(0.01)
    time.sleep(0.05)  # the last call's future is set just after it returns
    rest = list(groups)
    assert rest[0] == [[2, 3], [4, 5], [6, 7], [8, 9]]  # answered meanwhile: one group, in order
    assert [v for group in [[[0, 1]], *rest] for chunk in group for v in chunk] == list(range(12))


def test_replies_with_joins_the_items_of_each_group():
    from biaslab.engines.chat import replies_with

    chunks = [["a", "b"], ["c"], ["d", "e"]]
    groups = [[[1, 2]], [[3], [4, 5]]]
    assert list(replies_with(chunks, groups)) == [(["a", "b"], [1, 2]), (["c", "d", "e"], [3, 4, 5])]
