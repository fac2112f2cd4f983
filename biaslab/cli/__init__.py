"""Command-line entry points: `biaslab` (data, SQL, metrics, reports) and `runners` (model runs)."""

from __future__ import annotations


def run_command(module: str, name: str) -> None:
    """Import the click command `name` of `biaslab.cli.<module>` and run it (the console scripts' `main`). Ctrl-C
    while its modules are still being imported ends with the one line every command ends with after Ctrl-C
    (`common.INTERRUPTED`, exit status 130) rather than a traceback; `common` itself is not imported first, as it
    is among the imports being interrupted."""
    import importlib
    import sys

    try:
        command = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted (Ctrl-C)\n")
        raise SystemExit(130) from None
    command()
