"""Hugging Face TGI adapter, from ``router/src/server.rs`` and ``backends/v3`` (series carry no model label).

Mapping decisions:
- ``requests_waiting`` = ``tgi_queue_size``; ``requests_running`` = ``tgi_batch_current_size``.
- ``kv_capacity_tokens`` = ``tgi_batch_max_total_tokens`` (the token budget of the KV pool) and
  ``kv_usage`` = ``tgi_batch_current_max_tokens / tgi_batch_max_total_tokens``: the share of that budget
  the running batch has reserved, which is what TGI admits against (it reserves prompt + max_new_tokens).
  Either gauge missing, or a zero budget: unknown.
- Tokens: TGI has no token counters, but the ``_sum`` of its per-request histograms is one:
  ``prompt_tokens`` = ``tgi_request_input_length_sum``, ``generation_tokens`` =
  ``tgi_request_generated_tokens_sum`` (monotonic, reset with the process like any counter).
- ``requests_finished`` = ``tgi_request_success``. No prefix-cache or preemption series: ``None``.
- Histograms: ``e2e`` = ``tgi_request_duration``, ``queue_time`` = ``tgi_request_queue_duration``,
  ``itl`` = ``tgi_request_mean_time_per_token_duration`` (one observation per request: its mean
  inter-token time, coarser than a per-token histogram). TGI exports no time-to-first-token: ``None``.
"""

from __future__ import annotations

from typing import Any

from collector.engines._declarative import DeclarativeAdapter, histogram, total
from collector.engines._read import Families, Series, find_family, read_sum

FIELDS = {
    "requests_waiting": total("tgi_queue_size"),
    "requests_running": total("tgi_batch_current_size"),
    "kv_capacity_tokens": total("tgi_batch_max_total_tokens"),
    "requests_finished": total("tgi_request_success"),
    "itl": histogram("tgi_request_mean_time_per_token_duration"),
    "e2e": histogram("tgi_request_duration"),
    "queue_time": histogram("tgi_request_queue_duration"),
}

_INPUT_LENGTH = "tgi_request_input_length"
_GENERATED = "tgi_request_generated_tokens"
_CURRENT_MAX_TOKENS = "tgi_batch_current_max_tokens"


def _histogram_sum(families: Families, name: str) -> float | None:
    fam = find_family(families, name)
    if fam is None:
        return None
    sums = [s.value for s in fam.samples if s.name == name + "_sum"]
    return sum(sums) if sums else None


def _derive(families: Families, values: dict[str, Any]) -> dict[str, Any]:
    reserved = read_sum(families, (Series(_CURRENT_MAX_TOKENS),))
    budget = values.get("kv_capacity_tokens")
    usage = reserved / budget if reserved is not None and budget else None
    return {
        "kv_usage": usage,
        "prompt_tokens": _histogram_sum(families, _INPUT_LENGTH),
        "generation_tokens": _histogram_sum(families, _GENERATED),
    }


ADAPTER = DeclarativeAdapter(
    name="tgi",
    fields=FIELDS,
    extra_families=frozenset({_INPUT_LENGTH, _GENERATED, _CURRENT_MAX_TOKENS, "tgi_request_count"}),
    derive=_derive,
)
