"""What a study says when the warehouse holds none of the evidence it reads."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import NoEvidence  # re-exported: `biaslab metrics` exits 1 with it; `biaslab report` writes a page

__all__ = ["NoEvidence", "stimulus_count", "missing"]


def stimulus_count(handle, datasets: Sequence[str]) -> int:
    st = handle.table("stimuli")
    return int(handle.fetch(st.filter(st.dataset.isin(list(datasets))).count().name("n").as_table())["n"].iloc[0])


def missing(handle, what: str, datasets: Sequence[str], command: str) -> NoEvidence:
    """NoEvidence saying `what` is missing, how many stimuli of `datasets` are loaded, and `command`."""
    loaded = stimulus_count(handle, datasets)
    names = ", ".join(datasets)
    held = (f"{loaded} stimuli of {names} are loaded but no {what} is stored" if loaded
            else f"no {what} is stored (and no stimuli of {names} are loaded)")
    return NoEvidence(f"{handle.path}: {held}; collect it with `{command}`")
