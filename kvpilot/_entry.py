"""The `kvpilot` console script's entry point: a Ctrl-C at any moment, even while the command line's modules are
still being imported, ends the command with status 130 and one line, never a traceback.

SIGTERM likewise, from the first line here: before, a SIGTERM while `kvpilot run` imported its modules and read its
settings (~0.9 s, before ``kvpilot.runtime.runner`` installs its handlers) had the signal's default action: the pod
killed with no log line and status 143 (a rolling update or a scale-down that lands on a starting pod). Now it ends
the command with one line and no traceback: `kvpilot run` with status 0 and the log line its own stop writes (nothing
was started yet, so nothing is left to stop), any other command with 143 (it did not finish). A command that
handles SIGTERM itself (`run` once its loop runs, `simulate`, `demo`) replaces this handler; a SIGTERM the parent
set to be ignored stays ignored."""

from __future__ import annotations

import signal
import sys


class Terminated(BaseException):
    """SIGTERM before the command handled it itself. A BaseException, so that no ``except Exception`` on the way
    (a settings error's, an import fallback's) takes it for an error of its own."""


def _terminate(_signum: int, _frame: object) -> None:
    raise Terminated


def _stopped_at_start() -> None:
    """`kvpilot run`'s lines for a stop before anything started, in its log's format (runner._configure_logging)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("kvpilot.runtime.runner")
    log.info("SIGTERM while starting (imports, settings): stopping, nothing was started")
    log.info("kvpilot stopped")


def main() -> None:
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        from kvpilot.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        raise SystemExit(130) from None
    except Terminated:
        if sys.argv[1:2] == ["run"]:
            _stopped_at_start()
            raise SystemExit(0) from None
        sys.stderr.write("\nterminated (SIGTERM)\n")
        raise SystemExit(143) from None
