"""The `biaslab` console script (`main`); `python -m biaslab.cli.biaslab_entry` runs the same."""

from __future__ import annotations

import sys


def main() -> None:
    """Import and run the `biaslab` command; Ctrl-C while the command's modules are still being imported ends with
    the one line every command ends with after Ctrl-C (exit status 130), not a traceback."""
    try:
        from .main import biaslab
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted (Ctrl-C)\n")
        raise SystemExit(130) from None
    biaslab()


if __name__ == "__main__":
    main()
