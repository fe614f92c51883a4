"""Read the fleet from an existing Prometheus (or Thanos, Mimir) instead of scraping it.

One instant query fetches every series of the families the adapters read, plus ``up``; series are
grouped by the scrape target they came from (``job``, ``instance``), rebuilt into the `MetricFamily` /
`Sample` objects the text parser would have produced (types from ``/api/v1/metadata``), and handed to
`collector.adapt.adapt_families`: the same adapters serve both paths, so a PromQL-fed FleetState equals
a scraped one. This is how kvpilot follows fleets far beyond what one process could scrape.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from collector.adapt import WANTED_FAMILIES, adapt_families
from collector.clock import Clock, WallClock
from collector.exposition import MetricFamily, Sample
from collector.health import HealthBook
from collector.samples import TargetInfo
from collector.scrape import CollectResult, ScrapeResult

# Labels Prometheus attaches to every series of a target (not part of the page the target served).
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "node", "container", "service", "endpoint"})
SUFFIXES = ("_bucket", "_sum", "_count", "_total")


class PromQLError(RuntimeError):
    """Prometheus could not be queried; the message says which URL and why."""


def families_selector(wanted: Sequence[str] | frozenset[str] = WANTED_FAMILIES) -> str:
    """``{__name__=~"..."}`` matching every sample name of the wanted families (and ``up``)."""
    bases = sorted({_strip_total(n) for n in wanted})
    alternatives = "|".join(re.escape(b) for b in bases)
    # Prometheus anchors the regex; RE2 has non-capturing groups. `\:` is not valid RE2: unescape ':'.
    return '{__name__=~"(?:' + alternatives.replace("\\:", ":") + ')(?:_total|_bucket|_sum|_count)?|up"}'


def _strip_total(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _split(name: str, wanted: frozenset[str]) -> tuple[str, str]:
    """(family base name, suffix) of a sample name, preferring the longest wanted family."""
    if name in wanted and not name.endswith("_total"):
        return name, ""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in wanted or base + "_total" in wanted:
                return base, suffix
    return name, ""


def rebuild_families(
    series: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, str],
    wanted: frozenset[str] = WANTED_FAMILIES,
) -> dict[str, MetricFamily]:
    """Families as the text parser would build them from the page these series were scraped from.

    ``series`` are Prometheus query results (``metric`` labels incl. ``__name__``, ``value``);
    ``metadata`` maps a metric name to its type. Without metadata the type is inferred from suffixes."""
    grouped: dict[str, list[tuple[str, str, dict[str, str], float]]] = {}
    for s in series:
        labels = dict(s["metric"])
        name = labels.pop("__name__")
        for label in TARGET_LABELS:
            labels.pop(label, None)
        base, suffix = _split(name, wanted)
        grouped.setdefault(base, []).append((name, suffix, labels, float(s["value"][1])))
    families: dict[str, MetricFamily] = {}
    for base, samples in grouped.items():
        kind = metadata.get(base) or metadata.get(base + "_total") or _infer(samples)
        if (kind == "counter" and any(suffix == "_total" for _, suffix, _, _ in samples)) or kind in (
            "histogram",
            "summary",
        ):
            fam_name = base
        else:
            fam_name = samples[0][0] if len({n for n, _, _, _ in samples}) == 1 else base
        fam = families.setdefault(fam_name, MetricFamily(fam_name, kind))
        fam.samples.extend(Sample(name, labels, value) for name, _, labels, value in samples)
    return families


def _infer(samples: Sequence[tuple[str, str, dict[str, str], float]]) -> str:
    suffixes = {suffix for _, suffix, _, _ in samples}
    if "_bucket" in suffixes:
        return "histogram"
    if any("quantile" in labels for _, _, labels, _ in samples):
        return "summary"
    if suffixes == {"_total"}:
        return "counter"
    return "gauge"


def _target(key: tuple[str, str], series: Sequence[Mapping[str, Any]]) -> TargetInfo:
    job, instance = key
    first = series[0]["metric"]
    names = {s["metric"].get("__name__", "") for s in series}
    is_gpu = all(n.startswith("DCGM_") or n == "up" for n in names)
    pod = first.get("pod") or instance
    return TargetInfo(
        # Prometheus does not keep the metrics path, and one instance may serve several jobs' pages:
        # the identity is where the series came from, not a URL to scrape.
        url=f"promql://{job}/{instance}",
        kind="gpu" if is_gpu else "engine",
        namespace=first.get("namespace") or "default",
        deployment=first.get("deployment") or _deployment_from_pod(pod) or job,
        pod=pod,
        node=first.get("node") or first.get("Hostname") or "",
    )


_POD_SUFFIX = re.compile(r"-(?:[a-z0-9]{6,10}-[a-z0-9]{5}|\d+)$")


def _deployment_from_pod(pod: str) -> str:
    """``llama-7d9f8c6b5-x2x9q`` -> ``llama`` (Deployment), ``llama-3`` -> ``llama`` (StatefulSet)."""
    return _POD_SUFFIX.sub("", pod) if _POD_SUFFIX.search(pod) else ""


class PromQLSource:
    """`Collect` over the Prometheus HTTP API: ``collect_once()`` returns the same `CollectResult` a
    round of scraping would. ``targets()`` returns the targets seen in the last round (for the API)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        extra_selector: str = "",
        jobs: Sequence[str] = (),
    ) -> None:
        """``extra_selector``: label matchers added to the query (``namespace="prod"``). ``jobs``: the
        Prometheus jobs that scrape inference targets; when given, their targets with ``up == 0`` are
        reported down. Without it, a target is only known by the series it serves, so a target that
        answers nothing we read (node-exporter, ...) or nothing at all is left out."""
        self.url = url.rstrip("/")
        self.clock: Clock = clock or WallClock()
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_s, trust_env=False)
        self._selector = families_selector()
        if extra_selector:  # e.g. 'namespace="prod"' to restrict a shared Prometheus
            self._selector = self._selector[:-1] + "," + extra_selector + "}"
        self.jobs = frozenset(jobs)
        self.health = HealthBook()
        self._metadata: dict[str, str] = {}
        self._metadata_at: float | None = None
        self.metadata_ttl_s = 300.0  # new engines bring new families: re-read their types now and then
        self._last_targets: list[TargetInfo] = []

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def targets(self) -> list[TargetInfo]:
        return list(self._last_targets)

    async def _get(self, path: str, params: Mapping[str, Any]) -> Any:
        try:
            response = await self._client.get(f"{self.url}{path}", params=params)
        except httpx.HTTPError as e:
            raise PromQLError(f"{self.url}{path}: {type(e).__name__}: {e}") from None
        if response.status_code != 200:
            raise PromQLError(f"{self.url}{path}: HTTP {response.status_code}: {response.text[:300]}")
        body = response.json()
        if body.get("status") != "success":
            raise PromQLError(f"{self.url}{path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    async def _refresh_metadata(self) -> None:
        data = await self._get("/api/v1/metadata", {})
        self._metadata = {name: entries[0]["type"] for name, entries in data.items() if entries}
        self._metadata_at = self.clock.now()

    async def collect_once(self, targets: Sequence[TargetInfo] = ()) -> CollectResult:
        """Query, group by target, adapt. ``targets`` is ignored: Prometheus already knows them."""
        now = self.clock.now()
        t0 = time.perf_counter()
        if self._metadata_at is None or now - self._metadata_at > self.metadata_ttl_s:
            await self._refresh_metadata()
        data = await self._get("/api/v1/query", {"query": self._selector, "time": now})
        by_target: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for series in data["result"]:
            m = series["metric"]
            by_target.setdefault((m.get("job", ""), m.get("instance", "")), []).append(series)
        duration = time.perf_counter() - t0
        results = [
            self._adapt(key, series, now, duration)
            for key, series in sorted(by_target.items())
            if key[0] in self.jobs or (not self.jobs and any(s["metric"].get("__name__") != "up" for s in series))
        ]
        self._last_targets = [r.target for r in results]
        self.health.retain(t.url for t in self._last_targets)
        return CollectResult(timestamp=now, results=tuple(results), health=self.health.snapshot())

    def _adapt(
        self, key: tuple[str, str], series: Sequence[Mapping[str, Any]], now: float, duration: float
    ) -> ScrapeResult:
        target = _target(key, series)
        up = [float(s["value"][1]) for s in series if s["metric"].get("__name__") == "up"]
        if up and up[0] == 0:
            error = "down in Prometheus (up == 0)"
            self.health.record(target.url, ok=False, started_ts=now, duration_s=duration, error=error)
            return ScrapeResult(target=target, ok=False, timestamp=now, duration_s=duration, error=error)
        page = [s for s in series if s["metric"].get("__name__") != "up"]
        try:
            adapted = adapt_families(rebuild_families(page, self._metadata), target, now)
        except ValueError as e:
            error = f"unreadable series: {e}"
            self.health.record(target.url, ok=False, started_ts=now, duration_s=duration, error=error)
            return ScrapeResult(target=target, ok=False, timestamp=now, duration_s=duration, error=error)
        self.health.record(target.url, ok=True, started_ts=now, duration_s=duration)
        return ScrapeResult(
            target=target,
            ok=True,
            timestamp=now,
            duration_s=duration,
            engine=adapted.engine,
            replicas=tuple(adapted.replicas),
            gpus=tuple(adapted.gpus),
        )


def from_settings(settings: Any) -> PromQLSource:
    """Build from ``collector.discovery`` settings (``promql_url``)."""
    url = getattr(settings, "promql_url", None)
    if not url:
        raise ValueError("collector.discovery.promql_url is not set")
    return PromQLSource(url)
