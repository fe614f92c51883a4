"""Read the fleet from an existing Prometheus (or Thanos, Mimir) instead of scraping it.

Two modes (``collector.discovery.promql_mode``):

- ``replicas``: one instant query fetches every series of the families the adapters read, plus ``up``; series
  are grouped by the scrape target they came from (``job``, ``instance``), rebuilt into the `MetricFamily` /
  `Sample` objects the text parser would have produced (types from ``/api/v1/metadata``), and handed to
  `collector.adapt.adapt_families`: the same adapters serve both paths, so a PromQL-fed FleetState equals a
  scraped one. Cost grows with the fleet (every raw series, every tick).
- ``aggregates``: Prometheus computes each deployment's signals (kvpilot's recording rules where installed,
  else the same expressions ad hoc: ``collector.promql.expressions``), and only the replicas and GPUs a
  detector must see are read series by series (NVIDIA GPUs with a DCGM fault, AMD GPUs serving a stuck replica or
  with an uncorrectable ECC error, amd_smi_exporter's GPUs on a stuck replica's node), and the GPUs their exporter
  stopped listing while it answers (``vanished``: listed within ``vanished_lookback_s``, not now, ``up == 1``; a
  re-cut GPU is not one; asked every ``vanished_every_s``), handed as `GoneGpuSample`. Cost grows with the
  deployments and the sick replicas and GPUs.

``collect_owned(owns)`` (a shard's instance, ``kvpilot.runtime.shards.OwnedCollect``) narrows either mode to the
deployments ``owns`` accepts: one small query names every deployment, and every later query of the tick carries
label matchers of those owned, so Prometheus selects, computes and sends only the shard's series.

Answers are asked for gzip-compressed (plain HTTP through kvpilot's own client, ``collector.promql.plain_http``, at a
tenth of httpx's CPU a request; TLS through httpx), read up to a size cap (``collector.timeout_s`` bounds each whole
answer), then decoded with orjson, regrouped and adapted in a reader process (``reader="thread"``: a worker thread),
so the event loop (HTTP API, KEDA's gRPC) keeps answering during a tick; ``abort()`` (SIGTERM) ends the tick's
queries and stops the reader at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import multiprocessing as mp
import pickle
import re
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, Literal
from urllib.parse import urlencode

import httpx
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from collector.adapt import WANTED_FAMILIES
from collector.aggregates import DeploymentAggregate
from collector.clock import CLOCK_OFFSET_ALLOWED_S, CLOCK_OFFSET_SAID_S, Clock, WallClock, allowed_offset
from collector.gpus import amd
from collector.health import HealthBook
from collector.promql import decode, expressions
from collector.promql.copies import CopySwitches
from collector.promql.decode import LAYOUT_ERRORS, PromQLError, Stopped, server_text
from collector.promql.plain_http import ERROR_BODY_BYTES, HttpError, PlainHttpClient, TooLarge
from collector.promql.series import (
    REPLICA_LABELS,
    families_selector,
    gone_gpus,
    names_regex,
    read_answers,
    with_gpus,
)
from collector.samples import TargetInfo
from collector.scrape import CollectResult, ScrapeResult, end_reader
from collector.urls import password_masked

Mode = Literal["replicas", "aggregates"]
MODES: tuple[Mode, ...] = ("replicas", "aggregates")
DEFAULT_MAX_ANSWER_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_REPLICAS = 500
# aggregates mode: a GPU listed within this long and not now, by an exporter still up, is `vanished` (expressions.
# vanished_dcgm); past it, kvpilot checks that GPU's exporter itself while it stays gone (_still_gone). Prometheus
# reads every GPU series' samples over it: 235 ms at 400 GPUs over an hour's (bench/promql_vanished.py), so 15 min.
DEFAULT_VANISHED_LOOKBACK_S = 900.0
# ... and asked for once a minute, not every tick: the last answer's GPUs are handed again in between
DEFAULT_VANISHED_EVERY_S = 60.0
OFFSETS_KEPT = 9  # the server's clock is judged by the median of this many answers' Date headers
# Results of the reader process per pickled piece: at most ~0.3 ms of CPU to unpickle (at 10,000 replicas a round
# is ~120 results, 1.7 KB apiece).
RESULTS_PER_PIECE = 16
# Form values at least this long (the queries, not their `time`) keep their URL-encoding, up to this many.
_KEEP_ENCODED_FROM = 256
_MAX_ENCODED = 64
_FORM_TYPE = "application/x-www-form-urlencoded"
_WARNINGS_KEY = re.compile(rb'"warnings"\s*:\s*\[')  # no series holds it: a quote inside a JSON string is escaped
WARNINGS_TAIL = 16 * 1024  # the bytes at an answer's end searched for its warnings (PromQLSource._say_warnings)
WARNINGS_SAID = 256  # distinct warnings kept as said
_FORM_HEADERS = {"Content-Type": _FORM_TYPE}
_ERROR_TEXT_CHARS = 300  # of a failing answer's body, quoted in its PromQLError
# detectors.thresholds.KvThresholds.project_from_usage; kvpilot.runtime.sources passes the live one
DEFAULT_KV_FROM = 0.40

log = logging.getLogger(__name__)

__all__ = ["PromQLError", "PromQLSource", "Stopped", "from_settings"]


class PromQLSource:
    """`Collect` over the Prometheus HTTP API: ``collect_once()`` returns the same `CollectResult` a round of
    scraping would (in ``aggregates`` mode: the sick replicas only, the deployments in ``last_aggregates``).
    ``targets()`` returns the targets seen in the last round (for the API)."""

    def __init__(
        self,
        url: str,
        *,
        mode: Mode = "replicas",
        timeout_s: float = 10.0,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        rate_window_s: float = 60.0,
        vanished_lookback_s: float = DEFAULT_VANISHED_LOOKBACK_S,
        vanished_every_s: float = DEFAULT_VANISHED_EVERY_S,
        kv_from: float = DEFAULT_KV_FROM,
        max_replicas: int = DEFAULT_MAX_REPLICAS,
        reader: Literal["process", "thread"] = "process",
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        extra_selector: str = "",
        jobs: Sequence[str] = (),
        replica_labels: Sequence[str] = REPLICA_LABELS,
    ) -> None:
        """``extra_selector``: label matchers added to every query (``namespace="prod"``). ``jobs``: the
        Prometheus jobs that scrape inference targets; when given, their targets with ``up == 0`` are
        reported down. Without it, a target is known by the series it serves or by a ``deployment`` label on its
        ``up``, so one that answers nothing we read (node-exporter, ...) is left out, and an inference target down
        since before it was read (``up == 0``, a ``deployment`` label) is reported down and counted as a replica not
        ready, in ``replicas`` mode as in ``aggregates`` mode, where it is counted from ``count(up)``."""
        if mode not in MODES:
            raise ValueError(f"promql_mode must be one of {', '.join(MODES)}, got {mode!r}")
        for name, value in (
            ("timeout_s", timeout_s),
            ("rate_window_s", rate_window_s),
            ("vanished_lookback_s", vanished_lookback_s),
            ("vanished_every_s", vanished_every_s),
        ):
            if not 0 < value < math.inf:
                raise ValueError(f"PromQL source: {name} must be > 0 and finite, got {value}")
        if not vanished_lookback_s > vanished_every_s:
            raise ValueError(
                f"PromQL source: vanished_lookback_s ({vanished_lookback_s}) must be greater than vanished_every_s "
                f"({vanished_every_s})"
            )
        if max_answer_bytes < 1024 or max_replicas < 1:
            raise ValueError("PromQL source: max_answer_bytes must be >= 1024 and max_replicas >= 1")
        self.url = url.rstrip("/")
        # what messages name: the URL's user:password@ is sent as Basic auth, never written (`password_masked`)
        self.shown = password_masked(self.url)
        self.mode: Mode = mode
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes
        self.window = f"{max(1, round(rate_window_s))}s"
        self.lookback = f"{max(1, round(vanished_lookback_s))}s"
        self.vanished_every_s = vanished_every_s
        self._vanished_at: float | None = None  # when the vanished GPUs were last asked for
        self._gone: list[ScrapeResult] = []  # what that answer read: each exporter's GoneGpuSamples
        self.kv_from = kv_from
        self.max_replicas = max_replicas
        self.clock: Clock = clock or WallClock()
        self._own_client = client is None
        # Prometheus gzips its answer when asked (5-10x fewer bytes on the wire); httpx inflates it.
        self._client = client or httpx.AsyncClient(
            timeout=timeout_s, trust_env=False, headers={"Accept-Encoding": "gzip"}
        )
        # Plain-HTTP URLs are read through kvpilot's own lean client (a tenth of httpx's CPU per request), unless a
        # client is given (tests, a caller's own transport); TLS stays with httpx.
        self._plain = PlainHttpClient() if client is None else None
        self.extra_selector = extra_selector
        self._selector = _with(families_selector(), extra_selector)  # e.g. 'namespace="prod"': a shared Prometheus
        self.jobs = frozenset(jobs)
        self.replica_labels = tuple(replica_labels)  # copies of one series differ only in these: one is read
        self._copies = CopySwitches()  # a target's copy kept while it answers, its counters even across a switch
        self.health = HealthBook()
        # the server's clock less ours, from each answer's Date header (whole seconds): the newest few
        self._offsets: deque[float] = deque(maxlen=OFFSETS_KEPT)
        self.asked_offset_s = 0.0  # what a query adds to the time it is asked at: the server's offset as allowed for
        self._offset_said = False
        self._metadata: dict[str, str] = {}
        self._metadata_at: float | None = None  # on the clock's monotonic reading, as the rules' last check
        self.metadata_ttl_s = 300.0  # new engines bring new families: re-read their types now and then
        self._last_targets: list[TargetInfo] = []
        # aggregates mode: the deployments of the last round that answered (kept through failed rounds with their
        # timestamps, so that FleetState ages them as it ages replicas that stopped answering)
        self.last_aggregates: list[DeploymentAggregate] = []
        # Whether kvpilot's recording rules answer (None: not asked yet); re-asked every metadata_ttl_s when not.
        self.rules_in_use: bool | None = None
        self._rules_checked_at: float | None = None
        self.last_answer_bytes = 0  # inflated bytes of the latest tick's answers (its peak memory's main term)
        self._stop = threading.Event()
        self._in_flight: set[asyncio.Task[Any]] = set()
        self.reader = reader
        self._reader: concurrent.futures.ProcessPoolExecutor | None = None  # started with the first round
        self.results_per_piece = RESULTS_PER_PIECE
        self.max_matcher_bytes = expressions.MAX_MATCHER_BYTES
        # narrowed rounds (collect_owned): how many deployments the latest one's queries were narrowed to
        self.deployments_read: int | None = None
        self._encoded: dict[tuple[str, str], str] = {}  # (form field, value) -> its URL-encoding (_form_body)
        self._warned: set[str] = set()  # the answers' warnings said (_say_warnings), each once

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()
        if self._plain is not None:
            await self._plain.aclose()
        self._stop_reader()

    def _stop_reader(self, *, kill: bool = False) -> None:
        """``kill``: end the reader process now, with the round it is reading (``shutdown`` alone lets that round
        run to its end, seconds at thousands of replicas, and the interpreter waits for it at exit)."""
        reader, self._reader = self._reader, None
        end_reader(reader, kill=kill)

    def abort(self) -> None:
        """Stop now (SIGTERM): queries in flight are cancelled, the reader process is ended with the round it was
        reading (with ``reader="thread"``, reading ends at its next target), and every later ``collect_once`` raises
        ``Stopped`` at once."""
        self._stop.set()
        for task in list(self._in_flight):
            task.cancel()
        self._stop_reader(kill=True)

    async def targets(self) -> list[TargetInfo]:
        return list(self._last_targets)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Export on kvpilot's /metrics what this source reads with (``kvpilot_promql_*``)."""
        registry.register(_SourceMetrics(self))

    async def _read(self, path: str, form: Mapping[str, Any] | None) -> bytes:
        """The answer's body (inflated), refused past ``max_answer_bytes``; GET without a form, else POST (a
        long ad-hoc query would not fit in a URL)."""
        where, shown = f"{self.url}{path}", f"{self.shown}{path}"
        if self._plain is not None and self._plain.serves(where):
            return await self._read_plain(self._plain, where, shown, form)
        chunks: list[bytes] = []
        size = 0
        if form is None:
            request = self._client.build_request("GET", where)
        else:
            request = self._client.build_request("POST", where, content=self._form_body(form), headers=_FORM_HEADERS)
        try:
            response = await self._client.send(request, stream=True)
            try:
                self._note_date(response.headers.get("date"))
                if response.status_code != 200:
                    raise PromQLError(f"{shown}: HTTP {response.status_code}: {await _error_start(response)}")
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self.max_answer_bytes:
                        raise self._too_large(shown)
                    chunks.append(chunk)
            finally:
                await response.aclose()
        except httpx.HTTPError as e:
            raise PromQLError(f"{shown}: {type(e).__name__}: {server_text(e)}") from None
        self.last_answer_bytes += size
        return b"".join(chunks)

    async def _read_plain(
        self, client: PlainHttpClient, where: str, shown: str, form: Mapping[str, Any] | None
    ) -> bytes:
        """``_read`` through the lean client: the same requests, answers, cap and errors."""
        try:
            if form is None:
                answer = await client.request("GET", where, max_bytes=self.max_answer_bytes)
            else:
                body = self._form_body(form)
                answer = await client.request(
                    "POST", where, body=body, content_type=_FORM_TYPE, max_bytes=self.max_answer_bytes
                )
        except TooLarge:
            raise self._too_large(shown) from None
        except HttpError as e:
            raise PromQLError(f"{shown}: {server_text(e)}") from None
        self._note_date(answer.date)
        if answer.status != 200:
            raise PromQLError(f"{shown}: HTTP {answer.status}: {_quoted_error(answer.body)}")
        self.last_answer_bytes += len(answer.body)
        return answer.body

    def _note_date(self, date: str | None) -> None:
        """An answer's Date header (RFC 9110: the server's clock when it answered, in whole seconds) against this
        host's wall clock, not the injected one: a Date is a wall-clock reading, and a virtual clock (a test's, a
        replay's) no reading of this host's, so a server whose clock agrees with the host's is asked at the clock's
        time, whatever time that clock keeps."""
        if not date:
            return
        try:
            at = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        if math.isfinite(at):
            # the header's second was cut, not rounded: half a second later on average
            self._offsets.append(at + 0.5 - time.time())

    @property
    def server_clock_offset_s(self) -> float | None:
        """How far the server's clock reads ahead of ours (negative: behind), the median of its last answers' Date
        headers (to within a second, and the answers' time in flight); None before any answer carried one."""
        return statistics.median(self._offsets) if self._offsets else None

    def _ask_on_server_clock(self) -> None:
        """Every query asked at its time on the server's clock (``collector.clock.allowed_offset``), a tick's, the
        kube-state-metrics reader's and the gateway arrivals' alike: Prometheus answers an instant query with the
        samples of its lookback (5 minutes) before the time asked, so asked at our time a server an hour behind
        answered no series at all, and one an hour ahead hour-old samples."""
        self.asked_offset_s = allowed_offset(self.server_clock_offset_s)
        if abs(self.asked_offset_s) >= CLOCK_OFFSET_SAID_S and not self._offset_said:
            self._offset_said = True
            log.warning(
                "PromQL source: %s: its clock reads %.0f s %s kvpilot's (its answers' Date header); asked at the time "
                "on its clock. Check NTP on both hosts",
                self.shown,
                abs(self.asked_offset_s),
                "ahead of" if self.asked_offset_s > 0 else "behind",
            )

    async def _instant(self, query: str, now: float) -> bytes:
        """The answer to ``query`` at ``now`` (our clock), asked at that time on the server's clock. Where the answer's
        own Date shows that clock off from the one it was asked on by ``CLOCK_OFFSET_ALLOWED_S`` or more (the first
        answers, asked before any gave the server's clock; a server whose clock stepped), it is asked again, once,
        at the time on the clock now known: before, a Prometheus an hour behind answered the first tick an empty fleet
        and the first kube-state-metrics and gateway reads nothing, and the kube-state-metrics reads every tick."""
        asked = self.asked_offset_s
        body = await self._body("/api/v1/query", {"query": query, "time": now + asked})
        if abs(allowed_offset(self.server_clock_offset_s) - asked) >= CLOCK_OFFSET_ALLOWED_S:
            self._ask_on_server_clock()
            body = await self._body("/api/v1/query", {"query": query, "time": now + self.asked_offset_s})
        return body

    def _too_large(self, where: str) -> PromQLError:
        return PromQLError(
            f"{where}: answer larger than max_answer_bytes ({self.max_answer_bytes} bytes): "
            "narrow the query (promql_mode: aggregates, extra selector) or raise the cap"
        )

    def _form_body(self, form: Mapping[str, Any]) -> bytes:
        """``form`` URL-encoded as httpx would, each long value's encoding kept (``_encoded``): a tick asks the same
        queries as the last (only ``time`` moves), and quoting 10-15 KB of PromQL character by character cost the
        event loop ~1-1.6 ms of CPU per query, in every shard's instance as in one unsharded."""
        parts = []
        for name, value in form.items():
            text = _form_value(value)
            pair = self._encoded.get((name, text))
            if pair is None:
                pair = urlencode({name: text})
                if len(text) >= _KEEP_ENCODED_FROM:
                    if len(self._encoded) >= _MAX_ENCODED:  # the queries changed (shards moved): start over
                        self._encoded.clear()
                    self._encoded[(name, text)] = pair
            parts.append(pair)
        return "&".join(parts).encode("ascii")

    async def _body(self, path: str, form: Mapping[str, Any] | None = None) -> bytes:
        """The answer's bytes, cancelled by ``abort()``."""
        if self._stop.is_set():
            raise Stopped(f"{self.shown}: stopping, no query sent")
        # httpx's timeout bounds each read, not the answer: collector.timeout_s bounds the whole query.
        task = asyncio.ensure_future(asyncio.wait_for(self._read(path, form), self.timeout_s))
        self._in_flight.add(task)
        try:
            body = await task
        except asyncio.CancelledError:
            if self._stop.is_set():
                raise Stopped(f"{self.shown}{path}: stopping, query abandoned") from None
            raise
        except TimeoutError:
            raise PromQLError(
                f"{self.shown}{path}: no complete answer within collector.timeout_s ({self.timeout_s} s)"
            ) from None
        finally:
            self._in_flight.discard(task)
        self._say_warnings(path, form, body)
        return body

    def _say_warnings(self, path: str, form: Mapping[str, Any] | None, body: bytes) -> None:
        """Each warning an answer carries, said once (``WARNINGS_SAID`` at most, then again from none). A Thanos
        Querier with a store down answers success with the other stores' series and a warning, as does one with a
        Prometheus of an HA pair restarting, whose other copy is whole; kvpilot cannot tell them apart and reads the
        series as they came, but before this it said nothing: a part of the fleet missing looked like the fleet.
        Prometheus writes ``warnings`` after ``data``: only the answer's tail is searched (``WARNINGS_TAIL``, a warnings
        list longer than that is not said): 7-8 us of the event loop an answer, where the whole of a 2 MB answer took
        0.2 ms."""
        start = max(0, len(body) - WARNINGS_TAIL)
        if body.find(b'"warnings"', start) < 0:
            return
        found = [*_WARNINGS_KEY.finditer(body, start)]  # the last: warnings come after the data
        if not found:
            return
        try:
            warnings, _ = json.JSONDecoder().raw_decode(body[found[-1].end() - 1 :].decode("utf-8", "replace"))
        except ValueError:
            return
        query = form.get("query") if form is not None else None
        where = f"{self.shown}{path}" + (f" query {str(query)[:80]!r}" if query is not None else "")
        for warning in warnings if isinstance(warnings, list) else ():
            text = server_text(warning, 300)
            if text in self._warned:
                continue
            if len(self._warned) >= WARNINGS_SAID:
                self._warned.clear()
            self._warned.add(text)
            log.warning(
                "%s: the answer carries a warning; its series are read as they came, and a part of them may be "
                "missing (a store behind a query layer that did not answer): %s",
                where,
                text,
            )

    async def _data(self, path: str, form: Mapping[str, Any] | None = None) -> Any:
        """Read, and decode in a worker thread."""
        return await asyncio.to_thread(decode.answer, await self._body(path, form), f"{self.shown}{path}")

    async def _vector(self, query: str, now: float) -> list[decode.Series]:
        """``now``: the tick's time on our clock, asked at on the server's (``_instant``)."""
        where = f"{self.shown}/api/v1/query"
        data = await asyncio.to_thread(decode.answer, await self._instant(query, now), where)
        return decode.vector(data, f"{self.shown} query {query[:80]!r}", check_series=True)

    async def query_vector(self, query: str, now: float) -> list[decode.Series]:
        """One instant query's series, asked at ``now`` (our clock) on the server's clock as a tick's queries are,
        through this source's client, timeout and size cap (other readers of the same Prometheus:
        ``kvpilot.runtime.scale_ksm.KubeStateMetricsScale``, ``kvpilot.runtime.arrivals.GatewayArrivals``);
        PromQLError when it fails."""
        self._ask_on_server_clock()
        return await self._vector(query, now)

    async def _refresh_metadata(self) -> None:
        data = await self._data("/api/v1/metadata")
        try:
            self._metadata = {name: entries[0]["type"] for name, entries in data.items() if entries}
        except LAYOUT_ERRORS as e:
            raise _unreadable(f"{self.shown}/api/v1/metadata", e) from e
        self._metadata_at = self.clock.monotonic()

    async def collect_once(self, targets: Sequence[TargetInfo] = ()) -> CollectResult:
        """Query, group by target, adapt. ``targets`` is ignored: Prometheus already knows them."""
        return await self._collect(None)

    async def collect_owned(self, owns: Callable[[str], bool], targets: Sequence[TargetInfo] = ()) -> CollectResult:
        """``collect_once`` narrowed to the deployments ``owns`` accepts (``"namespace/name"``): a first query names
        every deployment (one small series each), and every later query of the tick carries matchers of those owned
        (split over several queries past ``max_matcher_bytes``; each sent as a POST form). What carries no
        deployment label is read as before, for the caller to cut: GPU series (only the faulty ones in
        ``aggregates`` mode), and in ``replicas`` mode the targets whose deployment comes from their pod's name.
        A deployment first seen after the naming query is read from the next tick."""
        return await self._collect(owns)

    async def _collect(self, owns: Callable[[str], bool] | None) -> CollectResult:
        self.last_answer_bytes = 0
        now = self.clock.now()
        self._ask_on_server_clock()
        # re-reads due on the monotonic clock: on wall time a step back of the clock put them off by the step
        read_at = self.clock.monotonic()
        stale = self._metadata_at is None or read_at - self._metadata_at > self.metadata_ttl_s
        scopes: list[str] | None = None
        if owns is not None:
            if stale:
                known, _ = await asyncio.gather(self._known_deployments(now), self._refresh_metadata())
            else:
                known = await self._known_deployments(now)
            mine = [(ns, d) for ns, d in known if owns(f"{ns or 'default'}/{d}")]
            scopes = [self._with_extra(m) for m in expressions.deployment_matchers(mine, self.max_matcher_bytes)]
            self.deployments_read = len(mine)
        elif stale:
            await self._refresh_metadata()
        if self.mode == "aggregates":
            return await self._collect_aggregates(now, scopes)
        t0 = time.perf_counter()
        if scopes is None:
            selectors = [self._selector]
        else:  # targets without a deployment label (GPUs, deployments named by their pods) cannot be narrowed
            selectors = [_with(families_selector(), extra) for extra in [*scopes, self._with_extra('deployment=""')]]
        bodies = await asyncio.gather(*(self._query_body(q, now) for q in selectors))
        results = await self._in_reader(self._reading(bodies, None, now, t0))
        return self._collected(results, now)

    def _reading(
        self, answers: Sequence[tuple[str, bytes]], down: Sequence[tuple[str, bytes]] | None, now: float, t0: float
    ) -> Callable[..., list[ScrapeResult]]:
        """``read_answers`` of these answers, for ``_in_reader``: each target read from the copy it was last read from
        while that is as complete (``CopySwitches``)."""
        prefer = self._copies.prefer()
        return partial(
            read_answers,
            answers,
            down,
            self._metadata,
            now,
            self.jobs,
            t0,
            replica_labels=self.replica_labels,
            prefer=prefer,
        )

    def _with_extra(self, matchers: str) -> str:
        return f"{self.extra_selector},{matchers}" if self.extra_selector else matchers

    async def _known_deployments(self, now: float) -> list[tuple[str, str]]:
        """``(namespace, deployment)`` of every inference target (namespace "" where it has none)."""
        series = await self._vector(expressions.known_deployments(self.extra_selector), now)
        names = {(s["metric"].get("namespace", ""), s["metric"].get(expressions.DEPLOYMENT_LABEL, "")) for s in series}
        return sorted(names)

    async def _query_body(self, query: str, now: float) -> tuple[str, bytes]:
        where = f"{self.shown} query {query[:80]!r}"
        return where, await self._instant(query, now)

    async def _in_reader(self, job: Callable[..., list[ScrapeResult]]) -> list[ScrapeResult]:
        """Decode, regroup and adapt the answers off the event loop: in the reader process (the GIL stays with the
        loop, as for direct scraping's large pages, issue 11) or, with ``reader="thread"``, a worker thread. ``job``
        takes ``stop`` (``read_answers``): a thread's reading checks it; a process's is ended by ``abort()``."""
        if self.reader == "thread":
            try:
                return await asyncio.to_thread(partial(job, stop=self._stop))
            except LAYOUT_ERRORS as e:
                raise _unreadable(f"{self.shown} query answers", e) from e
        if self._stop.is_set():
            raise Stopped(f"{self.shown}: stopping, no answer read")
        if self._reader is None:
            # spawn, not fork: the parent runs threads (the event loop's executors, the store writer)
            self._reader = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
        try:
            pieces = await asyncio.get_running_loop().run_in_executor(
                self._reader, partial(_pickled_in_pieces, job, self.results_per_piece)
            )
        except concurrent.futures.BrokenExecutor:
            if self._stop.is_set():
                raise Stopped(f"{self.shown}: stopping, the reader's round abandoned") from None
            self._reader = None  # killed, out of memory: the next round starts another
            raise PromQLError(f"{self.shown}: the answer reader process died while reading this round") from None
        except LAYOUT_ERRORS as e:
            raise _unreadable(f"{self.shown} query answers", e) from e
        return await asyncio.to_thread(_unpickled, pieces)

    def _collected(self, results: Sequence[ScrapeResult], now: float) -> CollectResult:
        results = self._copies.apply(results, now)
        for r in results:
            self.health.record(r.target.url, ok=r.ok, started_ts=now, duration_s=r.duration_s, error=r.error)
        self._last_targets = [r.target for r in results]
        self.health.retain(t.url for t in self._last_targets)
        return CollectResult(timestamp=now, results=tuple(results), health=self.health.snapshot())

    async def _collect_aggregates(self, now: float, scopes: list[str] | None) -> CollectResult:
        """``scopes``: the matchers of a narrowed round (the queries of each asked apart), else None."""
        t0 = time.perf_counter()
        extras = [self.extra_selector] if scopes is None else scopes
        engines = names_regex(WANTED_FAMILIES - _gpu_families())
        limit = max(1, self.max_replicas // max(1, len(extras)))
        # GPU series carry no deployment label: the selected ones are read whole, for the caller to cut by node
        dcgm, dme = names_regex(_dcgm_families()), names_regex(amd.DME_FAMILIES)
        ask_gone = self._vanished_at is None or now - self._vanished_at >= self.vanished_every_s
        gpus = [
            expressions.gpu_series(dcgm, self.extra_selector),
            expressions.amd_gpu_series(dme, self.window, self.extra_selector, limit=self.max_replicas),
            expressions.smi_gpu_series(
                names_regex(amd.SMI_FAMILIES), self.window, self.extra_selector, limit=self.max_replicas
            ),
            # GPUs that left an exporter still up (`vanished`), every vanished_every_s: tagged, read as GoneGpuSample
            *(
                expressions.tagged(gone, expressions.VANISHED_PART)
                for gone in (
                    expressions.vanished_dcgm(dcgm, self.lookback, self.extra_selector),
                    expressions.vanished_amd(dme, self.lookback, self.extra_selector),
                    expressions.vanished_smi(self.lookback, self.extra_selector),
                )
                if ask_gone
            ),
        ]
        # One request per scope: its sick replicas' series, its down targets' `up` (tagged: a down target's `up` could
        # otherwise share its label set with a series of the same target) and, in the first, the selected GPUs'
        # (other exporters' targets, so no label set in common).
        queries = [
            expressions.union(
                expressions.replica_series(engines, self.window, e, kv_from=self.kv_from, limit=limit),
                *(gpus if n == 0 else []),
                expressions.tagged(expressions.down_targets(e), "down"),
            )
            for n, e in enumerate(extras)
        ] or [expressions.union(*gpus)]
        deployments_task = asyncio.ensure_future(self._deployments(now, extras))
        try:
            answers = await asyncio.gather(*(self._query_body(q, now) for q in queries))
            deployments = await deployments_task
        finally:
            deployments_task.cancel()
        results = await self._in_reader(self._reading(answers, (), now, t0))
        if ask_gone:
            fresh = gone_gpus(results)
            carried = await self._still_gone(self._gone, fresh, now)
            self._gone, self._vanished_at = [*fresh, *carried], now
            results = with_gpus(results, carried)
        else:  # not asked this tick: the last answer's
            results = with_gpus(results, self._gone)
        result = _Selected.of(self._collected(results, now))
        unreadable: list[decode.Series] = []
        self.last_aggregates = await asyncio.to_thread(
            partial(decode.aggregates, deployments, now, self._stop, unreadable=unreadable)
        )
        if unreadable:
            self._say_unreadable(unreadable)
        return result

    def _say_unreadable(self, unreadable: Sequence[decode.Series]) -> None:
        """Deployment series whose value or ``le`` is no number (or a value below 0), left out: said once per first
        such series' labels (kept with the answers' warnings, ``WARNINGS_SAID`` at most), with how many there were."""
        first = unreadable[0]
        labels = server_text(first.get("metric"), 300)
        if labels in self._warned:
            return
        if len(self._warned) >= WARNINGS_SAID:
            self._warned.clear()
        self._warned.add(labels)
        log.warning(
            "%s: %d deployment series left out: a value or bucket bound (le) that is no number, or a count or rate "
            "below 0, e.g. %s at %s; the other series of their deployments are read",
            self.shown,
            len(unreadable),
            labels,
            server_text(first.get("value"), 100),
        )

    async def _still_gone(
        self, before: Sequence[ScrapeResult], fresh: Sequence[ScrapeResult], now: float
    ) -> list[ScrapeResult]:
        """The GPUs of ``before`` (the last answer's gone GPUs) that ``fresh`` no longer names, past the lookback, and
        that are still gone: their exporter answers (``up == 1``) and does not list them. One query reads those
        exporters' GPU series and ``up`` now (a few exporters: a small answer). A GPU stays `vanished` for as long as
        it is gone, as a scraped one, not only for the lookback. Where the check fails (its query, or an answer not
        laid out as the API's), they are kept and the round goes on (it was the whole tick's samples): a GPU seen gone
        stays `vanished`, a critical finding, until an answer shows it back or its exporter down: dropping it would
        close the finding on no evidence, to open it again at the next check that answers (a critical
        finding flapping once a minute for as long as the check fails)."""
        named = {g.key for r in fresh for g in r.gpus}
        left = [(r.target, tuple(g for g in r.gpus if g.key not in named)) for r in before]
        left = [(target, gpus) for target, gpus in left if gpus]
        if not left:
            return []
        targets = [target.url.removeprefix("promql://").rsplit("/", 1) for target, _ in left]
        exporters = (
            f"job=~{expressions.any_of(t[0] for t in targets)},instance=~{expressions.any_of(t[-1] for t in targets)}"
        )
        try:
            answer = await self._query_body(_with(families_selector(_gpu_families()), exporters), now)
            read = await asyncio.to_thread(
                partial(read_answers, replica_labels=self.replica_labels),
                [answer],
                (),
                self._metadata,
                now,
                frozenset(),
                time.perf_counter(),
            )
        except Stopped:
            raise
        except (PromQLError, *LAYOUT_ERRORS) as e:
            log.warning(
                "PromQL source: %s: the check of %d GPU(s) gone past the lookback failed, kept vanished: %s: %s",
                self.shown,
                sum(len(gpus) for _, gpus in left),
                type(e).__name__,
                server_text(e, 300),
            )
            return [ScrapeResult(target=t, ok=True, timestamp=now, duration_s=0.0, gpus=gpus) for t, gpus in left]
        up = {r.target.url for r in read if r.ok}
        listed = {g.key for r in read for g in r.gpus}
        kept = [(target, tuple(g for g in gpus if g.key not in listed)) for target, gpus in left if target.url in up]
        return [ScrapeResult(target=t, ok=True, timestamp=now, duration_s=0.0, gpus=gpus) for t, gpus in kept if gpus]

    async def _deployments(self, now: float, extras: Sequence[str]) -> list[decode.Series]:
        """The deployments' series: recorded where kvpilot's rules answer, else the same expressions ad hoc."""
        if not extras:  # a narrowed round that owns no deployment
            return []
        read_at = self.clock.monotonic()
        recheck = self._rules_checked_at is None or read_at - self._rules_checked_at > self.metadata_ttl_s
        if self.rules_in_use or recheck:
            series = await self._vectors([expressions.rules_query(e) for e in extras], now)
            found = bool(series)
            if found != self.rules_in_use:
                log.info(
                    "PromQL source: %s",
                    "kvpilot's recording rules answer: reading the recorded deployment series"
                    if found
                    else "kvpilot's recording rules are not installed (no deployment:kvpilot_* series): "
                    "computing the same expressions ad hoc each tick (deploy/base/prometheusrule-recording.yaml)",
                )
            self.rules_in_use, self._rules_checked_at = found, read_at
            if found:
                return series
        return await self._vectors([expressions.adhoc_query(self.window, e) for e in extras], now)

    async def _vectors(self, queries: Sequence[str], now: float) -> list[decode.Series]:
        answers = await asyncio.gather(*(self._vector(q, now) for q in queries))
        return [s for answer in answers for s in answer]


def _unreadable(where: str, e: Exception) -> PromQLError:
    return PromQLError(f"{where}: not laid out as the Prometheus API's ({type(e).__name__}: {server_text(e, 120)})")


async def _error_start(response: httpx.Response) -> str:
    """A failing answer's body quoted (``_quoted_error``), read no further than ``ERROR_BODY_BYTES`` (was read
    whole: a 1 GB error page, or one that inflates to it, was held in memory to quote 300 bytes of it)."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= ERROR_BODY_BYTES:
            break
    return _quoted_error(body[:ERROR_BODY_BYTES])


def _quoted_error(body: bytes) -> str:
    """The start of a failing answer's body (at most ``ERROR_BODY_BYTES``, as both clients read it) for the error
    message: its first ``_ERROR_TEXT_CHARS`` characters, escaped (``decode.server_text``)."""
    whole = len(body) < ERROR_BODY_BYTES
    return server_text(body.decode(errors="replace"), _ERROR_TEXT_CHARS, whole=whole)


def _pickled_in_pieces(job: Callable[[], list[ScrapeResult]], per_piece: int) -> list[bytes]:
    """In the reader process: the job's results pickled ``per_piece`` at a time. The process pool's own pickling
    of a whole round (200 KB at 10,000 replicas) was one ``pickle.loads`` in the main process that held the GIL,
    and with it the event loop, for 4-9 ms of CPU; a list of bytes unpickles in microseconds, and the pieces
    (``_unpickled``, in a worker thread) let the loop in between."""
    results = job()
    return [
        pickle.dumps(results[i : i + per_piece], pickle.HIGHEST_PROTOCOL) for i in range(0, len(results), per_piece)
    ]


def _unpickled(pieces: Sequence[bytes]) -> list[ScrapeResult]:
    results: list[ScrapeResult] = []
    for piece in pieces:  # from our own reader process, never from the network
        results.extend(pickle.loads(piece))
    return results


def _form_value(value: Any) -> str:
    """A form value as httpx writes it (``true``, ``false``, ``""`` for None)."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value).lower()
    return value if isinstance(value, str) else str(value)


def _with(selector: str, matchers: str) -> str:
    """``{...}`` with ``matchers`` added."""
    return selector[:-1] + "," + matchers + "}" if matchers else selector


class _SourceMetrics(Collector):
    def __init__(self, source: PromQLSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        mode = GaugeMetricFamily(
            "kvpilot_promql_aggregates",
            "1 when kvpilot reads deployments as Prometheus aggregated them (promql_mode: aggregates), else 0.",
            value=float(self.source.mode == "aggregates"),
        )
        yield mode
        if self.source.rules_in_use is not None:
            yield GaugeMetricFamily(
                "kvpilot_promql_recording_rules_in_use",
                "1 when kvpilot's recording rules answer (deployment:kvpilot_* series), 0 when it computes the same "
                "expressions ad hoc each tick.",
                value=float(self.source.rules_in_use),
            )
        if self.source.deployments_read is not None:
            yield GaugeMetricFamily(
                "kvpilot_promql_deployments_read",
                "Deployments the latest tick's queries were narrowed to (this instance's shards' deployments).",
                value=float(self.source.deployments_read),
            )
        yield GaugeMetricFamily(
            "kvpilot_promql_answer_bytes",
            "Bytes (inflated) of the PromQL answers of the latest tick.",
            value=float(self.source.last_answer_bytes),
        )
        yield GaugeMetricFamily(
            "kvpilot_promql_clock_offset_seconds",
            "How far the Prometheus API's clock (its answers' Date header) reads ahead of kvpilot's, as its queries "
            "are asked at; 0 within 2 s or when not known.",
            value=float(self.source.asked_offset_s),
        )


class _Selected(CollectResult):
    """An aggregates round: its GPUs are those a server-side selection chose, so a GPU missing from it has not left
    its exporter (it is healthy, or its replica is no longer stuck): no node counts as answered, and no GPU is made
    ``vanished`` by the selection moving on (a GPU of a node whose other GPU stays selected would be). A GPU no
    longer selected keeps its last sample until ``FleetState`` forgets it. A GPU that did leave its exporter comes
    as a `GoneGpuSample` (``expressions.vanished_dcgm``), which ``FleetState`` tracks absent."""

    @classmethod
    def of(cls, result: CollectResult) -> _Selected:
        return cls(timestamp=result.timestamp, results=result.results, health=result.health)

    @property
    def gpu_nodes_scraped(self) -> frozenset[str]:
        return frozenset()


def _gpu_families() -> frozenset[str]:
    """GPU exporters' own families: read by the GPU selections, kept out of the replicas' (AMD's
    device-metrics-exporter labels a GPU with the pod using it, as dcgm-exporter does: its series must not join that
    replica's)."""
    return _dcgm_families() | amd.DME_FAMILIES | amd.SMI_FAMILIES


def _dcgm_families() -> frozenset[str]:
    return frozenset(n for n in WANTED_FAMILIES if n.startswith("DCGM_"))


def from_settings(settings: Any, collector: Any = None, *, kv_from: float = DEFAULT_KV_FROM) -> PromQLSource:
    """Build from ``collector.discovery`` settings (``promql_url``, ``promql_mode``, ...) and, where given, the
    ``collector`` section (its ``timeout_s`` bounds every query, its ``rate_window_s`` is the rate window)."""
    url = getattr(settings, "promql_url", None)
    if not url:
        raise ValueError("collector.discovery.promql_url is not set")
    return PromQLSource(
        url,
        mode=getattr(settings, "promql_mode", "replicas"),
        timeout_s=getattr(collector, "timeout_s", 10.0),
        rate_window_s=getattr(collector, "rate_window_s", 60.0),
        max_answer_bytes=getattr(settings, "promql_max_answer_bytes", DEFAULT_MAX_ANSWER_BYTES),
        max_replicas=getattr(settings, "promql_max_replicas", DEFAULT_MAX_REPLICAS),
        extra_selector=getattr(settings, "promql_selector", ""),
        vanished_lookback_s=getattr(settings, "promql_vanished_lookback_s", DEFAULT_VANISHED_LOOKBACK_S),
        vanished_every_s=getattr(settings, "promql_vanished_every_s", DEFAULT_VANISHED_EVERY_S),
        replica_labels=getattr(settings, "promql_replica_labels", REPLICA_LABELS),
        kv_from=kv_from,
    )
