"""The one way from a scraped page to canonical samples, shared by the scrape loop, the PromQL source and the CLI.

The parser is told ``WANTED_FAMILIES`` (every family some adapter reads), so the bulk of a page, Python
runtime series, per-request token histograms and the like, is skipped without being built.

A page whose engine names carry a stack's prefix (Ray Serve LLM's ``ray_vllm:``, or ``ray_vllm_`` where Ray
sanitised the name) is read with the prefix removed: the target's ``prefix`` when configured, else the one found
on the page the first time no adapter matched (then remembered per target URL, so later scrapes parse once). A
vLLM-compatible server writing vLLM's names under its own namespace (``lmdeploy:``, ``fastdeploy:``, ``aphrodite:``)
is read the same way, its namespace standing for vLLM's; ``AdaptedPage.prefix`` says what was removed.

A target's page laid out as its previous one (the usual case: only values move) is read without parsing it,
from the layout learnt off that page (``collector.exposition.LayoutCache``).

A text page with a sample line no parser can read (dcgm-exporter's ``ERROR - FAILED TO CONVERT TO STRING`` as a value)
is read without that line's family rather than not at all (``parse(..., drop_bad_lines=True)``); the page says so in
``AdaptedPage.parse_errors``, which the scrape loop counts and shows per target. While the exporter keeps writing it,
the target's next pages cost what its clean page costs: read off the layout learnt from the page read around (the bad
lines pinned word for word), or, off it, with the names set aside last time tried first (``LayoutCache``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial

from collector import validity
from collector.engines import (
    ENGINE_FAMILIES,
    ENGINES,
    IDENTIFYING_FAMILIES,
    NAMESPACE_ORDER,
    UnknownEngine,
    describe_page,
    detect_engine,
    require_engine,
)
from collector.engines._prefix import find_prefix, prefixed_wanted, strip_prefix
from collector.engines._read import structural
from collector.exposition import (
    DEFAULT_MAX_SAMPLES,
    LayoutCache,
    MetricFamily,
    Wanted,
    is_openmetrics,
)
from collector.exposition import parse as strict_parse
from collector.frozen import fast_init
from collector.gpus import GPU_ADAPTERS, GpuAdapter
from collector.samples import GpuSample, ReplicaSample, TargetInfo

WANTED_FAMILIES: frozenset[str] = ENGINE_FAMILIES.union(*(g.families for g in GPU_ADAPTERS.values()))

GPU_ONLY = "dcgm"  # the engine name that means "this page is only GPUs" (``kvpilot parse --engine dcgm``)


@fast_init
@dataclass(frozen=True, slots=True)
class AdaptedPage:
    engine: str | None
    replicas: list[ReplicaSample] = field(default_factory=list)
    gpus: list[GpuSample] = field(default_factory=list)
    # Sample lines the page was read around, each with the family it lost (empty: the whole page was read).
    parse_errors: tuple[str, ...] = ()
    # The text removed in front of the engine's names before they were read (Ray Serve's ``ray_``), or the namespace
    # of a vLLM-compatible server that stood in place of the engine's (``lmdeploy:``); None when the names were read
    # as they are.
    prefix: str | None = None


class NoGpuFamilies(UnknownEngine):
    """A GPU target's page (or ``--engine dcgm``'s) with none of the GPU exporters' families, saying what it holds.

    ``empty``: the page holds no metric families at all, which dcgm-exporter serves until its first collection (one
    collect interval, 30 s by default, after it starts) and after a failed one; the scrape loop gives that a grace
    (``collector.scrape.ScrapeConfig.empty_gpu_page_grace_s``) before it calls the target down."""

    def __init__(self, families: Mapping[str, MetricFamily]) -> None:
        super().__init__(f"page has none of the GPU exporters' families: {describe_page(families, gpu_target=True)}")
        self.empty = not families

    def __reduce__(self) -> tuple[object, ...]:  # back from the reader process with its text and ``empty``
        return (_no_gpu_families, (self.args[0], self.empty))


def _no_gpu_families(message: str, empty: bool) -> NoGpuFamilies:
    error = NoGpuFamilies.__new__(NoGpuFamilies)
    UnknownEngine.__init__(error, message)
    error.empty = empty
    return error


# Every parse here reads a text page around a bad sample line (OpenMetrics stays strict: see collector.exposition).
parse = partial(strict_parse, drop_bad_lines=True)


def _told(page: AdaptedPage, families: Mapping[str, MetricFamily]) -> AdaptedPage:
    """``page`` saying which lines of ``families``' page were read around, if any (a ``PartialPage``, or a page read
    off the layout of one: both say ``errors`` and ``dropped``)."""
    errors: tuple[Exception, ...] = getattr(families, "errors", ())
    if not errors:
        return page
    left_out = ", ".join(sorted(getattr(families, "dropped", ())))
    return replace(page, parse_errors=(*(str(e) for e in errors), f"families left out: {left_out}"))


def _gpu_adapters(families: Mapping[str, MetricFamily]) -> list[GpuAdapter]:
    return [adapter for adapter in GPU_ADAPTERS.values() if adapter.present(families)]


def _adapt_gpus(families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float) -> list[GpuSample]:
    out: list[GpuSample] = []
    for adapter in structural(families, "gpu adapters", partial(_gpu_adapters, families)):
        out.extend(map(validity.gpu, adapter.adapt(families, target, timestamp)))
    return out


def adapt_families(
    families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float, engine: str | None = None
) -> AdaptedPage:
    """Adapt parsed families.

    GPU targets (``target.kind == "gpu"`` or ``engine == "dcgm"``) yield GPUs only; a page without any GPU
    exporter's family raises ``NoGpuFamilies`` (one with the families but no GPU on them reads as no GPUs). Engine
    targets use ``engine``, else ``target.engine``, else detection; they also yield the GPUs the page carries
    (Triton's ``nv_gpu_*``). A page with neither engine nor GPU families raises ``UnknownEngine``,
    as does a page that lacks every family of an engine named explicitly. Impossible values (negative
    counts, KV usage of 3, NaN where a count is meant) come out as None: see ``collector.validity``.
    """
    if target.kind == "gpu" or engine == GPU_ONLY:
        gpus = _adapt_gpus(families, target, timestamp)
        if not gpus and not any(g.present(families) for g in GPU_ADAPTERS.values()):
            raise NoGpuFamilies(families)
        return AdaptedPage(None, [], gpus)
    gpus = _adapt_gpus(families, target, timestamp)
    name = engine or target.engine
    if name is None:
        previous = _found_engines.get(target.url)  # a page that could be either stays the engine it was
        try:
            name = structural(families, ("engine", previous), partial(detect_engine, families, previous))
        except UnknownEngine:
            if gpus:
                return AdaptedPage(None, [], gpus)
            raise
        if name != previous:
            _remember(_found_engines, target.url, name)
        adapter = ENGINES[name]  # detected: the page is its (or, kept from the last page, names it reads)
    else:
        adapter = structural(families, ("adapter", name), partial(require_engine, name, families))
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
    openmetrics = is_openmetrics(content_type)
    prefix = target.prefix if target.prefix is not None else _found_prefixes.get(target.url)
    if prefix:
        wanted = prefixed_wanted(prefix, WANTED_FAMILIES, NAMESPACE_ORDER)
        families = _parse_wanted(text, (target.url, prefix), wanted, openmetrics)
        try:
            page = adapt_families(_stripped(families, prefix), target, timestamp, engine)
            # a configured prefix the page does not carry removed nothing: the names were read as they are
            carried = any(name.startswith(prefix) for name in families)
            return replace(_told(page, families), prefix=prefix if carried else None)
        except UnknownEngine:
            if families:
                raise
            # nothing under the prefix: say what the page holds, not "no metric families at all"
            raise UnknownEngine(
                f"no family starts with the prefix `{prefix}`; "
                + _reason(parse(text, openmetrics=openmetrics), engine or target.engine)
            ) from None
    families = _parse_wanted(text, (target.url, ""), WANTED_FAMILIES, openmetrics)
    try:
        return _told(adapt_families(families, target, timestamp, engine), families)
    except UnknownEngine:
        if (target.kind == "gpu" or engine == GPU_ONLY) and not families:
            # none of the names any adapter reads (a DCGM page with its field names in lower case): say what the
            # page holds, not "no metric families at all"
            raise NoGpuFamilies(parse(text, openmetrics=openmetrics)) from None
        if target.kind == "gpu" or engine == GPU_ONLY:
            raise
        # Read the whole page once, to find a stack's prefix or else to say what the page holds.
        everything = parse(text, openmetrics=openmetrics)
    found = find_prefix(everything, IDENTIFYING_FAMILIES, NAMESPACE_ORDER) if target.prefix is None else None
    if found is not None:
        try:
            page = adapt_families(_stripped(everything, found[0]), target, timestamp, engine)
        except UnknownEngine:
            pass  # names that merely end like an engine's: report the page as it is
        else:
            _remember(_found_prefixes, target.url, found[0])
            return replace(_told(page, everything), prefix=found[0])
    raise UnknownEngine(_reason(everything, engine or target.engine)) from None


def _stripped(families: Mapping[str, MetricFamily], prefix: str) -> dict[str, MetricFamily]:
    """The page without ``prefix`` (``collector.engines._prefix.strip_prefix``): a namespace of its own stands for the
    engine namespace under which the most of the page's names are an adapter's."""
    return strip_prefix(families, prefix, NAMESPACE_ORDER, IDENTIFYING_FAMILIES)


# Each target's page layout, so that a page laid out as the target's previous one is read without parsing
# (collector.exposition._layout); keyed by URL and prefix, since the prefix changes what is read.
_layouts = LayoutCache(parse)


def _parse_wanted(
    text: str | bytes, source: tuple[str, str], wanted: Wanted, openmetrics: bool
) -> Mapping[str, MetricFamily]:
    if openmetrics:
        return parse(text, wanted=wanted, openmetrics=True)
    return _layouts.parse(source, text, wanted=wanted, max_samples=DEFAULT_MAX_SAMPLES)


def _reason(families: Mapping[str, MetricFamily], engine: str | None) -> str:
    if engine is not None:
        reason = f"page has none of the {engine} families: {describe_page(families)}"
    else:
        reason = f"no engine adapter matches this page: {describe_page(families)}"
    if getattr(families, "errors", ()):  # the families that would have matched may be the ones left out
        reason += "; read without the lines that could not be read: " + "; ".join(
            _told(AdaptedPage(None), families).parse_errors
        )
    return reason


# Prefixes found on pages, and the engines pages were detected as, by target URL; bounded, the oldest forgotten
# first (a target that goes away leaves one short string behind until then).
_found_prefixes: OrderedDict[str, str] = OrderedDict()
_found_engines: OrderedDict[str, str] = OrderedDict()
_MAX_FOUND = 10_000


def _remember(found: OrderedDict[str, str], url: str, value: str) -> None:
    found[url] = value
    found.move_to_end(url)
    while len(found) > _MAX_FOUND:
        found.popitem(last=False)


__all__ = ["GPU_ONLY", "WANTED_FAMILIES", "AdaptedPage", "adapt_families", "adapt_page"]
