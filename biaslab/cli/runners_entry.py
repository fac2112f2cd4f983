"""`python -m biaslab.cli.runners_entry` runs the `runners` command (same as the console script)."""

from .runners_cli import runners

if __name__ == "__main__":
    runners()
