"""SGLang adapter (``--enable-metrics``), from ``python/sglang/srt/metrics/collector.py``.

Mapping decisions:
- ``requests_waiting`` = ``num_queue_reqs``, ``requests_running`` = ``num_running_reqs``,
  ``kv_usage`` = ``token_usage`` (fraction of the KV token pool in use), ``kv_capacity_tokens`` =
  ``max_total_num_tokens`` (the pool size in tokens).
- Prefix cache: SGLang counts ``cached_tokens_total`` (prompt tokens served from the radix cache)
  against ``prompt_tokens_total``; so ``prefix_queries`` = prompt tokens and ``prefix_hits`` = cached
  tokens, and Δhits/Δqueries is the token hit rate, the same unit as vLLM's. The ``cache_hit_rate``
  gauge is a ratio over an unspecified window and is not used.
- ``preemptions`` = ``num_retracted_requests_total`` (newer builds; retraction is SGLang's preemption).
  The ``num_retracted_reqs`` gauge counts requests retracted *now*, not a counter: not mapped.
- ``requests_finished`` = ``num_requests_total`` (incremented when a request finishes).
- 2024 releases (v0.3, ``name`` label for the model) named the queue ``num_requests_waiting`` (and the same
  again as ``queue_req``), the batch ``num_requests_running`` and the queue-time histogram
  ``waiting_request_latency_seconds``; they are read after the current names. Their ``cached_token`` and
  ``cache_hit_rate`` are gauges over an unstated window: not mapped.
- Disaggregated serving: the ``engine_type`` label says ``prefill`` or ``decode`` (``unified`` when co-located),
  which is the replica's role where discovery has not given one. A decode worker takes a request into its waiting
  queue only once its KV has arrived; before that the request waits in the prealloc queue for decode KV memory
  (``num_decode_prealloc_queue_reqs``, collector.py @ 00ae9c1), which is where a full decode pool's backlog piles up.
  So ``requests_waiting`` = ``num_queue_reqs`` + ``num_decode_prealloc_queue_reqs``. Not added: the decode transfer
  queue (KV allocated and arriving: paced by the prefill side) and the prefill worker's prealloc (bootstrap) and
  inflight queues (waiting on the decode side, or done and sending KV), which say nothing about its own capacity.
- Priority scheduling (``--enable-priority-scheduling``): the scheduler's queue gauges (running, waiting, the
  disaggregation queues) are written twice over, the total under ``priority=""`` and each priority's share under
  ``priority="<n>"`` (``_log_gauge_queue_count`` in python/sglang/srt/observability/metrics_collector.py), so only the
  total is read. The tokenizer's counters and histograms carry each request's own ``priority`` and no total: all read.
- Tensor parallelism: by default only TP rank 0 reports scheduler series; with
  ``--enable-metrics-for-all-schedulers`` every rank reports the same state, so only the lowest
  ``tp_rank`` of each ``dp_rank`` is read (data-parallel ranks are summed, like vLLM engines).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collector.engines._declarative import DeclarativeAdapter, histogram, mean, total
from collector.engines._read import Families, Series, family_names, read_sum
from collector.exposition import Sample

FIELDS = {
    "requests_waiting": total("sglang:num_queue_reqs", "sglang:num_requests_waiting", "sglang:queue_req"),
    "requests_running": total("sglang:num_running_reqs", "sglang:num_requests_running"),
    "kv_usage": mean("sglang:token_usage"),
    "kv_capacity_tokens": total("sglang:max_total_num_tokens"),
    "prefix_queries": total("sglang:prompt_tokens"),
    "prefix_hits": total("sglang:cached_tokens"),
    "preemptions": total("sglang:num_retracted_requests"),
    "prompt_tokens": total("sglang:prompt_tokens"),
    "generation_tokens": total("sglang:generation_tokens"),
    "requests_finished": total("sglang:num_requests"),
    "ttft": histogram("sglang:time_to_first_token_seconds"),
    "itl": histogram("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "e2e": histogram("sglang:e2e_request_latency_seconds"),
    "queue_time": histogram("sglang:queue_time_seconds", "sglang:waiting_request_latency_seconds"),
}


def _rank(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        return float("inf")


_DECODE_PREALLOC = "sglang:num_decode_prealloc_queue_reqs"

# The queue gauges SGLang splits by priority beside their total (see the module notes), under every key they may have.
_BY_PRIORITY = frozenset(
    key
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:num_prefill_bootstrap_queue_reqs",
        "sglang:num_prefill_prealloc_queue_reqs",
        "sglang:num_prefill_inflight_queue_reqs",
        _DECODE_PREALLOC,
        "sglang:num_decode_transfer_queue_reqs",
    )
    for key in family_names(name)
)


def _lowest_tp_ranks(families: Families) -> dict[str | None, float]:
    """The lowest ``tp_rank`` reporting, per ``dp_rank``; empty when no series carries ``tp_rank``."""
    lowest: dict[str | None, float] = {}
    for name, fam in families.items():
        if not name.startswith(("sglang:", "sglang_")):
            continue
        for s in fam.samples:
            raw = s.labels.get("tp_rank")
            if raw is not None:
                dp = s.labels.get("dp_rank")
                lowest[dp] = min(lowest.get(dp, float("inf")), _rank(raw))
    return lowest


def _split_by_priority(families: Families) -> bool:
    """Whether a queue gauge carries per-priority shares beside its total (``priority=""``)."""
    for name in _BY_PRIORITY:
        fam = families.get(name)
        if fam is not None and any(s.labels.get("priority") for s in fam.samples):
            return any(not s.labels.get("priority") for s in fam.samples)
    return False


def _read_filter(families: Families) -> Callable[[Sample], bool] | None:
    """The samples to read: the lowest TP rank's of each DP rank, and of a queue gauge split by priority its total
    only; None when the page needs neither."""
    lowest = _lowest_tp_ranks(families)
    by_priority = _split_by_priority(families)
    if not lowest and not by_priority:
        return None

    def keep(s: Sample) -> bool:
        if by_priority and s.labels.get("priority") and s.name in _BY_PRIORITY:
            return False
        raw = s.labels.get("tp_rank")
        return raw is None or _rank(raw) == lowest.get(s.labels.get("dp_rank"))

    return keep


def _derive(families: Families, values: dict[str, Any]) -> dict[str, Any]:
    """Prompt tokens count as prefix lookups only where cached tokens are counted beside them (2024 releases
    have no ``cached_tokens_total``): a lookup count without hits would read as a 0 % hit rate. A decode worker's
    prealloc queue joins its waiting queue (see the module notes)."""
    out: dict[str, Any] = {} if values.get("prefix_hits") is not None else {"prefix_queries": None}
    waiting = values.get("requests_waiting")
    prealloc = read_sum(families, (Series(_DECODE_PREALLOC),), _read_filter(families))
    # the key even so (the generated docs list what derive sets); the mapped value where no prealloc queue is
    out["requests_waiting"] = waiting + prealloc if waiting is not None and prealloc else waiting
    return out


ADAPTER = DeclarativeAdapter(
    name="sglang",
    fields=FIELDS,
    model_labels=("model_name", "name"),
    role_labels=("engine_type",),
    extra_families=frozenset({_DECODE_PREALLOC}),
    prepare=_read_filter,
    derive=_derive,
)
