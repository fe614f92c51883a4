"""llama.cpp ``llama-server --metrics`` adapter (unlabelled series).

Mapping decisions:
- ``requests_running`` = ``requests_processing``; ``requests_waiting`` = ``requests_deferred`` (requests
  held back because every slot is busy).
- ``kv_usage`` = ``kv_cache_usage_ratio`` when present. That series and ``kv_cache_tokens`` were removed
  from llama.cpp in mid-2025; without them KV usage is unknown (``None``), never 0.
- ``prompt_tokens`` = ``prompt_tokens_total``, ``generation_tokens`` = ``tokens_predicted_total``.
- No KV capacity, prefix-cache, preemption, finished-request or latency-histogram series: ``None``.
"""

from __future__ import annotations

from collector.engines._declarative import DeclarativeAdapter, mean, total

FIELDS = {
    "requests_waiting": total("llamacpp:requests_deferred"),
    "requests_running": total("llamacpp:requests_processing"),
    "kv_usage": mean("llamacpp:kv_cache_usage_ratio"),
    "prompt_tokens": total("llamacpp:prompt_tokens"),
    "generation_tokens": total("llamacpp:tokens_predicted"),
}

ADAPTER = DeclarativeAdapter(
    name="llamacpp",
    fields=FIELDS,
    # read by nothing canonical, but they identify the engine on pages with few series
    extra_families=frozenset(
        {
            "llamacpp:kv_cache_tokens",
            "llamacpp:n_decode",
            "llamacpp:prompt_seconds",
            "llamacpp:tokens_predicted_seconds",
            "llamacpp:prompt_tokens_seconds",
            "llamacpp:predicted_tokens_seconds",
        }
    ),
)
