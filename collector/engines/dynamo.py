"""NVIDIA Dynamo adapter: the HTTP frontend's ``dynamo_frontend_*`` series and the workers' ``dynamo_component_*``.

Names from ai-dynamo/dynamo @ 04070c7 : lib/runtime/src/metrics/prometheus_names.rs (``frontend_service``,
``work_handler`` and ``kvstats``; component names are ``dynamo_component_`` + the constant, older releases
``dynamo_component_kvstats_`` + it). A Dynamo worker's page also carries its engine's own series (``vllm:``,
``sglang:``, ``trtllm_``): the engine's adapter reads those, and this one is used only when no engine adapter
matches (``fallback``), i.e. for the frontend and for workers whose engine series are off.

Mapping decisions:
- ``requests_waiting`` = ``dynamo_frontend_queued_requests`` (requests that have not yet had a first token,
  prefill included); ``requests_running`` = ``inflight_requests - queued_requests`` (in flight and past their
  first token), else unknown: in-flight alone counts the queue twice. Dynamo's metrics guide
  (docs/guides/metrics.md, "Concurrency Example") shows the subset: 10 clients, a backend allowing 3, queued 7,
  in flight 10. In flight is counted from the HTTP handler's start until the response is complete and the queue
  from the same start until the first token, "a subset of inflight time" (ai-dynamo/dynamo @ 0014908 :
  lib/llm/src/http/service/metrics.rs, the comment above ``HttpQueueGuard``). So a frontend whose in flight is 0
  has nothing queued either: both read 0 even on pages without the queue gauge (NVIDIA AIPerf's real frontend
  page has none); with requests in flight and no queue gauge, both stay unknown (the page cannot split them).
  Releases after 0014908 name the same count ``active_requests`` ("Clearer name for what inflight_requests
  measures", prometheus_names.rs ``frontend_service::ACTIVE_REQUESTS``; ``inflight_requests`` is kept,
  deprecated): read when ``inflight_requests`` is absent. Later releases deprecate the queue gauge too, "still
  emitted but will be removed in a future release" (Dynamo's metrics guide, "Deprecated frontend gauges"; PR #8162):
  its count is the sum of ``stage_requests`` (prometheus_names.rs ``frontend_perf::STAGE_REQUESTS``, labels ``stage``
  and ``phase``) over the stages before the first token, ``preprocess``, ``route`` and ``dispatch`` (the guide's "old
  queued semantic"), read where ``queued_requests`` is absent. That gauge has no ``model`` label: on a frontend
  serving several models it cannot be split, and their queues stay unknown. These are the frontend's figures, not an
  engine's:
  ``requests_running`` counts requests past their first token on every worker behind the frontend (an engine's
  running batch also holds requests still in prefill, which the frontend counts as queued), and
  ``requests_waiting`` counts requests in prefill as well as those queued. Point kvpilot at the workers for
  their own batch and queue.
- ``kv_usage`` = the worker's ``gpu_cache_usage_percent`` (0..1); the frontend exports none.
- ``kv_capacity_tokens`` = ``model_total_kv_blocks`` (summed over the workers it lists) x
  ``model_kv_cache_block_size``.
- ``requests_finished`` = ``dynamo_frontend_requests_total`` (counted when a request ends, any status), else
  the worker's ``dynamo_component_requests_total``. Not ``dynamo_frontend_request_success_count`` (on AIPerf's
  page; a name prometheus_names.rs does not write, "Number of successful requests"): it leaves out requests that
  failed, and kvpilot's arrival rate is the finished rate plus the change in flight, so under overload (the
  frontend's 503s and 529s) arrivals would read low exactly when demand is highest. ``generation_tokens`` =
  ``output_tokens_total``;
  ``prompt_tokens`` = the ``_sum`` of the ``input_sequence_tokens`` histogram (a counter in all but name).
- Latency: ``ttft`` = ``time_to_first_token_seconds``, ``itl`` = ``inter_token_latency_seconds``, ``e2e`` =
  ``request_duration_seconds`` (frontend, else worker). No preemption series: ``None``.
- Prefix cache in tokens, as vLLM's: newer frontends (ai-dynamo/dynamo @ 4415465, ``frontend_service::CACHED_TOKENS``)
  observe each request's cached prompt tokens once, when the engine reports them, in the ``cached_tokens``
  histogram: ``prefix_hits`` = its ``_sum``, ``prefix_queries`` = ``input_sequence_tokens_sum``. Only where every
  request past its first token has reported (``cached_tokens_count`` + in flight >= ``input_sequence_tokens_count``):
  an engine that reports no cached count would otherwise read as a 0 % hit rate. Else both stay unknown.
- Model label ``model``; a frontend serving several models yields one replica per model.
- The frontend's prefix can be overridden (``DYN_METRICS_PREFIX``, "added for NIM compatibility (PR #2432)",
  prometheus_names.rs ``frontend_service``): NIM's Dynamo-based frontend writes ``nv_llm_http_service_*``, as Dynamo's
  own prefix test sets it. Both spellings are read, Dynamo's first.
- Every component endpoint of Dynamo's DistributedRuntime gets the work handler's series (``requests_total``,
  ``request_duration_seconds``, ``inflight_requests``), an LLM worker's or not: the runtime's own example
  (ai-dynamo/dynamo @ 2fcc8cf : lib/runtime/examples/system_metrics/README.md) serves them for ``example_component``'s
  ``example_endpoint9881``. They tell a worker only where they serve a model: a ``model`` label or the ``generate``
  endpoint LLM workers serve (a real worker's page: ``dynamo_component="backend",dynamo_endpoint="generate",
  model="Qwen/Qwen3-0.6B"``). A page with nothing else is no replica (a replica of unknowns would read as "no data").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.engines._declarative import DeclarativeAdapter, histogram, mean, total
from collector.engines._read import Families, Series, family_names, find_family, read_mean, read_sum
from collector.exposition import MetricFamily
from collector.samples import ReplicaSample, TargetInfo

# The frontend's prefixes: Dynamo's, and NIM's through DYN_METRICS_PREFIX (see the module notes).
_FRONTENDS = ("dynamo_frontend_", "nv_llm_http_service_")
_C = "dynamo_component_"


def _front(name: str) -> tuple[str, ...]:
    """A frontend series under each prefix the frontend may have, Dynamo's first."""
    return tuple(prefix + name for prefix in _FRONTENDS)


_QUEUED = _front("queued_requests")
# The frontend's requests by pipeline stage (no model label), and the stages a request passes before its first token.
_STAGES = _front("stage_requests")
_BEFORE_FIRST_TOKEN = frozenset(("preprocess", "route", "dispatch"))
# In flight at the frontend, under its deprecated name first, then the name later releases give the same count.
_INFLIGHT = (*_front("inflight_requests"), *_front("active_requests"))
_TOTAL_BLOCKS = _front("model_total_kv_blocks")
_BLOCK_SIZE = _front("model_kv_cache_block_size")
_INPUT_TOKENS = _front("input_sequence_tokens")
_CACHED_TOKENS = _front("cached_tokens")

FIELDS = {
    "requests_waiting": total(*_QUEUED),
    "kv_usage": mean(_C + "gpu_cache_usage_percent", _C + "kvstats_gpu_cache_usage_percent"),
    "generation_tokens": total(*_front("output_tokens")),
    "requests_finished": total(*_front("requests"), _C + "requests"),
    "ttft": histogram(*_front("time_to_first_token_seconds")),
    "itl": histogram(*_front("inter_token_latency_seconds")),
    "e2e": histogram(*_front("request_duration_seconds"), _C + "request_duration_seconds"),
}
EXTRA_FAMILIES = (
    *_INFLIGHT,
    *_STAGES,
    *_TOTAL_BLOCKS,
    *_BLOCK_SIZE,
    *_INPUT_TOKENS,
    *_CACHED_TOKENS,
    _C + "inflight_requests",
    _C + "total_blocks",
)
# The work handler's series, which every component endpoint gets (module notes): a worker's only where they serve a
# model (``_serves_a_model``).
_WORK_HANDLER = (_C + "requests", _C + "request_duration_seconds", _C + "inflight_requests")
_WORK_HANDLER_KEYS = frozenset(key for name in _WORK_HANDLER for key in family_names(name))
_IDENTIFYING = frozenset(
    {series.family for spec in FIELDS.values() for series in spec.sources} | set(EXTRA_FAMILIES)
) - set(_WORK_HANDLER)
# The endpoint every Dynamo LLM worker serves (its backend, prefill and decode components alike).
_LLM_ENDPOINT = "generate"


def _serves_a_model(family: MetricFamily) -> bool:
    """Whether a work-handler series is an LLM worker's: a ``model`` label, or the ``generate`` endpoint."""
    return any(s.labels.get("model") or s.labels.get("dynamo_endpoint") == _LLM_ENDPOINT for s in family.samples)


def _histogram_part(families: Families, names: tuple[str, ...], part: str) -> float | None:
    """The histogram's ``_sum`` or ``_count`` over its label sets (the first of ``names`` on the page), None where it
    has none."""
    for name in names:
        fam = find_family(families, name)
        if fam is not None:
            values = [s.value for s in fam.samples if s.name == name + part]
            return sum(values) if values else None
    return None


def _prefix(families: Families, inflight: float | None) -> tuple[float | None, float | None]:
    """(queries, hits) in tokens from the per-request histograms, where every answered request reported its
    cached tokens; else (None, None)."""
    hits = _histogram_part(families, _CACHED_TOKENS, "_sum")
    queries = _histogram_part(families, _INPUT_TOKENS, "_sum")
    reported = _histogram_part(families, _CACHED_TOKENS, "_count")
    asked = _histogram_part(families, _INPUT_TOKENS, "_count")
    if hits is None or queries is None or reported is None or asked is None:
        return None, None
    if reported + (inflight or 0.0) < asked:  # some requests came back without a cached count
        return None, None
    return queries, hits


def _staged(families: Families) -> float | None:
    """Requests in the frontend's stages before their first token (the deprecated queue gauge's count), None where
    the page has no stage gauge."""
    for name in _STAGES:
        fam = families.get(name)
        if fam is not None:
            return sum(s.value for s in fam.samples if s.labels.get("stage") in _BEFORE_FIRST_TOKEN)
    return None


def _series(names: tuple[str, ...]) -> tuple[Series, ...]:
    return tuple(Series(name) for name in names)


def _derive(families: Families, values: dict[str, Any]) -> dict[str, Any]:
    inflight = read_sum(families, _series(_INFLIGHT))
    queued = values.get("requests_waiting")
    if queued is None:
        queued = _staged(families)
    if inflight == 0 and queued is None:  # the queue is a subset of in flight (module notes): nothing queued
        queued = 0.0
    blocks = read_sum(families, _series(_TOTAL_BLOCKS))
    block_size = read_mean(families, _series(_BLOCK_SIZE))
    queries, hits = _prefix(families, inflight)
    return {
        "requests_waiting": queued,
        "requests_running": max(0.0, inflight - queued) if inflight is not None and queued is not None else None,
        "kv_capacity_tokens": blocks * block_size if blocks is not None and block_size else None,
        "prompt_tokens": _histogram_part(families, _INPUT_TOKENS, "_sum"),
        "prefix_queries": queries,
        "prefix_hits": hits,
    }


@dataclass(frozen=True)
class _FrontendAdapter(DeclarativeAdapter):
    """Dynamo's adapter: a page of several models (one replica each) leaves out the stage gauge, which no model
    label splits (the module notes), so that no model's queue is the frontend's whole."""

    def score(self, families: Families) -> int:
        """The frontend's and the workers' own series (``identifying``), and the work handler's where they serve a
        model (module notes): a generic component endpoint's page scores 0."""
        generic = 0
        for key in _WORK_HANDLER_KEYS:  # a few lookups, not a pass over the page
            fam = families.get(key)
            if fam is not None and _serves_a_model(fam):
                generic += 1
        return super().score(families) + generic

    def adapt(self, families: Families, target: TargetInfo, timestamp: float) -> list[ReplicaSample]:
        if any(name in families for name in _STAGES) and len(self.groups(families)) > 1:
            families = {name: fam for name, fam in families.items() if name not in _STAGES}
        return super().adapt(families, target, timestamp)


ADAPTER = _FrontendAdapter(
    name="dynamo",
    fields=FIELDS,
    model_labels=("model",),
    extra_families=frozenset(EXTRA_FAMILIES),
    identifying=_IDENTIFYING,
    derive=_derive,
    fallback=True,
)
