"""The runners' progress bar: its rate and ETA on bursty work, against values computed by hand on a fake clock."""

from __future__ import annotations

import pytest

from biaslab.cli.progress import EtaColumn, RateColumn, average_rate, progress_bar, remaining_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _bar(clock: Clock, total: int, done: int):
    """The bar's task after `factory(total, done)`, its callback and what its rate / ETA columns show (the Progress
    is never started: nothing is drawn)."""
    progress, factory = progress_bar("job", clock=clock)
    advance = factory(total, done)
    task = progress.tasks[0]
    rate_column = next(c for c in progress.columns if isinstance(c, RateColumn))
    eta_column = next(c for c in progress.columns if isinstance(c, EtaColumn))
    return advance, task, lambda: (rate_column.render(task).plain, eta_column.render(task).plain)


def test_units_give_the_average_rate_after_the_first_and_a_countdown():
    """Exact mode reports each exploration's prompts as it ends. The first (16 prompts) carries the warm-up: 11 s
    where the run then does 96 prompts every 16 s (issue 36: the first ETA said hours for a job of minutes). The
    first rate is 16 / 11 it/s, with no ETA yet (issue 46: an ETA from the first unit said 18 min 40 s for about
    100 s of work); from the second report on the rate is 96 / 16 = 6 it/s, not 112 / 27, and the ETA
    (3600 - done) / 6 counts down between reports."""
    clock = Clock()
    advance, task, shown = _bar(clock, 3600, 0)
    assert shown() == ("-- it/s", "-:--:--")
    clock.now += 11
    advance(16)
    assert average_rate(task) == 16 / 11
    assert shown() == ("1.5 it/s", "-:--:--")  # 3584 / (16 / 11) = 2464 s would be 4x the truth
    assert remaining_seconds(task, clock.now) is None
    clock.now += 16
    advance(96)
    assert average_rate(task) == 6.0
    assert remaining_seconds(task, clock.now) == (3600 - 112) / 6
    assert shown() == ("6.0 it/s", "0:09:41")  # 581.3 s
    clock.now += 10  # between reports: the rate holds, the ETA counts down
    assert shown() == ("6.0 it/s", "0:09:31")
    clock.now += 22  # a slower exploration: 96 in 32 s
    advance(96)
    assert average_rate(task) == 192 / 48
    assert remaining_seconds(task, clock.now) == (3600 - 208) / 4
    clock.now += 10_000  # stalled far past the estimate: zero, never negative
    assert shown()[1] == "0:00:00"


def test_items_stored_before_the_run_are_not_counted_as_speed():
    clock = Clock()
    advance, task, shown = _bar(clock, 1000, 600)
    assert shown() == ("-- it/s", "-:--:--")
    clock.now += 50
    advance(100)
    assert average_rate(task) == 100 / 50
    assert shown() == ("2.0 it/s", "-:--:--")  # the first report: a rate, no ETA yet
    clock.now += 60
    advance(100)
    assert shown() == ("1.7 it/s", "0:02:00")  # 200 left at 100 / 60 it/s
    clock.now += 90
    advance(200)
    assert task.finished and shown() == ("2.0 it/s", "0:00:00")


def test_a_rerun_with_everything_stored_shows_no_time_left():
    """`runners collect` over a finished warehouse: the bar starts full; nothing is left, so the ETA is zero (not
    unknown) and there is no rate (nothing was done in this process)."""
    clock = Clock()
    _, task, shown = _bar(clock, 3600, 3600)
    assert not task.finished and average_rate(task) is None
    assert shown() == ("-- it/s", "0:00:00")


@pytest.mark.parametrize("width", [60, 80, 120])
def test_a_narrow_or_piped_line_shortens_the_description_and_never_breaks_the_numbers(width):
    """Issue 36: piped to an 80-column log, "it/s" wrapped onto a line of its own."""
    import io

    from rich.console import Console

    now = [0.0]
    bar, factory = progress_bar("winopron / smollm2-135m-instruct-with-a-long-name", clock=lambda: now[0])
    out = io.StringIO()
    bar.live.console = Console(file=out, width=width)
    with bar:
        advance = factory(3600, 0)
        now[0] = 10.0
        advance(120)
    label = "winopron / smollm2-135m-instruct-with-a-long-name"
    lines = out.getvalue().splitlines()
    plain = [line for line in lines if line.startswith(f"{label}: ")]  # not a terminal: plain lines too
    drawn = [line for line in lines if line not in plain]
    assert plain == [f"{label}: 120/3,600 (3%), 12.0 it/s, ETA unknown"]  # one report: no ETA yet
    assert len(drawn) == 1 and len(drawn[0]) <= width and drawn[0].startswith("win")  # never cut to nothing
    if width >= 100:
        assert drawn[0].startswith(label)
    assert drawn[0].endswith("120/3600   3% 12.0 it/s 0:00:10 ETA -:--:--")


def test_a_console_that_is_no_terminal_gets_plain_lines_every_ten_seconds():
    """Issue 46: the 12-minute main job printed nothing to a log file until the end."""
    import io

    from rich.console import Console

    now = [0.0]
    out = io.StringIO()
    bar, factory = progress_bar("job / model", clock=lambda: now[0], console=Console(file=out, width=100))
    advance = factory(100, 0)
    for t, n in ((2.0, 10), (6.0, 10), (12.0, 10), (13.0, 10), (30.0, 60)):
        now[0] = t
        advance(n)
    # the first report, then >= 10 s after the last line (12 s), then the end (30 s); 6 s and 13 s print nothing
    assert out.getvalue().splitlines() == [
        "job / model: 10/100 (10%), 5.0 it/s, ETA unknown",
        "job / model: 30/100 (30%), 2.0 it/s, ETA 0:00:35",
        "job / model: 100/100 (100%), 3.2 it/s, ETA 0:00:00"]
