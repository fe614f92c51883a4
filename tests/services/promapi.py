"""A loopback server answering the Prometheus HTTP API as Prometheus 2.x does, for a fleet of any size.

Series come from the simulator's own rendered pages (vLLM V1 and dcgm-exporter, 4 replica templates after a
minute of load), replicated over ``replicas`` replicas in deployments of ``per_deployment``; every value moves
with the query's ``time`` (counters grow at a per-replica rate, gauges wobble), so rates are never zero.

It answers exactly the queries kvpilot's PromQL source issues (``collector.promql.expressions``): the raw
selector of ``replicas`` mode, the recorded series (when ``rules`` is on; else an empty answer, as a Prometheus
without kvpilot's rules gives), the ad-hoc aggregate query, the sick replicas' and faulty GPUs' series and the
down targets, plus ``/api/v1/metadata``; anything else is a 400 ``bad_data`` as Prometheus answers. Answers are
gzip-compressed when asked for. Aggregates are computed from the same per-replica values the raw answer holds.

Run as a process: ``python -m tests.services.promapi --replicas 10000 --port 0`` prints ``listening PORT``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from collector.promql import expressions as ex

T0 = 1_700_000_000.0
HOUR = 3600.0


@dataclass(frozen=True)
class _Series:
    name: str
    labels: dict[str, str]
    value: float
    kind: str  # counter, gauge, histogram part


def _templates() -> tuple[list[list[_Series]], list[_Series], dict[str, str]]:
    """Four replicas' vLLM series and one GPU's DCGM series, from the simulator after a minute of load."""
    from simulator import PROFILES, Fleet, FleetConfig, load_trace
    from simulator.exposition import render_node, render_replica

    fleet = Fleet(FleetConfig(profile=PROFILES["llama3-8b-h100"], replicas=4), load_trace("synthetic"))
    fleet.advance_to(90.0)
    snap = fleet.snapshot()
    types: dict[str, str] = {}

    def parse(text: str) -> list[_Series]:
        out = []
        for fam in text_string_to_metric_families(text):
            types[fam.name] = fam.type
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                kind = "counter" if fam.type == "counter" or s.name.endswith(("_bucket", "_count", "_sum")) else "gauge"
                out.append(_Series(s.name, dict(s.labels), float(s.value), kind))
        return out

    replicas = [parse(render_replica(r, "vllm").decode()) for r in snap.replicas[:4]]
    node = snap.gpus[0].node
    gpu0 = [s for s in parse(render_node(node, snap.gpus, "default").decode()) if s.labels.get("gpu") == "0"]
    return replicas, gpu0, types


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if v != int(v) or abs(v) >= 1e15 else str(int(v))


class FakeFleet:
    """Per-replica values as functions of time; the answers of every query kvpilot issues."""

    def __init__(
        self,
        replicas: int,
        *,
        per_deployment: int = 100,
        rules: bool = True,
        sick_every: int = 100,
        down_every: int = 1000,
        window_s: float = 60.0,
    ) -> None:
        self.n = replicas
        self.per_deployment = per_deployment
        self.rules = rules
        self.window_s = window_s
        self.templates, self.gpu_template, self.types = _templates()
        rng = np.random.default_rng(17)
        self.rate = rng.uniform(0.5, 1.5, replicas)  # counters grow by template value x rate per hour
        self.phase = rng.uniform(0, 2 * math.pi, replicas)
        idx = np.arange(replicas)
        self.sick = idx[idx % sick_every == 7]
        self.down = idx[idx % down_every == 13]
        self.faulty_gpus = idx[idx % (10 * sick_every) == 21]
        self.sick_set = set(self.sick.tolist())
        self.calls: dict[str, int] = {}
        self.last_query = ""

    # -- per replica -------------------------------------------------------------------------------------------

    def _labels(self, i: int) -> dict[str, str]:
        d = i // self.per_deployment
        return {
            "job": "vllm",
            "instance": f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}:8000",
            "namespace": "prod",
            "deployment": f"llm-{d}",
            "pod": f"llm-{d}-{i % self.per_deployment}",
        }

    def _value(self, s: _Series, i: int, t: float) -> float:
        if s.kind == "counter":
            return s.value * (1.0 + float(self.rate[i]) * (t - T0) / HOUR)
        if s.name == "vllm:kv_cache_usage_perc":
            base = 0.92 if i in self.sick_set else s.value
            return min(1.0, base * (1.0 + 0.05 * math.sin(t / 30.0 + self.phase[i])))
        return s.value * (1.0 + 0.1 * math.sin(t / 30.0 + self.phase[i]))

    def _replica(self, i: int, t: float) -> Iterator[tuple[str, dict[str, str], float]]:
        base = self._labels(i)
        for s in self.templates[i % len(self.templates)]:
            yield s.name, {**base, **s.labels}, self._value(s, i, t)

    def _gpu(self, i: int, t: float) -> Iterator[tuple[str, dict[str, str], float]]:
        base = {"job": "dcgm", "instance": f"node-{i}:9400", "Hostname": f"node-{i}"}
        for s in self.gpu_template:
            v = 79.0 if s.name == "DCGM_FI_DEV_XID_ERRORS" else self._value(s, i, t)
            yield s.name, {**base, **s.labels}, v

    # -- per deployment ------------------------------------------------------------------------------------------

    def _aggregates(self, t: float) -> Iterator[tuple[str, dict[str, str], float]]:
        n_dep = math.ceil(self.n / self.per_deployment)
        dep = np.arange(self.n) // self.per_deployment
        tmpl = np.arange(self.n) % len(self.templates)
        down = np.zeros(self.n, bool)
        down[self.down] = True
        up = ~down
        wobble = 1.0 + 0.1 * np.sin(t / 30.0 + self.phase)

        def template_value(name: str, **match: str) -> np.ndarray:
            """Per replica: the sum of its template's samples of ``name`` (matching ``match``)."""
            per_t = [
                sum(s.value for s in tp if s.name == name and all(s.labels.get(k) == v for k, v in match.items()))
                for tp in self.templates
            ]
            return np.asarray(per_t)[tmpl]

        def by_dep(values: np.ndarray, op: str = "sum") -> np.ndarray:
            out = np.full(n_dep, np.nan if op == "max" else 0.0)
            v, d = values[up], dep[up]
            if op == "max":
                out = np.full(n_dep, -np.inf)
                np.maximum.at(out, d, v)
            else:
                np.add.at(out, d, v)
            return out

        counts = by_dep(np.ones(self.n))
        rate_per_s = self.rate / HOUR

        def rate_of(name: str) -> np.ndarray:
            return by_dep(template_value(name) * rate_per_s)

        kv = template_value("vllm:kv_cache_usage_perc") * (1.0 + 0.05 * np.sin(t / 30.0 + self.phase))
        kv[self.sick] = np.minimum(1.0, 0.92 * (1.0 + 0.05 * np.sin(t / 30.0 + self.phase[self.sick])))
        kv = np.minimum(kv, 1.0)
        waiting = template_value("vllm:num_requests_waiting") * wobble
        running = template_value("vllm:num_requests_running") * wobble
        scalars = {
            "replicas": np.bincount(dep, minlength=n_dep).astype(float),
            "ready_replicas": counts,
            "requests_waiting": by_dep(waiting),
            "requests_running": by_dep(running),
            "kv_usage_mean": by_dep(kv) / np.maximum(counts, 1),
            "kv_usage_max": by_dep(kv, "max"),
            "requests_finished_rate": rate_of("vllm:request_success_total"),
            "arrival_rate": rate_of("vllm:request_success_total"),
            "prompt_tokens_rate": rate_of("vllm:prompt_tokens_total"),
            "generation_tokens_rate": rate_of("vllm:generation_tokens_total"),
            "preemptions_rate": rate_of("vllm:num_preemptions_total"),
            "prefix_hits_rate": rate_of("vllm:prefix_cache_hits_total"),
            "prefix_queries_rate": rate_of("vllm:prefix_cache_queries_total"),
        }
        for name, values in scalars.items():
            for d in range(n_dep):
                yield name, self._dep_labels(d, name), float(values[d])
        for field, metric in (
            ("ttft", "vllm:time_to_first_token_seconds"),
            ("itl", "vllm:inter_token_latency_seconds"),
            ("queue_time", "vllm:request_queue_time_seconds"),
        ):
            les = sorted(
                {s.labels["le"] for s in self.templates[0] if s.name == f"{metric}_bucket"}, key=lambda x: float(x)
            )
            for le in les:
                inc = by_dep(template_value(f"{metric}_bucket", le=le) * rate_per_s * self.window_s)
                for d in range(n_dep):
                    yield f"{field}_bucket", {**self._dep_labels(d, f"{field}_bucket"), "le": le}, float(inc[d])
            for part in ("sum", "count"):
                inc = by_dep(template_value(f"{metric}_{part}") * rate_per_s * self.window_s)
                for d in range(n_dep):
                    yield f"{field}_{part}", self._dep_labels(d, f"{field}_{part}"), float(inc[d])

    def _dep_labels(self, d: int, signal: str) -> dict[str, str]:
        return {"namespace": "prod", "deployment": f"llm-{d}", ex.SIGNAL_LABEL: signal}

    # -- queries -------------------------------------------------------------------------------------------------

    def answer(self, query: str, t: float) -> Iterator[tuple[str | None, dict[str, str], float]]:
        """(name, labels, value) of every series of the answer; raises ValueError on a query it does not know."""
        self.last_query = query
        if query.startswith("label_replace("):
            self._count("adhoc")
            for _signal, labels, v in self._aggregates(t):
                yield None, labels, v
        elif query.startswith(f'{{__name__=~"{ex.RECORD_PREFIX}'):
            self._count("rules")
            if self.rules:
                records = {s.name: s.record for s in ex.SIGNALS}
                for signal, labels, v in self._aggregates(t):
                    yield records[signal], labels, v
        elif "and on (namespace, pod)" in query:
            self._count("sick")
            for i in self.sick.tolist():
                yield from self._replica(i, t)
        elif "and on (instance, gpu)" in query:
            self._count("gpus")
            for i in self.faulty_gpus.tolist():
                yield from self._gpu(i, t)
        elif query.startswith("up{") and query.endswith("== 0"):
            self._count("down")
            for i in self.down.tolist():
                yield "up", self._labels(i), 0.0
        elif query.startswith('{__name__=~"') and query.endswith('|up"}'):
            self._count("raw")
            down = set(self.down.tolist())
            for i in range(self.n):
                yield "up", self._labels(i), 0.0 if i in down else 1.0
                if i not in down:
                    yield from self._replica(i, t)
                    yield from self._gpu(i, t)
        else:
            raise ValueError(f"this test server does not evaluate {query[:120]!r}")

    def _count(self, kind: str) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1

    def render(self, query: str, t: float) -> bytes:
        """The JSON body Prometheus 2.x writes for an instant query (its series order is not promised)."""
        ts = json.dumps(t)
        parts = [b'{"status":"success","data":{"resultType":"vector","result":[']
        first = True
        for name, labels, v in self.answer(query, t):
            metric = {"__name__": name, **labels} if name is not None else labels
            item = f'{{"metric":{json.dumps(metric, separators=(",", ":"))},"value":[{ts},"{_fmt(v)}"]}}'
            parts.append((b"" if first else b",") + item.encode())
            first = False
        parts.append(b"]}}")
        return b"".join(parts)

    def metadata(self) -> bytes:
        data = {name: [{"type": kind, "help": "", "unit": ""}] for name, kind in self.types.items()}
        return json.dumps({"status": "success", "data": data}).encode()


class _Handler(BaseHTTPRequestHandler):
    fleet: FakeFleet
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _params(self) -> dict[str, str]:
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        params = {k: v[0] for k, v in parse_qs(query).items()}
        if self.command == "POST":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            params.update({k: v[0] for k, v in parse_qs(body).items()})
        return params

    def _send(self, status: int, body: bytes) -> None:
        gz = "gzip" in (self.headers.get("Accept-Encoding") or "")
        if gz:
            body = gzip.compress(body, compresslevel=1)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if gz:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self) -> None:
        path = self.path.split("?", 1)[0]
        params = self._params()
        if path == "/api/v1/metadata":
            return self._send(200, self.fleet.metadata())
        if path == "/api/v1/query":
            try:
                body = self.fleet.render(params.get("query", ""), float(params.get("time") or T0))
            except ValueError as e:
                error = json.dumps({"status": "error", "errorType": "bad_data", "error": str(e)})
                return self._send(400, error.encode())
            return self._send(200, body)
        return self._send(404, b'{"status":"error","errorType":"not_found","error":"no route"}')

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()


def serve(fleet: FakeFleet, port: int = 0) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"fleet": fleet})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="promapi", daemon=True).start()
    return server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, required=True)
    p.add_argument("--per-deployment", type=int, default=100)
    p.add_argument("--no-rules", action="store_true", help="answer as a Prometheus without kvpilot's rules")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    server = serve(FakeFleet(args.replicas, per_deployment=args.per_deployment, rules=not args.no_rules), args.port)
    print(f"listening {server.server_address[1]}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
