"""KEDA served from a process of its own (``keda.serve_from: process``): its answers never wait on the control
loop's tick — not on its event loop, not on its GIL, not on its threads.

The parent (``kvpilot run``) mirrors its ``DecisionBoard`` into the child: every publish and forget, in order and
with its version (``DecisionBoard.mirror_to``), sent over a pipe in batches by one thread. The child serves the same
``build_endpoint`` (ExternalScaler, grpc health, TLS, bearer tokens) over its copy, read on the wall clock with the
parent's staleness limit, so only a parent on the wall clock may serve from it.

The child is a fresh interpreter (``python -m scaler.keda.process``: like multiprocessing's ``spawn``, nothing of the
large parent is forked, but the parent's ``__main__`` — the ``kvpilot`` script, all of the CLI — is not imported
again) and a direct child, so process-tree accounting counts it. It stops when told, on SIGTERM, or when the
parent's end of the pipe closes (the parent died, however it died), ending open ``StreamIsActive`` streams with OK.
The parent restarts a child that dies, with a log line, counting restarts. A child that lives but no longer runs
its event loop (hung, stopped) does not answer the parent's pings, which its loop answers: after ``misses`` pings
in a row go unanswered the parent kills it, and it is restarted as one that died.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from scaler.keda.server import TlsFiles
from scaler.keda.servicer import ServicerSettings
from scaler.publish import DecisionBoard, MirrorOp

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # a fresh interpreter importing grpc on a loaded node: seconds, not minutes
STEADY_S = 60.0  # a child that served this long before dying restarts after the shortest backoff again
PING_INTERVAL_S = 5.0  # the parent asks the child's event loop to answer this often ...
PING_MISSES = 4  # ... and kills a child that left this many pings in a row unanswered (15-20 s: never a busy node)
_STOP: MirrorOp = ("stop", None)


@dataclass(frozen=True, slots=True)
class ChildConfig:
    """What the KEDA process serves; its first message."""

    address: str  # "host:port"; port 0 picks one at the first start, and restarts reuse it
    servicer: ServicerSettings
    stale_after_s: float  # the parent's DecisionReader limit, applied on the wall clock
    tls: TlsFiles | None = None
    grace_s: float = 5.0  # in-flight calls may finish this long at shutdown
    log_level: str = "INFO"


class KedaProcess:
    """The parent's side: starts the KEDA process, feeds it the board's changes, and restarts it when it dies."""

    def __init__(
        self,
        board: DecisionBoard,
        config: ChildConfig,
        *,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        ping_interval_s: float = PING_INTERVAL_S,
        ping_misses: int = PING_MISSES,
    ) -> None:
        if ping_interval_s <= 0 or ping_misses < 1:
            raise ValueError("ping_interval_s must be positive and ping_misses at least 1")
        self.board = board
        self.config = config
        self.port: int | None = None
        self.serving = False  # readiness: the child answers now
        self.restarts_total = 0
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._ping_interval_s = ping_interval_s
        self._ping_misses = ping_misses
        self._pings_sent = self._pings_answered = 0
        self._pinger: asyncio.Task[None] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._status: Connection | None = None
        self._outbox: queue.SimpleQueue[MirrorOp] | None = None
        self._sender: threading.Thread | None = None
        self._watch: asyncio.Task[None] | None = None  # reads the status pipe: sync answers, then its end
        self._syncs: dict[int, asyncio.Future[None]] = {}
        self._sync_seq = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> int:
        """Starts the process, mirrors the board into it and waits until it serves; returns the bound port.

        Raises ValueError when it cannot serve the configuration (the port cannot be bound, TLS files cannot be
        read: the message says which) and RuntimeError when it did not start at all."""
        proc, ops, status = await asyncio.to_thread(_spawn)
        outbox: queue.SimpleQueue[MirrorOp] = queue.SimpleQueue()
        self._proc, self._status, self._outbox = proc, status, outbox
        self._sender = threading.Thread(target=_send, args=(self.config, outbox, ops), name="keda-mirror", daemon=True)
        self._sender.start()
        self.board.mirror_to(outbox.put)
        try:
            kind, detail = await asyncio.wait_for(_message(status), START_TIMEOUT_S)
        except (TimeoutError, EOFError, OSError):
            await self._end(kill=True)
            raise RuntimeError(f"the KEDA server process did not start (exit status {proc.returncode})") from None
        if kind != "serving":
            await self._end(kill=False)
            raise ValueError(str(detail))
        assert isinstance(detail, int)
        self.port = detail
        self._watch = asyncio.create_task(self._read_status(status), name="keda-process-status")
        self._pings_sent = self._pings_answered = 0
        self._pinger = asyncio.create_task(self._ping(proc, outbox), name="keda-process-ping")
        host, _, port = self.config.address.rpartition(":")
        if port == "0":
            self.config = replace(self.config, address=f"{host}:{detail}")
        self.serving = True
        return detail

    async def run(self, stop: asyncio.Event) -> None:
        """Supervises the started process until ``stop``, then stops it. One that dies is restarted (a warning,
        ``restarts_total``) after a backoff that doubles up to ``max_backoff_s`` while it keeps dying."""
        backoff = self._backoff_s
        try:
            while not stop.is_set():
                started = time.monotonic()
                if not await _first(self._exited(), stop):
                    break
                self.serving = False
                pid, code = self.pid, await self._end(kill=False)
                if time.monotonic() - started > STEADY_S:
                    backoff = self._backoff_s
                log.warning(
                    "the KEDA server process%s exited (status %s); KEDA is not served until it restarts in %g s",
                    f" (pid {pid})" if pid is not None else "", code, backoff,
                )  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                if stop.is_set():
                    break
                backoff = min(backoff * 2, self._max_backoff_s)
                self.restarts_total += 1
                try:
                    port = await self.start()
                except (ValueError, RuntimeError, OSError) as e:
                    log.error("the KEDA server process could not restart: %s", e)
                    continue
                log.info("the KEDA server process (pid %s) serves again on port %d", self.pid, port)
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Ends the process as SIGTERM ends the in-loop server: health NOT_SERVING, open streams end with OK,
        in-flight calls finish (up to ``grace_s``); killed if it has not exited by then."""
        self.serving = False
        await self._end(kill=False)

    async def synced(self, timeout_s: float = 10.0) -> None:
        """Returns once the process has applied every change published before this call (tests, benchmarks:
        KEDA itself polls whenever it likes). Raises RuntimeError when no process serves."""
        outbox = self._outbox
        if outbox is None or self._watch is None or self._watch.done():
            raise RuntimeError("the KEDA server process is not running")
        self._sync_seq += 1
        answered = asyncio.get_running_loop().create_future()
        self._syncs[self._sync_seq] = answered
        outbox.put(("sync", self._sync_seq))
        try:
            await asyncio.wait_for(asyncio.shield(answered), timeout_s)
        finally:
            self._syncs.pop(self._sync_seq, None)

    async def _read_status(self, status: Connection) -> None:
        """The process's answers to ``synced``, until its status pipe closes: it exited (or was killed)."""
        while True:
            try:
                kind, detail = await _message(status)
            except (EOFError, OSError):
                break
            if kind == "pong" and isinstance(detail, int):
                self._pings_answered = max(self._pings_answered, detail)
            elif kind == "synced" and detail in self._syncs:
                answered = self._syncs.pop(detail)
                if not answered.done():
                    answered.set_result(None)
        for answered in self._syncs.values():
            if not answered.done():
                answered.set_exception(RuntimeError("the KEDA server process exited"))
        self._syncs.clear()

    async def _ping(self, proc: subprocess.Popen[bytes], outbox: queue.SimpleQueue[MirrorOp]) -> None:
        """Pings the child's event loop every ``ping_interval_s``; kills the child once ``ping_misses`` pings in a
        row are unanswered (its exit is then handled as any other: a warning and a restart). Counting pings, not
        seconds, a parent whose own loop stalled never blames the child for it: it sent nothing meanwhile."""
        while True:
            await asyncio.sleep(self._ping_interval_s)
            if self._pings_sent - self._pings_answered >= self._ping_misses:
                log.warning(
                    "the KEDA server process (pid %d) left %d pings unanswered over %g s: its event loop is hung; "
                    "killing it",
                    proc.pid, self._pings_sent - self._pings_answered, self._ping_misses * self._ping_interval_s,
                )  # fmt: skip
                self.serving = False
                proc.kill()
                return
            self._pings_sent += 1
            outbox.put(("ping", self._pings_sent))

    async def _exited(self) -> None:
        """Returns when the process exited (or was killed)."""
        if self._watch is not None:
            await asyncio.shield(self._watch)

    async def _end(self, *, kill: bool) -> int | None:
        """Stops mirroring, tells the process to stop, waits for it; its exit status."""
        proc, outbox, sender, status, watch = self._proc, self._outbox, self._sender, self._status, self._watch
        self._proc = self._outbox = self._sender = self._status = self._watch = None
        pinger, self._pinger = self._pinger, None
        if pinger is not None:
            pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pinger
        self.board.mirror_to(None)
        if outbox is not None:
            outbox.put(_STOP)
        code = None
        if proc is not None:
            if kill:
                proc.kill()
            try:
                code = await asyncio.to_thread(proc.wait, self.config.grace_s + 5.0)
            except subprocess.TimeoutExpired:
                log.warning("the KEDA server process (pid %d) did not stop in time; killing it", proc.pid)
                proc.kill()
                code = await asyncio.to_thread(proc.wait)
        if sender is not None:
            await asyncio.to_thread(sender.join, 5.0)
        if watch is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(watch, 5.0)
        if status is not None:
            status.close()
        return code


def _spawn() -> tuple[subprocess.Popen[bytes], Connection, Connection]:
    """The process, with a pipe to send it changes and one it reports on (and that closes when it exits)."""
    ops_r, ops_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scaler.keda.process", str(ops_r), str(status_w)],
            pass_fds=(ops_r, status_w),
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        for fd in (ops_w, status_r):
            os.close(fd)
        raise
    finally:
        os.close(ops_r)
        os.close(status_w)
    return proc, Connection(ops_w, readable=False), Connection(status_r, writable=False)


async def _first(exited: Any, stop: asyncio.Event) -> bool:
    """Waits for ``exited`` or ``stop``; True when the process exited first."""
    a, b = asyncio.ensure_future(exited), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (a, b):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return not stop.is_set()


async def _message(conn: Connection) -> Any:
    """The next message on ``conn`` without holding a thread while none comes; EOFError when it is closed."""
    if not conn.poll():
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        fd = conn.fileno()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
    return conn.recv()


def _send(config: ChildConfig, outbox: queue.SimpleQueue[MirrorOp], conn: Connection) -> None:
    """The parent's mirror thread: the configuration, then the board's changes in batches (one pickle and one
    write for everything queued since the last), until the stop is sent or the process is gone."""
    try:
        conn.send(config)
        while True:
            batch = [outbox.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(outbox.get_nowait())
            conn.send(batch)
            if _STOP in batch:
                return
    except OSError:
        return  # the process died; the supervisor starts another with a fresh copy of the board
    finally:
        conn.close()


# -- the child ---------------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    ops, status = Connection(int(argv[1]), writable=False), Connection(int(argv[2]), readable=False)
    try:
        config = ops.recv()
    except EOFError:
        return 0
    assert isinstance(config, ChildConfig)
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent orders the shutdown
    return asyncio.run(_serve(config, ops, status))


async def _serve(config: ChildConfig, ops: Connection, status: Connection) -> int:
    from collector.clock import WallClock
    from scaler.keda.reader import DecisionReader
    from scaler.keda.server import build_endpoint

    board = DecisionBoard()
    reader = DecisionReader(board, WallClock(), config.stale_after_s)
    try:
        endpoint = build_endpoint(config.address, reader, config.servicer, tls=config.tls)
    except ValueError as e:
        status.send(("error", str(e)))
        return 2
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    answer = _Answers(status)
    threading.Thread(target=_receive, args=(ops, answer, board, loop, stop), name="keda-mirror", daemon=True).start()
    gc.freeze()  # the imports' heap: full collections would walk it for nothing
    await endpoint.serve(stop, grace_s=config.grace_s, on_serving=lambda: answer(("serving", endpoint.port)))
    return 0


class _Answers:
    """The child's status pipe, written from its event loop (serving, pongs) and its mirror thread (syncs)."""

    def __init__(self, status: Connection) -> None:
        self._status = status
        self._lock = threading.Lock()

    def __call__(self, message: tuple[str, Any]) -> None:
        with self._lock, contextlib.suppress(OSError):  # the parent is gone: the mirror thread ends this process
            self._status.send(message)


def _receive(
    ops: Connection, answer: _Answers, board: DecisionBoard, loop: asyncio.AbstractEventLoop, stop: asyncio.Event
) -> None:
    """The child's mirror thread: applies the parent's changes, in order, until told to stop or the parent is gone;
    a sync is answered once everything sent before it is applied, a ping by the event loop (so a hung loop is
    seen as hung, not only a dead process)."""
    try:
        while True:
            for op in ops.recv():
                if op == _STOP:
                    return
                if op[0] == "sync":
                    answer(("synced", op[1]))
                    continue
                if op[0] == "ping":
                    with contextlib.suppress(RuntimeError):  # the loop already closed: the process is ending
                        loop.call_soon_threadsafe(answer, ("pong", op[1]))
                    continue
                board.apply(op)
    except (EOFError, OSError):
        return  # the parent's end closed: it stopped or died, and this process goes with it
    finally:
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(stop.set)


if __name__ == "__main__":
    # run as the module the parent pickles against (scaler.keda.process), not as a second copy named __main__
    from scaler.keda.process import main as _main

    sys.exit(_main(sys.argv))
