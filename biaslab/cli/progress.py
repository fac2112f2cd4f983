"""A rich progress bar with items per second and ETA, for long runner work.

Runner progress comes in units of work: exact mode reports the prompts of one exploration when it ends, scoring
and sampling report each chunk written. rich's own speed (items between the first and the last update of a
30-second window, over the time between them) reads a burst of reports as hundreds per second. Here the rate is
the average over the units done in this process after the first one:

    rate = (completed - completed_1) / (t_last - t_1)          once a second unit is reported
    rate = (completed_1 - resumed) / (t_1 - t_start)           after the first unit only
    ETA  = max(0, (total - completed) / rate - (now - t_last))

where `t_start` is when the work started (the model ready), `t_1` / `completed_1` the time and count of the first
report, `t_last` the time of the last one and `resumed` the items already stored before this run (not counted as
speed). The first unit carries the one-time costs (the first forward passes of new shapes, the shared prefix, the
allocator's growth; 11 s for 16 prompts on a slow AVX2 CPU that then did 6 prompts/s): it gives the first rate and
is left out from the second report on. The ETA is shown from the second report on only: one from the first unit
said 18 min 40 s for about 100 s of work (issue 46); until then it reads "-:--:--" ("unknown" on a plain line),
and the first one shown is measured on work past the start-up (`benchmarks/bench_eta.py`). Between reports the
rate stays put and the ETA counts down;
it is exact for work that goes on at a steady rate in units reported as they end. A unit's items must not be
reported piecemeal: when exact mode reported each prompt as its trie closed, a prompt that closed early in a
96-prompt exploration read as 3 prompts in 9 s, and the ETA said 40 min for a 97-second fp32 job.
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
    """Items per second done in this process up to the last report, after the first report once there is a second
    (the module docstring); None before the first report after the start."""
    start, last, first = task.start_time, task.fields.get("last"), task.fields.get("first")
    if first is not None and last > first[0] and task.completed > first[1]:
        return (task.completed - first[1]) / (last - first[0])
    done = task.completed - task.fields.get("resumed", 0)
    if start is None or last is None or last <= start or done <= 0:
        return None
    return done / (last - start)


def remaining_seconds(task: Task, now: float) -> float | None:
    """Seconds left at `average_rate`, counted down since the last report (the module docstring); None before the
    second report (the rate then still holds the start-up costs)."""
    first, last = task.fields.get("first"), task.fields.get("last")
    if first is None or last is None or last <= first[0]:
        return None
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


#: on a console that is not a terminal (output to a file or a pipe), a plain progress line at most this often
PLAIN_EVERY_S = 10.0


def plain_line(description: str, task: Task, now: float) -> str:
    """One plain progress line: done / total (percent), the rate and the ETA of the bar's columns."""
    rate, left = average_rate(task), remaining_seconds(task, now)
    total = task.total or 0
    share = f" ({100 * task.completed / total:.0f}%)" if total else ""
    speed = f"{rate:,.1f} it/s" if rate else "-- it/s"
    if task.remaining is not None and task.remaining <= 0:
        left = 0.0
    eta = "unknown" if left is None else f"{int(left) // 3600:d}:{int(left) // 60 % 60:02d}:{int(left) % 60:02d}"
    return f"{description}: {task.completed:,.0f}/{total:,.0f}{share}, {speed}, ETA {eta}"


class _LazyProgress(Progress):
    """A rich Progress whose live display starts with its first task (or an explicit `start`), not when its `with`
    block is entered: a command that stops before any work (an error, nothing pending) prints no empty line on
    stderr before its one line."""

    live_started = False

    def __enter__(self) -> _LazyProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self.live_started:
            self.stop()

    def start(self) -> None:
        self.live_started = True
        super().start()

    def stop(self) -> None:
        super().stop()
        self.live_started = False


def progress_bar(description: str, clock: Callable[[], float] = time.monotonic, console=None
                 ) -> tuple[Progress, Callable[[int, int], Callable[[int], None]]]:
    """A Progress to use as a context manager, and the factory `collect` calls with (total, already done) when the
    work starts; the factory returns the callback that reports items done. The bar goes to stderr (default
    `console`), so stdout holds only the command's results. On a console that is not a terminal (a file, a pipe:
    no live bar), each report also prints a `plain_line`, the first one at once and then at most every
    `PLAIN_EVERY_S` seconds and at the end."""
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    gives_way = Column(ratio=1, no_wrap=True, overflow="ellipsis", min_width=min(len(description), 8))
    progress = _LazyProgress(TextColumn("[bold]{task.description}", table_column=gives_way), BarColumn(bar_width=10),
                        MofNCompleteColumn(table_column=_kept()), TaskProgressColumn(table_column=_kept()),
                        RateColumn(table_column=_kept()), TimeElapsedColumn(table_column=_kept()),
                        TextColumn("ETA", table_column=_kept()), EtaColumn(clock), get_time=clock, expand=True,
                        console=console)

    return progress, work_factory(progress, description, clock)


def work_factory(progress: Progress, description: str, clock: Callable[[], float] = time.monotonic
                 ) -> Callable[[int, int], Callable[[int], None]]:
    """The factory `collect` calls with (total, already done) when its work starts, adding one bar named
    `description` to `progress` (`progress_bar`; `biaslab audit` adds one per unit of its plan to one display)."""

    def factory(total: int, done: int) -> Callable[[int], None]:
        if not progress.live_started:
            progress.start()
        task = progress.add_task(description, total=total, completed=done)
        progress.reset(task, total=total, completed=done, resumed=done, last=None, first=None)  # timed from here

        state = next(t for t in progress.tasks if t.id == task)

        plain = not progress.console.is_terminal
        printed: list[float] = []

        def advance(n: int) -> None:
            """Report `n` items whose unit of work has ended (the module docstring)."""
            now = clock()
            progress.update(task, advance=n, last=now)
            if state.fields["first"] is None:  # the first report: its time and count
                progress.update(task, first=(now, state.completed))
            if plain and (not printed or now - printed[-1] >= PLAIN_EVERY_S or state.completed >= total):
                printed.append(now)
                progress.console.print(plain_line(description, state, now), soft_wrap=True, highlight=False,
                                       markup=False)

        return advance

    return factory
