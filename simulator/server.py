"""The live simulator: one HTTP port serving per-replica engine metrics, per-node dcgm-exporter metrics,
target discovery and a control API, while a background thread advances the fleet at `speed`× real time.

| path | answer |
|---|---|
| GET /replicas/<name>/metrics | the replica's /metrics in the chosen engine format (503 while loading) |
| GET /nodes/<node>/metrics | dcgm-exporter page of the node (vanished GPUs omitted) |
| GET /targets | JSON list: url, kind (engine or dcgm), engine, namespace, deployment, pod, node, ready |
| GET /sd | the same targets in Prometheus http_sd_configs format |
| GET /control/state | fleet state as JSON |
| POST /control/replicas {"count": N} | set the desired replica count |
| POST /control/faults {"type": ...} | inject a fault (simulator.faults) |
| POST /control/evict {"replica": NAME} | delete a replica's pod (a drain's eviction): retried requests, replacement |
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from simulator.exposition import ENGINES, render_node, render_replica
from simulator.faults import parse_fault
from simulator.fleet import Fleet

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_BODY = 64 * 1024
MAX_REPLICAS = 1024
# Connections the listening socket holds until the accept loop takes them. socketserver's default, 5, is overflowed
# by a scraper that opens one connection per page at once (kvpilot's collector, Prometheus): the kernel drops the
# SYNs past it, and each of those connects waits for TCP to send its SYN again (1 s, then 3 s after the first), which
# made ~80-replica demos time out at 4.5 s and report healthy replicas down. Room for every page of the largest fleet
# (the kernel caps it at net.core.somaxconn).
LISTEN_BACKLOG = MAX_REPLICAS + 64


class LiveFleet:
    """A Fleet behind a lock, advanced by a background thread; the HTTP handlers read and steer it."""

    def __init__(self, fleet: Fleet, *, engine: str = "vllm", speed: float = 1.0, tick_s: float = 0.1) -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.fleet = fleet
        self.engine = engine
        self.speed = speed
        self.tick_s = tick_s
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def advance_to(self, t: float) -> None:
        """Move the fleet to virtual time t now: for callers that drive time themselves (the demo in lockstep with
        kvpilot's clock) instead of `start()`'s wall-clock thread."""
        with self.lock:
            self.fleet.advance_to(max(t, self.fleet.time))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="simulator-advance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        wall0 = time.monotonic()
        virt0 = self.fleet.time
        while not self._stop.wait(self.tick_s):
            target = virt0 + (time.monotonic() - wall0) * self.speed
            try:
                with self.lock:
                    self.fleet.advance_to(max(target, self.fleet.time))
            except Exception as e:  # a bug must show, not silently freeze the fleet
                self.error = f"{type(e).__name__}: {e}"
                sys.stderr.write(f"simulator stopped advancing: {self.error}\n")
                return


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A scraper that gave up (its timeout, under a large simulated fleet) hangs up mid-answer: nothing to report.
        # Anything else is a fault of ours and keeps the standard traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def make_server(live: LiveFleet, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"live": live})
    server = _Server((host, port), handler)
    server.daemon_threads = True
    return server


class _Handler(BaseHTTPRequestHandler):
    live: LiveFleet
    server_version = "kvpilot-simulator"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _host(self) -> str:
        address = self.server.server_address
        assert isinstance(address, tuple)
        return f"{address[0]}:{address[1]}"

    # -- routes --------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _guarded(self, route: Any) -> None:
        try:
            route()
        except Exception as e:  # answer 500 with the reason rather than dropping the connection
            self._error(500, f"{type(e).__name__}: {e}")

    def _get(self) -> None:
        path = self.path.split("?", 1)[0]
        parts = [p for p in path.split("/") if p]
        live = self.live
        if parts == ["healthz"]:
            return self._json(200, {"status": "ok"})
        if parts == ["targets"]:
            return self._json(200, self._targets())
        if parts == ["sd"]:
            return self._json(200, self._sd())
        if parts == ["control", "state"]:
            return self._json(200, self._state())
        if len(parts) == 3 and parts[0] == "replicas" and parts[2] == "metrics":
            with live.lock:
                snap = live.fleet.snapshot(replicas=(parts[1],))
            rep = next((r for r in snap.replicas if r.name == parts[1]), None)
            if rep is None:
                return self._error(404, f"no replica {parts[1]!r}")
            if rep.state == "loading":
                return self._error(503, f"replica {rep.name!r} is loading its weights")
            return self._send(200, render_replica(rep, live.engine), CONTENT_TYPE)
        if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "metrics":
            with live.lock:
                snap = live.fleet.snapshot(replicas=())
            if not any(g.node == parts[1] for g in snap.gpus):
                return self._error(404, f"no node {parts[1]!r}")
            body = render_node(parts[1], snap.gpus, live.fleet.config.namespace)
            return self._send(200, body, CONTENT_TYPE)
        return self._error(404, f"no route {path!r}")

    def _post(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return self._error(400, "bad Content-Length")
        if length > MAX_BODY or length < 0:
            return self._error(413, f"body larger than {MAX_BODY} bytes")
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return self._error(400, f"body is not JSON: {e}")
        live = self.live
        if path == "/control/replicas":
            count = body.get("count") if isinstance(body, dict) else None
            if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_REPLICAS:
                return self._error(400, f'expected {{"count": N}} with 0 <= N <= {MAX_REPLICAS}')
            with live.lock:
                live.fleet.set_replicas(count)
            return self._json(200, self._state())
        if path == "/control/faults":
            try:
                fault = parse_fault(body)
                with live.lock:
                    live.fleet.inject(fault)
            except (ValueError, KeyError) as e:
                return self._error(400, str(e).strip("'\""))
            return self._json(200, {"injected": asdict(fault)})
        if path == "/control/evict":
            name = body.get("replica") if isinstance(body, dict) else None
            if not isinstance(name, str) or not name:
                return self._error(400, 'expected {"replica": NAME}')
            try:
                with live.lock:
                    retried = live.fleet.evict(name)
            except KeyError as e:
                return self._error(404, str(e).strip("'\""))
            return self._json(200, {"evicted": name, "requests_retried": retried})
        return self._error(404, f"no route {path!r}")

    # -- documents -----------------------------------------------------------------------------------------------
    def _targets(self) -> list[dict[str, Any]]:
        live = self.live
        cfg = live.fleet.config
        with live.lock:
            snap = live.fleet.snapshot()
        base = f"http://{self._host()}"
        out = [
            {
                "url": f"{base}/replicas/{r.name}/metrics",
                "kind": "engine",
                "engine": live.engine,
                "namespace": cfg.namespace,
                "deployment": cfg.deployment,
                "pod": r.name,
                "node": r.node,
                # As a Kubernetes pod's Ready condition: false while loading weights or draining. A hung replica
                # stays ready, as a pod on a hung GPU passes its HTTP readiness probe.
                "ready": r.state not in ("loading", "draining"),
            }
            for r in snap.replicas
        ]
        for node in sorted({g.node for g in snap.gpus}):
            out.append(
                {
                    "url": f"{base}/nodes/{node}/metrics",
                    "kind": "dcgm",
                    "engine": "",
                    "namespace": cfg.namespace,
                    "deployment": "dcgm-exporter",
                    "pod": f"dcgm-exporter-{node}",
                    "node": node,
                    "ready": True,
                }
            )
        return out

    def _sd(self) -> list[dict[str, Any]]:
        groups = []
        for t in self._targets():
            host_path = t["url"].split("://", 1)[1]
            host, _, path = host_path.partition("/")
            # dcgm-exporter pages carry per-GPU pod/namespace labels of their own: target labels of the same
            # names would push them aside (exported_pod), so the exporter's own pod is not labelled here.
            # `ready` is discovery's business, not a label (Prometheus's pod discovery keeps non-ready pods too).
            skip = {"url", "ready", "pod", "namespace"} if t["kind"] == "dcgm" else {"url", "ready"}
            labels = {"__metrics_path__": "/" + path, **{k: v for k, v in t.items() if k not in skip and v}}
            groups.append({"targets": [host], "labels": labels})
        return groups

    def _state(self) -> dict[str, Any]:
        live = self.live
        with live.lock:
            snap = live.fleet.snapshot()
            quantiles = live.fleet.ttft_quantiles()
        return {
            "time_s": snap.time,
            "namespace": live.fleet.config.namespace,
            "deployment": live.fleet.config.deployment,
            "speed": live.speed,
            "error": live.error,
            "engine": live.engine,
            "routing": snap.routing,
            "arrivals_total": snap.arrivals_total,
            "unrouted_waiting": snap.unrouted_waiting,
            "ttft_s": {str(q): v for q, v in quantiles.items()},
            "replicas": [
                {
                    "name": r.name,
                    "node": r.node,
                    "state": r.state,
                    "requests_waiting": r.requests_waiting,
                    "requests_running": r.requests_running,
                    "kv_usage": r.kv_usage,
                    "prefix_hit_rate": r.prefix_hits_total / r.prefix_queries_total if r.prefix_queries_total else None,
                    "preemptions_total": r.preemptions_total,
                }
                for r in snap.replicas
            ],
            "gpus": [
                {
                    "node": g.node,
                    "index": g.index,
                    "uuid": g.uuid,
                    "pod": g.pod,
                    "utilisation": g.utilisation,
                    "last_xid": g.last_xid,
                    "vanished": g.vanished,
                }
                for g in snap.gpus
            ],
        }
