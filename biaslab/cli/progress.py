"""A rich progress bar with items per second and ETA, for long runner work."""

from __future__ import annotations

from collections.abc import Callable

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)


class RateColumn(TextColumn):
    """Items per second over the work done in this process (resumed items are not counted as speed)."""

    def __init__(self) -> None:
        super().__init__("")

    def render(self, task):  # type: ignore[override]
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.1f} it/s" if speed else "-- it/s", style="progress.data.speed")


def progress_bar(description: str) -> tuple[Progress, Callable[[int, int], Callable[[int], None]]]:
    """A Progress to use as a context manager, and the factory `collect` calls with (total, already done)."""
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TaskProgressColumn(), RateColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                        TimeRemainingColumn())

    def factory(total: int, done: int) -> Callable[[int], None]:
        task = progress.add_task(description, total=total, completed=done)
        progress.reset(task, total=total, completed=done)  # speed measured from the resume point

        def advance(n: int) -> None:
            progress.advance(task, n)

        return advance

    return progress, factory
