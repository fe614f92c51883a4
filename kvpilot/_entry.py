"""The `kvpilot` console script's entry point: a Ctrl-C at any moment, even while the command line's modules are
still being imported, ends the command with status 130 and one line, never a traceback.

SIGTERM likewise, from the first line here: before, a SIGTERM while `kvpilot run` imported its modules and read its
settings (~0.9 s, before ``kvpilot.runtime.runner`` installs its handlers) had the signal's default action: the pod
killed with no log line and status 143 (a rolling update or a scale-down that lands on a starting pod). Now it ends
the command with one line and no traceback: `kvpilot run` with status 0 and the log line its own stop writes (nothing
was started yet, so nothing is left to stop), any other command with 143 (it did not finish). A command that
handles SIGTERM itself (`run` once its loop runs, `simulate`, `demo`) replaces this handler; a SIGTERM the parent
set to be ignored stays ignored.

SIGHUP the same way (session 31): `kvpilot run` stops cleanly on SIGHUP once its runner handles it, but in the first
~1 s it still had the default action (killed with no word, status 129: a terminal closed on a starting run). Now
`kvpilot run` exits 0 with its stop's lines, any other command 129 with one line; `nohup` (SIGHUP ignored) stays
ignored."""

from __future__ import annotations

import signal
import sys

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """SIGTERM or SIGHUP before the command handled it itself. A BaseException, so that no ``except Exception`` on
    the way (a settings error's, an import fallback's) takes it for an error of its own."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signal = signal.Signals(signum)


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def _stopped_at_start(signame: str) -> None:
    """`kvpilot run`'s lines for a stop before anything started, in its log's format (runner._configure_logging)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("kvpilot.runtime.runner")
    if signame == signal.SIGHUP.name:  # the runner's words for it
        log.warning("SIGHUP: kvpilot does not read its settings again on SIGHUP; restart it to apply them")
    log.info("%s while starting (imports, settings): stopping, nothing was started", signame)
    log.info("kvpilot stopped")


def main() -> None:
    for sig in _SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _terminate)
    try:
        from kvpilot.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        raise SystemExit(130) from None
    except Terminated as e:
        if sys.argv[1:2] == ["run"]:
            _stopped_at_start(e.signal.name)
            raise SystemExit(0) from None
        sys.stderr.write(f"\nterminated ({e.signal.name})\n")
        raise SystemExit(128 + e.signal.value) from None
