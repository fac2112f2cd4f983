"""A rich progress bar with items per second and ETA, for long runner work.

Runner progress comes in bursts: exact mode finishes up to `--prompt-batch` prompts at the end of one exploration,
scoring writes whole chunks. rich's own speed (items between the first and the last update of a 30-second
window, over the time between them) then reads a burst as a rate of hundreds per second. Here the rate is the
average over the work done in this process, up to the last item done:

    rate = (completed - resumed) / (t_last - t_start)
    ETA  = max(0, (total - completed) / rate - (now - t_last))

where `t_start` is when the work started (the model ready), `t_last` when the last items were reported and
`resumed` the items already stored before this run (not counted as speed). Between bursts the rate stays put and
the ETA counts down; it is exact for work that proceeds at a steady rate in equal bursts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskProgressColumn,
                           TextColumn, TimeElapsedColumn)
from rich.table import Column
from rich.text import Text


def _kept() -> Column:
    """A column that never wraps: on a narrow or piped stderr the description gives way instead of "it/s" breaking
    in two."""
    return Column(no_wrap=True)


def average_rate(task: Task) -> float | None:
    """Items per second done in this process, up to the last report (the module docstring); None before the first
    report after the start."""
    start, last = task.start_time, task.fields.get("last")
    done = task.completed - task.fields.get("resumed", 0)
    if start is None or last is None or last <= start or done <= 0:
        return None
    return done / (last - start)


def remaining_seconds(task: Task, now: float) -> float | None:
    """Seconds left at `average_rate`, counted down since the last report (the module docstring); None while the
    rate is unknown."""
    rate = average_rate(task)
    if rate is None or task.total is None:
        return None
    return max(0.0, (task.total - task.completed) / rate - (now - task.fields["last"]))


class RateColumn(ProgressColumn):
    """`average_rate` as "N.N it/s" ("-- it/s" before the first report)."""

    def render(self, task: Task) -> Text:
        rate = average_rate(task)
        return Text(f"{rate:,.1f} it/s" if rate else "-- it/s", style="progress.data.speed")


class EtaColumn(ProgressColumn):
    """`remaining_seconds` as H:MM:SS ("-:--:--" before the first report), read on `clock` (the Progress's)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(table_column=_kept())
        self.clock = clock

    def render(self, task: Task) -> Text:
        done = task.remaining is not None and task.remaining <= 0  # finished, or everything resumed
        left = 0.0 if done else remaining_seconds(task, self.clock())
        if left is None:
            return Text("-:--:--", style="progress.remaining")
        minutes, seconds = divmod(int(left), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours:d}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def progress_bar(description: str, clock: Callable[[], float] = time.monotonic
                 ) -> tuple[Progress, Callable[[int, int], Callable[[int], None]]]:
    """A Progress to use as a context manager, and the factory `collect` calls with (total, already done) when the
    work starts; the factory returns the callback that reports items done."""
    gives_way = Column(ratio=1, no_wrap=True, overflow="ellipsis")  # the description column gives way
    progress = Progress(TextColumn("[bold]{task.description}", table_column=gives_way), BarColumn(bar_width=20),
                        MofNCompleteColumn(table_column=_kept()), TaskProgressColumn(table_column=_kept()),
                        RateColumn(table_column=_kept()), TimeElapsedColumn(table_column=_kept()),
                        TextColumn("ETA", table_column=_kept()), EtaColumn(clock), get_time=clock, expand=True)

    def factory(total: int, done: int) -> Callable[[int], None]:
        task = progress.add_task(description, total=total, completed=done)
        progress.reset(task, total=total, completed=done, resumed=done, last=None)  # timed from the resume point

        def advance(n: int) -> None:
            progress.update(task, advance=n, last=clock())

        return advance

    return progress, factory
