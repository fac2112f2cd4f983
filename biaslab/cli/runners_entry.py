"""The `runners` console script (`main`); `python -m biaslab.cli.runners_entry` runs the same."""

from __future__ import annotations

from . import run_command


def main() -> None:
    """Run the `runners` command (`run_command`: Ctrl-C during start-up ends in one line, exit status 130)."""
    run_command("runners_cli", "runners")


if __name__ == "__main__":
    main()
