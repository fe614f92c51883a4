"""NVIDIA NIM for LLMs adapter: vLLM's series without vLLM's ``vllm:`` namespace.

NIM LLM containers built on vLLM serve ``num_requests_running``, ``gpu_cache_usage_perc``,
``prompt_tokens_total``, ``time_to_first_token_seconds``… with a ``model_name`` label (names from the capture
DataDog/integrations-core @ 8b7db5d : nvidia_nim/tests/fixtures/nim_metrics.txt). The mapping is vLLM's, with
the namespace removed, so both stay in step.

Mapping decisions beyond vLLM's:
- ``requests_finished`` = ``request_finish_total`` (every finished request, by ``finished_reason``), else
  ``request_success_total`` (older NIM builds without the finish counter).
- NIM exports no cache config: ``kv_capacity_tokens`` stays ``None``.
"""

from __future__ import annotations

from collector.engines import vllm
from collector.engines._declarative import DeclarativeAdapter, Field, total
from collector.engines._read import Series

_NAMESPACE = "vllm:"


def _bare(f: Field) -> Field:
    return Field(tuple(Series(s.family.removeprefix(_NAMESPACE), s.match) for s in f.sources), f.combine, f.scale)


FIELDS = {name: _bare(f) for name, f in vllm.FIELDS.items() if name != "requests_finished"}
FIELDS["requests_finished"] = total("request_finish", "request_success")

ADAPTER = DeclarativeAdapter(
    name="nim",
    fields=FIELDS,
    model_labels=("model_name",),
    extra_families=frozenset({"num_request_max", "request_failure"}),
    # names generic enough to appear on other pages do not identify NIM on their own: its scheduler and cache gauges
    # do; its request histograms do not, trtllm-serve up to 1.1 wrote the same unprefixed (see trtllm_pytorch)
    identifying=frozenset(
        {
            "num_requests_running",
            "num_requests_waiting",
            "num_request_max",
            "gpu_cache_usage_perc",
            "kv_cache_usage_perc",
            "request_finish",
        }
    ),
)
