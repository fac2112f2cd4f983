"""The `runners` command: run models over stimuli and append raw evidence to the warehouse.

Its subcommands live in `runners_collect` and are imported when used (`LazyGroup`), so `runners --help` does not read
every engine's declared flags; their one-line help is given here (`SHORT_HELP`; a test holds it equal to the commands'
own)."""

from __future__ import annotations

import click

from .common import LazyGroup, debug_option, version_option

#: the subcommands, imported when used: name -> module:attribute
COMMANDS = {"collect": ".runners_collect:collect_command", "backends": ".runners_collect:backends_command"}
#: their one-line help, as `runners --help` lists them without importing them
SHORT_HELP = {
    "collect": "Collect raw evidence for DATASET with MODEL into the warehouse.",
    "backends": "List the backends: installed or not, what each can run, the settings it takes.",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, short_help=SHORT_HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
@version_option("runners")
@debug_option
def runners() -> None:
    """Run language models over loaded stimuli and store raw evidence (scores, choice logits, samples).

    Every command appends to a DuckDB warehouse idempotently: running it twice adds nothing, and an interrupted
    run resumes where it stopped.
    """


def __getattr__(name: str):
    """The commands' own names (`collect_command`, `collect_config`, `parse_size`, ...), from `runners_collect`."""
    import importlib

    module = importlib.import_module(".runners_collect", __package__)
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
