"""The local executor: a plan's units one after another in this process."""

from __future__ import annotations

from typing import Any

from .plan import Unit

__all__ = ["run_local"]


def run_local(units: list[Unit], *, progress=None, on_unit=None, notify=None, confirm=None
              ) -> list[tuple[Unit, Any]]:
    """Run the units one after another into the plan's warehouse (`collect`: what is stored is skipped, an
    interrupted unit resumes). `progress(unit)` returns the factory `collect` reports to; `on_unit(unit, result)`
    is called after each; `confirm` is `collect`'s question before a hosted model is sent anything. Ctrl-C stops at
    the current unit (its finished chunks are kept); rerunning the plan continues. Returns (unit, `CollectResult`)
    per unit."""
    from ..collect import collect

    done = []
    for unit in units:
        result = collect(unit.config, progress=progress(unit) if progress else None, notify=notify, confirm=confirm)
        done.append((unit, result))
        if on_unit is not None:
            on_unit(unit, result)
    return done
