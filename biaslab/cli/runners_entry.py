"""The `runners` console script (`main`); `python -m biaslab.cli.runners_entry` runs the same."""

from __future__ import annotations

import sys


def main() -> None:
    """Import and run the `runners` command; Ctrl-C while its modules are still being imported ends with one line,
    exit status 130 (as `biaslab_entry.main`)."""
    try:
        from .runners_cli import runners
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted (Ctrl-C)\n")
        raise SystemExit(130) from None
    runners()


if __name__ == "__main__":
    main()
