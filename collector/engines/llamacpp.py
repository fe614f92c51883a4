"""llama.cpp ``llama-server --metrics`` adapter (unlabelled series).

Mapping decisions:
- ``requests_running`` = ``requests_processing``; ``requests_waiting`` = ``requests_deferred`` (requests
  held back because every slot is busy).
- ``kv_usage`` = ``kv_cache_usage_ratio`` when present. That series and ``kv_cache_tokens`` were removed
  from llama.cpp in mid-2025; without them KV usage is unknown (``None``), never 0.
- ``prompt_tokens`` = ``prompt_tokens_total``, ``generation_tokens`` = ``tokens_predicted_total``.
- Releases that count ``prompt_tokens_cached_total`` ("prompt tokens reused from the cache") say their
  ``prompt_tokens_total`` excludes those: there ``prompt_tokens`` = processed + cached (every prompt token, as the
  other engines count), ``prefix_queries`` = the same and ``prefix_hits`` = cached, a token hit rate as vLLM's.
  Without the cached counter, prefix fields stay ``None`` (older releases counted only processed tokens).
- No KV capacity, preemption, finished-request or latency-histogram series: ``None``.
- llama-server writes no labels, but servers that run several llama-server instances and serve their pages as one
  add a ``model`` label to every sample: Docker Model Runner's ``/metrics`` aggregates its active runners' pages with
  ``backend``, ``mode`` and ``model`` labels (docker/model-runner pull request #78). The model is read from that
  label, and two models on one such page are two replicas, never one sum of unrelated models' queues.
"""

from __future__ import annotations

from typing import Any

from collector.engines._declarative import DeclarativeAdapter, mean, total
from collector.engines._read import Families, Series, read_sum

FIELDS = {
    "requests_waiting": total("llamacpp:requests_deferred"),
    "requests_running": total("llamacpp:requests_processing"),
    "kv_usage": mean("llamacpp:kv_cache_usage_ratio"),
    "prompt_tokens": total("llamacpp:prompt_tokens"),
    "generation_tokens": total("llamacpp:tokens_predicted"),
}

_CACHED = "llamacpp:prompt_tokens_cached"


def _derive(families: Families, values: dict[str, Any]) -> dict[str, Any]:
    cached = read_sum(families, (Series(_CACHED),))
    processed = values.get("prompt_tokens")
    if cached is None or processed is None:  # the keys even so: the generated docs list what derive sets
        return {"prompt_tokens": processed, "prefix_queries": None, "prefix_hits": None}
    every = processed + cached
    return {"prompt_tokens": every, "prefix_queries": every, "prefix_hits": cached}


ADAPTER = DeclarativeAdapter(
    name="llamacpp",
    fields=FIELDS,
    # read by nothing canonical, but they identify the engine on pages with few series
    extra_families=frozenset(
        {
            _CACHED,
            "llamacpp:kv_cache_tokens",
            "llamacpp:n_decode",
            "llamacpp:prompt_seconds",
            "llamacpp:tokens_predicted_seconds",
            "llamacpp:prompt_tokens_seconds",
            "llamacpp:predicted_tokens_seconds",
        }
    ),
    derive=_derive,
    model_labels=("model",),
)
