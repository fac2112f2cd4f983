"""The `runners` command: run models over stimuli and append raw evidence to the warehouse."""

from __future__ import annotations

import click

from .common import Group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def runners() -> None:
    """Run language models over loaded stimuli and store raw evidence (scores, choice logits, samples).

    Every command appends to a DuckDB warehouse idempotently: running it twice adds nothing, and an interrupted
    run resumes where it stopped.
    """
