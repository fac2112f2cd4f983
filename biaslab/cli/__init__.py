"""Command-line entry points: `biaslab` (data, SQL, metrics, reports) and `runners` (model runs)."""

from __future__ import annotations


#: set by the SIGINT handler `run_command` installs: a Ctrl-C has come (read by `common.Group.invoke`, where an
#: import that Ctrl-C cut short surfaces as ImportError "initialization failed" rather than KeyboardInterrupt)
SIGINT_SEEN: list[bool] = []


def _on_sigint(signum, frame) -> None:
    SIGINT_SEEN.append(True)
    raise KeyboardInterrupt


def run_command(module: str, name: str) -> None:
    """Import the click command `name` of `biaslab.cli.<module>` and run it (the console scripts' `main`). Ctrl-C
    while its modules are still being imported ends with the one line every command ends with after Ctrl-C
    (`common.INTERRUPTED`, exit status 130) rather than a traceback, also where it lands inside a C extension's
    initialization (which Python reports as ImportError); `common` itself is not imported first, as it is among the
    imports being interrupted."""
    import importlib
    import signal
    import sys

    signal.signal(signal.SIGINT, _on_sigint)  # Python's own behaviour (KeyboardInterrupt), and a note that it came
    try:
        command = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt) or (SIGINT_SEEN and not isinstance(exc, SystemExit)):
            sys.stderr.write("Error: interrupted (Ctrl-C)\n")
            raise SystemExit(130) from None
        raise
    command()
