"""The local executor: a plan's units one after another in this process."""

from __future__ import annotations

from typing import Any

from .plan import Unit

__all__ = ["run_local"]


def run_local(units: list[Unit], *, progress=None, on_unit=None, notify=None, confirm=None,
              refused: dict[str, str] | None = None) -> list[tuple[Unit, Any]]:
    """Run the units one after another into the plan's warehouse (`collect`: what is stored is skipped, an
    interrupted unit resumes). `progress(unit)` returns the factory `collect` reports to; `on_unit(unit, result)`
    is called after each; `confirm` is `collect`'s question before a hosted model is sent anything. Ctrl-C stops at
    the current unit (its finished chunks are kept); rerunning the plan continues. With `refused` (unit name ->
    why), units already in it are skipped, and a unit refused before it sends anything (`UsageError`: its cost above
    a cap, or not agreed to) is added to it instead of stopping the plan. Returns (unit, `CollectResult`) per unit
    run."""
    from ...errors import UsageError
    from ..collect import collect

    done = []
    for unit in units:
        if refused is not None and unit.name in refused:
            continue
        try:
            result = collect(unit.config, progress=progress(unit) if progress else None, notify=notify,
                             confirm=confirm)
        except UsageError as exc:  # refused for its cost, or not agreed to: the other units still run
            if refused is None:
                raise
            refused[unit.name] = str(exc)
            continue
        done.append((unit, result))
        if on_unit is not None:
            on_unit(unit, result)
    return done
