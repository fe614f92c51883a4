"""The one way from a scraped page to canonical samples, shared by the scrape loop, the PromQL source and the CLI.

The parser is told ``WANTED_FAMILIES`` (every family some adapter reads), so the bulk of a page, Python
runtime series, per-request token histograms and the like, is skipped without being built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from collector import validity
from collector.engines import ENGINES, UnknownEngine, detect_engine, require_engine
from collector.exposition import MetricFamily, is_openmetrics, parse
from collector.gpus import GPU_ADAPTERS
from collector.samples import GpuSample, ReplicaSample, TargetInfo

WANTED_FAMILIES: frozenset[str] = frozenset().union(
    *(a.families for a in ENGINES.values()), *(g.families for g in GPU_ADAPTERS.values())
)

GPU_ONLY = "dcgm"  # the engine name that means "this page is only GPUs" (``kvpilot parse --engine dcgm``)


@dataclass(frozen=True, slots=True)
class AdaptedPage:
    engine: str | None
    replicas: list[ReplicaSample] = field(default_factory=list)
    gpus: list[GpuSample] = field(default_factory=list)


def _adapt_gpus(families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float) -> list[GpuSample]:
    out: list[GpuSample] = []
    for adapter in GPU_ADAPTERS.values():
        if adapter.present(families):
            out.extend(map(validity.gpu, adapter.adapt(families, target, timestamp)))
    return out


def adapt_families(
    families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float, engine: str | None = None
) -> AdaptedPage:
    """Adapt parsed families.

    GPU targets (``target.kind == "gpu"`` or ``engine == "dcgm"``) yield GPUs only. Engine targets use
    ``engine``, else ``target.engine``, else detection; they also yield the GPUs the page carries
    (Triton's ``nv_gpu_*``). A page with neither engine nor GPU families raises ``UnknownEngine``,
    as does a page that lacks every family of an engine named explicitly. Impossible values (negative
    counts, KV usage of 3, NaN where a count is meant) come out as None: see ``collector.validity``.
    """
    if target.kind == "gpu" or engine == GPU_ONLY:
        return AdaptedPage(None, [], _adapt_gpus(families, target, timestamp))
    gpus = _adapt_gpus(families, target, timestamp)
    name = engine or target.engine
    if name is None:
        try:
            name = detect_engine(families)
        except UnknownEngine:
            if gpus:
                return AdaptedPage(None, [], gpus)
            raise
    adapter = require_engine(name, families)
    return AdaptedPage(name, [validity.replica(r) for r in adapter.adapt(families, target, timestamp)], gpus)


def adapt_page(
    text: str | bytes,
    target: TargetInfo,
    timestamp: float,
    *,
    content_type: str | None = None,
    engine: str | None = None,
) -> AdaptedPage:
    """Parse a scraped page (only the families adapters read) and adapt it; see ``adapt_families``.

    Raises ``ParseError`` (malformed or non-UTF-8 page, naming the line) or ``UnknownEngine``; both are
    ``ValueError``s, so a caller that only reports can catch that.
    """
    families = parse(text, wanted=WANTED_FAMILIES, openmetrics=is_openmetrics(content_type))
    return adapt_families(families, target, timestamp, engine)


__all__ = ["GPU_ONLY", "WANTED_FAMILIES", "AdaptedPage", "adapt_families", "adapt_page"]
