"""The `biaslab` console script (`main`); `python -m biaslab.cli.biaslab_entry` runs the same."""

from __future__ import annotations

from . import run_command


def main() -> None:
    """Run the `biaslab` command (`run_command`: Ctrl-C during start-up ends in one line, exit status 130)."""
    run_command("main", "biaslab")


if __name__ == "__main__":
    main()
