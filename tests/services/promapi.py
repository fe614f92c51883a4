"""A loopback server answering the Prometheus HTTP API as Prometheus 2.x does, for a fleet of any size.

Series come from the simulator's own rendered pages (vLLM V1 and dcgm-exporter, 4 replica templates after a
minute of load), replicated over ``replicas`` replicas in deployments of ``per_deployment``; every value moves
with the query's ``time`` (counters grow at a per-replica rate, gauges wobble), so rates are never zero.

It answers exactly the queries kvpilot's PromQL source issues (``collector.promql.expressions``): the raw
selector of ``replicas`` mode, the recorded series (when ``rules`` is on; else an empty answer, as a Prometheus
without kvpilot's rules gives), the ad-hoc aggregate query, the sick replicas' and faulty GPUs' series, the GPUs
gone from their exporters' (none), the down targets and the deployments' names (a shard's narrowing), the
kube-state-metrics Deployment series and their exporter's ``up`` a test puts in ``ksm``, plus
``/api/v1/metadata``; anything else is a 400
``bad_data`` as Prometheus answers. Label matchers (``=``, ``!=``, ``=~``, ``!~``, regexes anchored, a missing
label read as "") narrow every answer as Prometheus' would; the matchers of all of a query's selectors apply
together (kvpilot's put the same ones in each). Answers are gzip-compressed when asked for. Aggregates are
computed from the same per-replica values the raw answer holds. ``sent`` counts the series answered per query
kind and ``log`` keeps the latest queries with their series counts.

Run as a process: ``python -m tests.services.promapi --replicas 10000 --port 0`` prints ``listening PORT``.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import re
import threading
from collections import deque
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


def _dumps(labels: dict[str, str]) -> str:
    return json.dumps(labels, separators=(",", ":"))


@dataclass
class _Rows:
    """Series of an answer, prepared once: each row's labels as JSON, its base value, how it moves and whose it is;
    a call only computes the values (vectorised) and joins the text."""

    metrics: list[str]
    base: np.ndarray
    how: np.ndarray  # GAUGE wobbles, COUNTER grows with time at the replica's rate, FIXED stays (up, an XID)
    replica: np.ndarray  # int: the replica (or deployment) whose rate and phase apply

    @staticmethod
    def build(rows: list[tuple[dict[str, str], float, int, int]]) -> _Rows:
        return _Rows(
            [_dumps(m) for m, _, _, _ in rows],
            np.asarray([b for _, b, _, _ in rows], float),
            np.asarray([c for _, _, c, _ in rows], int),
            np.asarray([r for _, _, _, r in rows], int),
        )


GAUGE, COUNTER, FIXED = 0, 1, 2
Row = tuple[dict[str, str], float, int, int]


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
        self.sick = idx[idx % sick_every == 7]  # a KV pool near full
        self.down = idx[idx % down_every == 13]
        self.faulty_gpus = idx[idx % (10 * sick_every) == 21]
        # kube-state-metrics' series (and its own `up`), as a test sets them: (labels with __name__, value)
        self.ksm: list[tuple[dict[str, str], float]] = []
        self.calls: dict[str, int] = {}
        self.sent: dict[str, int] = {}  # series answered, per query kind
        self.log: deque[tuple[str, str, int]] = deque(maxlen=10_000)  # (kind, query, series answered)
        self._count = threading.Lock()
        self._cache: dict[tuple[str, str | None, Matchers], _Rows] = {}
        self._labels_cache: dict[tuple[bool, Matchers], list[str]] = {}

    def take_down(self, *replicas: int) -> None:
        """These replicas' targets go down from now on (``up == 0``, no other series), as the ones of ``down_every``
        are from the start."""
        self.down = np.union1d(self.down, np.asarray(replicas, dtype=self.down.dtype))
        self._cache.clear()  # the rows of every query kind that reads ``down``

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

    def _replica_rows(self, i: int) -> list[Row]:
        base = self._labels(i)
        sick = i in self.sick_set
        out = []
        for s in self.templates[i % len(self.templates)]:
            value = 0.92 if sick and s.name == "vllm:kv_cache_usage_perc" else s.value
            out.append(({"__name__": s.name, **base, **s.labels}, value, COUNTER if s.kind == "counter" else GAUGE, i))
        return out

    def _gpu_rows(self, i: int) -> list[Row]:
        base = {"job": "dcgm", "instance": f"node-{i}:9400", "Hostname": f"node-{i}"}
        out = []
        for s in self.gpu_template:
            value = 79.0 if s.name == "DCGM_FI_DEV_XID_ERRORS" and i in self.faulty_set else s.value
            how = FIXED if s.name == "DCGM_FI_DEV_XID_ERRORS" else COUNTER if s.kind == "counter" else GAUGE
            out.append(({"__name__": s.name, **base, **s.labels}, value, how, i))
        return out

    @property
    def sick_set(self) -> set[int]:
        return self._sets()[0]

    @property
    def faulty_set(self) -> set[int]:
        return self._sets()[1]

    def _sets(self) -> tuple[set[int], set[int]]:
        if not hasattr(self, "_sick_faulty"):
            self._sick_faulty = (set(self.sick.tolist()), set(self.faulty_gpus.tolist()))
        return self._sick_faulty

    def _rows(self, kind: str, names: str | None = None, matchers: Matchers = ()) -> _Rows:
        """The rows of one kind of query; ``names``: the query's ``__name__=~`` regex, which Prometheus anchors (a
        series whose name it does not match in full is not in the answer); ``matchers``: its other label matchers."""
        key = (kind, names, matchers)
        rows = self._cache.get(key)
        if rows is not None:
            return rows
        built: list[Row]
        if kind == "deployments":
            n_dep = math.ceil(self.n / self.per_deployment)
            counts = np.bincount(np.arange(self.n) // self.per_deployment, minlength=n_dep)
            # matched against the `up` series counted, answered with the labels counted by
            targets = [(self._labels(d * self.per_deployment), float(c)) for d, c in enumerate(counts.tolist())]
            built = [({k: up[k] for k in _BY}, c, FIXED, 0) for up, c in targets if _matches(up, matchers)]
            matchers = ()
        elif kind == "sick":
            built = [r for i in self.sick.tolist() for r in self._replica_rows(i)]
        elif kind == "gpus":
            built = [r for i in self.faulty_gpus.tolist() for r in self._gpu_rows(i)]
        elif kind in ("amd_gpus", "vanished"):
            built = []  # an NVIDIA fleet, whose GPUs stay listed
        elif kind == "down":
            built = [({"__name__": "up", **self._labels(i)}, 0.0, FIXED, i) for i in self.down.tolist()]
        elif kind == "raw":
            down = set(self.down.tolist())
            built = []
            for i in range(self.n):
                built.append(({"__name__": "up", **self._labels(i)}, 0.0 if i in down else 1.0, FIXED, i))
                if i not in down:
                    built += self._replica_rows(i) + self._gpu_rows(i)
        else:
            raise KeyError(kind)
        if names is not None:
            wanted = re.compile(names)
            built = [r for r in built if wanted.fullmatch(r[0]["__name__"])]
        if matchers:
            built = [r for r in built if _matches(r[0], matchers)]
        rows = self._cache[key] = _Rows.build(built)
        return rows

    def _values(self, rows: _Rows, t: float) -> np.ndarray:
        grow = 1.0 + self.rate[rows.replica] * (t - T0) / HOUR
        wobble = 1.0 + 0.05 * np.sin(t / 30.0 + self.phase[rows.replica])
        values = np.where(rows.how == COUNTER, rows.base * grow, np.minimum(rows.base * wobble, np.inf))
        return np.where(rows.how == FIXED, rows.base, values)

    # -- per deployment ------------------------------------------------------------------------------------------

    def _per_template(self, name: str, **match: str) -> np.ndarray:
        """Per template: the sum of its samples of ``name`` matching ``match`` (prepared once)."""
        key = name + repr(sorted(match.items()))
        got = self._template_sums.get(key)
        if got is None:
            got = self._template_sums[key] = np.asarray(
                [
                    sum(s.value for s in tp if s.name == name and all(s.labels.get(k) == v for k, v in match.items()))
                    for tp in self.templates
                ]
            )
        return got

    @property
    def _template_sums(self) -> dict[str, np.ndarray]:
        if not hasattr(self, "_sums"):
            self._sums: dict[str, np.ndarray] = {}
        return self._sums

    def _aggregate_values(self, t: float) -> list[tuple[str, dict[str, str], np.ndarray]]:
        """(signal, extra labels, value per deployment) as the recording rules would compute them now."""
        n_dep = math.ceil(self.n / self.per_deployment)
        dep = np.arange(self.n) // self.per_deployment
        tmpl = np.arange(self.n) % len(self.templates)
        up = np.ones(self.n, bool)
        up[self.down] = False
        wobble = 1.0 + 0.05 * np.sin(t / 30.0 + self.phase)
        rate_per_s = self.rate / HOUR

        def per_replica(name: str, **match: str) -> np.ndarray:
            return self._per_template(name, **match)[tmpl]

        def by_dep(values: np.ndarray, op: str = "sum") -> np.ndarray:
            v, d = values[up], dep[up]
            if op == "max":
                out = np.full(n_dep, -np.inf)
                np.maximum.at(out, d, v)
                return out
            return np.bincount(d, weights=v, minlength=n_dep)

        def rate_of(name: str) -> np.ndarray:
            return by_dep(per_replica(name) * rate_per_s)

        ready = by_dep(np.ones(self.n))
        kv = per_replica("vllm:kv_cache_usage_perc")
        kv[self.sick] = 0.92
        kv = np.minimum(kv * wobble, 1.0)
        finished = rate_of("vllm:request_success_total")
        out: list[tuple[str, dict[str, str], np.ndarray]] = [
            ("replicas", {}, np.bincount(dep, minlength=n_dep).astype(float)),
            ("ready_replicas", {}, ready),
            ("requests_waiting", {}, by_dep(per_replica("vllm:num_requests_waiting") * wobble)),
            ("requests_running", {}, by_dep(per_replica("vllm:num_requests_running") * wobble)),
            ("kv_usage_mean", {}, by_dep(kv) / np.maximum(ready, 1)),
            ("kv_usage_max", {}, by_dep(kv, "max")),
            ("requests_finished_rate", {}, finished),
            ("arrival_rate", {}, finished),
            ("prompt_tokens_rate", {}, rate_of("vllm:prompt_tokens_total")),
            ("generation_tokens_rate", {}, rate_of("vllm:generation_tokens_total")),
            ("preemptions_rate", {}, rate_of("vllm:num_preemptions_total")),
            ("prefix_hits_rate", {}, rate_of("vllm:prefix_cache_hits_total")),
            ("prefix_queries_rate", {}, rate_of("vllm:prefix_cache_queries_total")),
        ]
        for field, metric in (
            ("ttft", "vllm:time_to_first_token_seconds"),
            ("itl", "vllm:inter_token_latency_seconds"),
            ("queue_time", "vllm:request_queue_time_seconds"),
        ):
            les = sorted({s.labels["le"] for s in self.templates[0] if s.name == f"{metric}_bucket"}, key=float)
            for le in les:
                inc = per_replica(f"{metric}_bucket", le=le) * rate_per_s * self.window_s
                out.append((f"{field}_bucket", {"le": le}, by_dep(inc)))
            for part in ("sum", "count"):
                out.append(
                    (f"{field}_{part}", {}, by_dep(per_replica(f"{metric}_{part}") * rate_per_s * self.window_s))
                )
        return out

    def _aggregate_text(self, t: float, *, named: bool, matchers: Matchers = ()) -> list[str]:
        """The deployments' series; ``matchers`` select deployments by the labels their targets share (``job``,
        ``namespace``, ``deployment``), as they would select the raw series the aggregates are computed from."""
        records = {s.name: s.record for s in ex.SIGNALS}
        n_dep = math.ceil(self.n / self.per_deployment)
        ts = json.dumps(t)
        computed = self._aggregate_values(t)
        unknown = {label for label, _, _ in matchers} - {"job", *_BY}
        if unknown:
            raise ValueError(f"this test server does not select deployments by {sorted(unknown)}")
        keep = (
            np.asarray([_matches(self._labels(d * self.per_deployment), matchers) for d in range(n_dep)], bool)
            if matchers
            else np.ones(n_dep, bool)
        )
        key = (named, matchers)
        metrics = self._labels_cache.get(key)
        if metrics is None:
            metrics = self._labels_cache[key] = [
                _dumps(
                    {**({"__name__": records[signal]} if named else {}), "namespace": "prod", "deployment": f"llm-{d}"}
                    | {ex.SIGNAL_LABEL: signal, **extra}
                )
                for signal, extra, _ in computed
                for d in range(n_dep)
                if keep[d]
            ]
        values = np.concatenate([v[keep] for _, _, v in computed]).tolist()
        return [f'{{"metric":{m},"value":[{ts},"{_fmt(v)}"]}}' for m, v in zip(metrics, values, strict=True)]

    # -- queries -------------------------------------------------------------------------------------------------

    def kind(self, query: str) -> str:
        """Which of kvpilot's queries this is; ValueError for anything else."""
        if query.startswith('{__name__=~"kube_deployment_') or (query.startswith("up{job=~") and "==" not in query):
            return "ksm"
        if query.startswith("label_replace("):
            return "adhoc"
        if query.startswith(f'{{__name__=~"{ex.RECORD_PREFIX}'):
            return "rules"
        if query.startswith(f"count by ({ex.BY}) (up{{"):
            return "deployments"
        if "last_over_time(" in query:  # before the others: it names GPUs and joins like them
            return "vanished"
        if f"and on ({ex.AMD_GPU})" in query or "and on (node)" in query:  # before "sick": it names the stuck ones
            return "amd_gpus"
        if "and on (namespace, pod)" in query:
            return "sick"
        if "and on (instance, gpu)" in query:
            return "gpus"
        if query.startswith("up{") and query.endswith("== 0"):
            return "down"
        if query.startswith('{__name__=~"') and '|up"' in query and query.endswith("}"):
            return "raw"
        raise ValueError(f"this test server does not evaluate {query[:120]!r}")

    def render(self, query: str, t: float) -> bytes:
        """The JSON body Prometheus 2.x writes for an instant query (its series order is not promised)."""
        items = [item for part, tag in _union_parts(query) for item in self._items(part, t, tag)]
        return ('{"status":"success","data":{"resultType":"vector","result":[' + ",".join(items) + "]}}").encode()

    def _items(self, query: str, t: float, tag: str | None) -> list[str]:
        """One query's series as JSON objects; ``tag``: the value of ``expressions.PART_LABEL`` it adds."""
        kind = self.kind(query)
        matchers = _label_matchers(query)
        if kind in ("adhoc", "rules"):
            wanted = kind == "adhoc" or self.rules
            items = self._aggregate_text(t, named=kind == "rules", matchers=matchers) if wanted else []
        elif kind == "ksm":
            name = _regex(_names_regex(query) or "up")
            ts = json.dumps(t)
            items = [
                f'{{"metric":{_dumps(m)},"value":[{ts},"{_fmt(v)}"]}}'
                for m, v in self.ksm
                if name.fullmatch(m["__name__"]) and _matches(m, matchers)
            ]
        else:
            rows = self._rows(kind, _names_regex(query), matchers)
            ts = json.dumps(t)
            items = [
                f'{{"metric":{m},"value":[{ts},"{_fmt(v)}"]}}'
                for m, v in zip(rows.metrics, self._values(rows, t).tolist(), strict=True)
            ]
        with self._count:
            self.calls[kind] = self.calls.get(kind, 0) + 1
            self.sent[kind] = self.sent.get(kind, 0) + len(items)
            self.log.append((kind, query, len(items)))
        if tag is not None:
            label = f'{{"{ex.PART_LABEL}":{json.dumps(tag)},'
            items = [item.replace('{"metric":{', '{"metric":' + label, 1) for item in items]  # never without labels
        return items

    def metadata(self) -> bytes:
        data = {name: [{"type": kind, "help": "", "unit": ""}] for name, kind in self.types.items()}
        return json.dumps({"status": "success", "data": data}).encode()


_TAGGED = re.compile(rf'label_replace\((.*), "{ex.PART_LABEL}", "(\w+)", "", ""\)', re.S)


def _union_parts(query: str) -> list[tuple[str, str | None]]:
    """The queries of ``expressions.union`` (``(a) or (b) ...``, each part in parentheses; a top-level ``or`` of
    other shapes, as the ad-hoc aggregates' ``label_replace(...) or ...``, is one query), each with its tag."""
    parts: list[str] = []
    depth, start, i, quoted = 0, 0, 0, False
    while i < len(query):
        ch = query[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and query.startswith(" or ", i):
            parts.append(query[start:i])
            start = i + 4
        i += 1
    parts.append(query[start:])
    if len(parts) == 1 or not all(p.startswith("(") and p.endswith(")") for p in parts):
        return [(query, None)]
    out: list[tuple[str, str | None]] = []
    for p in parts:
        tagged = _TAGGED.fullmatch(p[1:-1])
        out.append((tagged.group(1), tagged.group(2)) if tagged else (p[1:-1], None))
    return out


_NAMES = re.compile(r'__name__=~"((?:[^"\\]|\\.)*)"')
_SELECTOR = re.compile(r'\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_BY = ("namespace", "deployment")
Matchers = tuple[tuple[str, str, str], ...]  # (label, op, value), sorted


def _label_matchers(query: str) -> Matchers:
    """Every label matcher but ``__name__``'s in the query's selectors, values unquoted (PromQL string escapes)."""
    found = {
        (label, op, json.loads(f'"{value}"'))
        for body in _SELECTOR.findall(query)
        for label, op, value in _MATCHER.findall(body)
        if label != "__name__"
    }
    return tuple(sorted(found))


def _matches(labels: dict[str, str], matchers: Matchers) -> bool:
    """As Prometheus selects: a missing label is "", regexes match the whole value."""
    for label, op, value in matchers:
        have = labels.get(label, "")
        if op == "=":
            ok = have == value
        elif op == "!=":
            ok = have != value
        else:
            ok = _regex(value).fullmatch(have) is not None
            ok = ok if op == "=~" else not ok
        if not ok:
            return False
    return True


_regex = functools.lru_cache(maxsize=256)(re.compile)


def _names_regex(query: str) -> str | None:
    """The first ``__name__=~"..."`` matcher of a query, unquoted (PromQL string escapes), or None."""
    m = _NAMES.search(query)
    return None if m is None else json.loads(f'"{m.group(1)}"')


def _fmt(v: float) -> str:
    """As Prometheus writes a sample value (strconv.FormatFloat 'f', -1; NaN, +Inf, -Inf)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v) if v != int(v) else str(int(v))


class _Handler(BaseHTTPRequestHandler):
    fleet: FakeFleet
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as Prometheus' Go server has by default: the headers and the body go out in two writes, and with
    # Nagle's algorithm on a kept-alive connection the second waited for the client's delayed ACK, ~40 ms an answer.
    disable_nagle_algorithm = True

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
    # shutdown() waits for serve_forever's next poll: 20 ms rather than the default 0.5 s of every test's teardown
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="promapi", daemon=True).start()
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
