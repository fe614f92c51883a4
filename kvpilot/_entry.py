"""The `kvpilot` console script's entry point: a Ctrl-C at any moment, even while the command line's modules are
still being imported, ends the command with status 130 and one line, never a traceback."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from kvpilot.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        raise SystemExit(130) from None
