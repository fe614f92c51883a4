"""TensorRT-LLM PyTorch backend adapter (``trtllm-serve``, and Dynamo's TensorRT-LLM workers): ``trtllm_*`` series.

Names from ``tensorrt_llm/metrics/collector.py`` (NVIDIA/TensorRT-LLM @ 050f80d) with their ``model_name`` and
``engine_type`` labels. Releases up to 1.1 exported only the five request series (success counter, TTFT, TPOT,
queue time, end-to-end latency; Dynamo's ``docs/backends/trtllm/prometheus.md`` lists them); later ones add
the iteration series (queue, running batch, KV cache). Each field is read when its series is there.

Mapping decisions:
- ``requests_waiting`` = ``trtllm_num_requests_waiting``, ``requests_running`` = ``trtllm_num_requests_running``.
- ``kv_usage`` = ``trtllm_kv_cache_utilization`` (0..1), else ``used / max`` blocks; ``kv_capacity_tokens`` =
  ``trtllm_kv_cache_max_blocks * trtllm_kv_cache_tokens_per_block``.
- Prefix cache in tokens, as for the Triton backend: ``prefix_hits`` = reused blocks x tokens per block,
  ``prefix_queries`` = (reused + missed) blocks x tokens per block (both cumulative counters).
- ``requests_finished`` = ``trtllm_request_success_total`` summed over ``finished_reason``.
- ``itl`` = ``trtllm_time_per_output_token_seconds`` (per-request mean, as vLLM's older TPOT histogram).
- Older Dynamo releases re-exported the same series as ``trtllm:<name>`` (fy2462/dynamo, a fork of ai-dynamo/dynamo,
  docs/backends/trtllm/prometheus.md: "Dynamo automatically adds the ``trtllm:`` prefix"); both spellings are
  read, the current one first.
- ``trtllm-serve`` up to 1.1 served its five request series without any prefix (``request_success_total``,
  ``time_to_first_token_seconds``…; ``tensorrt_llm/metrics/collector.py`` @ 89fd9b7, and Dynamo's docs: "the
  ``trtllm_`` prefix is added by Dynamo"), names NIM's vLLM-style page also carries. They are read last, and they
  identify TensorRT-LLM only where their samples carry its ``engine_type`` label (NIM's carry ``model_name`` alone).
- A proposed ``/metrics`` of the PyTorch backend (NVIDIA/TensorRT-LLM PR #5560, closed unmerged; pages built on it
  may still be served) wrote the scheduler's and token series in a namespace of its own, ``pytrtllm:``:
  ``num_requests_running``, ``num_requests_waiting``, ``prompt_tokens_total``, ``generation_tokens_total``,
  ``request_completed_total`` (every finished request; ``requests_finished`` reads it after
  ``request_success_total``). Without this spelling the prefix search cut ``pytrtllm:`` off and read the bare
  names as NIM's: values right, engine wrong.
"""

from __future__ import annotations

from typing import Any

from collector.engines._declarative import DeclarativeAdapter, histogram, mean, total
from collector.engines._read import Families, Series, read_mean, read_sum

# The series trtllm-serve served unprefixed up to 1.1 (collector.py @ 89fd9b7): the rename table's third spelling.
_UNPREFIXED = frozenset(
    {
        "request_success",
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
    }
)


# The series PR #5560's ``pytrtllm:`` namespace had.
_PYTRTLLM = frozenset(
    {"num_requests_running", "num_requests_waiting", "prompt_tokens", "generation_tokens", "request_success"}
)


def _spellings(name: str) -> tuple[str, ...]:
    """The current ``trtllm_x``, older Dynamo's ``trtllm:x`` and, for the series they had, trtllm-serve 1.1's ``x``
    and PR #5560's ``pytrtllm:x``."""
    bare = name.removeprefix("trtllm_")
    spellings = (name, "trtllm:" + bare, bare) if bare in _UNPREFIXED else (name, "trtllm:" + bare)
    return (*spellings, "pytrtllm:" + bare) if bare in _PYTRTLLM else spellings


_MAX_BLOCKS = _spellings("trtllm_kv_cache_max_blocks")
_USED_BLOCKS = _spellings("trtllm_kv_cache_used_blocks")
_TOKENS_PER_BLOCK = _spellings("trtllm_kv_cache_tokens_per_block")
_REUSED = _spellings("trtllm_kv_cache_reused_blocks")
_MISSED = _spellings("trtllm_kv_cache_missed_blocks")

FIELDS = {
    "requests_waiting": total(*_spellings("trtllm_num_requests_waiting")),
    "requests_running": total(*_spellings("trtllm_num_requests_running")),
    "kv_usage": mean(*_spellings("trtllm_kv_cache_utilization")),
    "prompt_tokens": total(*_spellings("trtllm_prompt_tokens")),
    "generation_tokens": total(*_spellings("trtllm_generation_tokens")),
    "requests_finished": total(*_spellings("trtllm_request_success"), "pytrtllm:request_completed"),
    "ttft": histogram(*_spellings("trtllm_time_to_first_token_seconds")),
    "itl": histogram(*_spellings("trtllm_time_per_output_token_seconds")),
    "e2e": histogram(*_spellings("trtllm_e2e_request_latency_seconds")),
    "queue_time": histogram(*_spellings("trtllm_request_queue_time_seconds")),
}


def _read(families: Families, names: tuple[str, ...], combine: Any = read_sum) -> float | None:
    value: float | None = combine(families, tuple(Series(n) for n in names))
    return value


def _derive(families: Families, values: dict[str, Any]) -> dict[str, Any]:
    max_blocks = _read(families, _MAX_BLOCKS)
    tokens_per = _read(families, _TOKENS_PER_BLOCK, read_mean)
    reused = _read(families, _REUSED)
    missed = _read(families, _MISSED)
    used = _read(families, _USED_BLOCKS)
    known = tokens_per is not None and reused is not None
    out: dict[str, Any] = {
        "kv_capacity_tokens": max_blocks * tokens_per if max_blocks is not None and tokens_per is not None else None,
        "prefix_hits": reused * tokens_per if known else None,  # type: ignore[operator]
        "prefix_queries": (reused + missed) * tokens_per if known and missed is not None else None,  # type: ignore[operator]
    }
    if values.get("kv_usage") is None and used is not None and max_blocks:
        out["kv_usage"] = used / max_blocks
    return out


ADAPTER = DeclarativeAdapter(
    name="trtllm-pytorch",
    fields=FIELDS,
    model_labels=("model_name",),
    extra_families=frozenset({*_MAX_BLOCKS, *_USED_BLOCKS, *_TOKENS_PER_BLOCK, *_REUSED, *_MISSED}),
    derive=_derive,
    # every prefixed name identifies the engine; the unprefixed ones only with TensorRT-LLM's own label
    identifying=frozenset(
        {s.family for f in FIELDS.values() for s in f.sources if s.family.startswith(("trtllm", "pytrtllm:"))}
        | {*_MAX_BLOCKS, *_USED_BLOCKS, *_TOKENS_PER_BLOCK, *_REUSED, *_MISSED}
    ),
    identifying_label="engine_type",
)
