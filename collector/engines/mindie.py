"""Huawei MindIE (Ascend NPUs) adapter: vLLM V0's series without a namespace, the KV gauges named for the NPU.

MindIE Service serves ``num_requests_running``, ``num_requests_waiting``, ``npu_cache_usage_perc``,
``prompt_tokens_total``, ``time_to_first_token_seconds``… with a ``model_name`` label: a mindie-server capture in
gpustack/gpustack issue #1785, and the complete ``/metrics`` response sample of MindIE's documentation (the MindIE MS
Coordinator's page, which sums the nodes' pages under the same names). NIM writes the same unprefixed vLLM names, so
the names the two share (the scheduler gauges, token counters, latency histograms) do not identify MindIE; its own do
(``npu_cache_usage_perc``, ``npu_prefix_cache_hit_rate``, ``request_received``, ``request_failed``,
``failed_request_perc``), and a page with only the shared names reads as NIM, with the same values, unless its
target's last page read as MindIE (``collector.engines.detect_engine``'s ``previous``).

Mapping decisions:
- ``kv_usage`` = ``npu_cache_usage_perc`` (KV blocks in use on the NPU, "1 means 100 percent usage");
  ``cpu_cache_usage_perc`` (the swap space on the host) is not read, as vLLM V0's is not.
- ``requests_finished`` = ``request_success_total`` + ``request_failed_total``: MindIE counts a failed request in the
  second counter only (the documentation's sample: received 3188, success 2267, failed 0), and a request that failed
  has left the engine too. Requests aborted by their client are in neither counter (the same sample's 2523 first
  tokens against 2267 successes), so the finished rate can be lower than the arrival rate at a steady queue.
- ``npu_prefix_cache_hit_rate`` is a ratio gauge over an unstated window, not a pair of counters: not mapped, so
  ``prefix_queries``/``prefix_hits`` stay ``None`` (as for vLLM V0's ``gpu_prefix_cache_hit_rate``).
- No cache config, no queue-time histogram: ``kv_capacity_tokens`` and ``queue_time`` stay ``None``.
"""

from __future__ import annotations

import math
from typing import Any

from collector.engines._declarative import DeclarativeAdapter, histogram, mean, total
from collector.engines._read import Families, Series, read_sum

_SUCCESS, _FAILED = Series("request_success"), Series("request_failed")
# MindIE's own names beside the KV gauge: they tell its page from NIM's (see the module notes)
_OWN = ("request_received", "request_failed", "failed_request_perc", "npu_prefix_cache_hit_rate")

FIELDS = {
    "requests_waiting": total("num_requests_waiting"),
    "requests_running": total("num_requests_running"),
    "kv_usage": mean("npu_cache_usage_perc"),
    "preemptions": total("num_preemptions"),
    "prompt_tokens": total("prompt_tokens"),
    "generation_tokens": total("generation_tokens"),
    "ttft": histogram("time_to_first_token_seconds"),
    "itl": histogram("time_per_output_token_seconds"),
    "e2e": histogram("e2e_request_latency_seconds"),
}


def _derive(families: Families, _values: dict[str, Any]) -> dict[str, Any]:
    """``requests_finished``: successes plus failures, each where the page has it (None when it has neither)."""
    counts = [v for v in (read_sum(families, (_SUCCESS,)), read_sum(families, (_FAILED,))) if v is not None]
    return {"requests_finished": math.fsum(counts) if counts else None}


ADAPTER = DeclarativeAdapter(
    name="mindie",
    fields=FIELDS,
    model_labels=("model_name",),
    extra_families=frozenset({"request_success", *_OWN}),
    derive=_derive,
    identifying=frozenset({"npu_cache_usage_perc", *_OWN}),
)
