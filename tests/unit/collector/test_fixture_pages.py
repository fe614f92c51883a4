"""Every saved /metrics page read right: the values a person reads off the page by hand, page by page.

Reads every page in tests/fixtures/metrics and ../shared/fixtures/metrics through ``adapt_page`` (what the scrape
loop and ``kvpilot parse`` run). A page without a row here fails: a new capture needs its values checked by eye.
Each expected value says where on the page it comes from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from collector.adapt import adapt_page
from collector.engines import UnknownEngine
from collector.exposition import ParseError
from collector.samples import ReplicaSample, TargetInfo

_TESTS = Path(__file__).resolve().parents[2]
# not-exposition/: real answers to a /metrics request that are not the text format at all (JSON): read here for the
# error they must give, and left out of the exposition parsers' own page-by-page tests
DIRS = (
    _TESTS / "fixtures" / "metrics",
    _TESTS / "fixtures" / "metrics" / "not-exposition",
    _TESTS.parent.parent / "shared" / "fixtures" / "metrics",
)
PAGES = sorted(p for d in DIRS if d.is_dir() for p in d.glob("*.txt"))


@dataclass(frozen=True)
class Page:
    """What a page must yield: replicas (each a dict of the fields checked), a number of GPUs, or an error."""

    replicas: list[dict[str, Any]] = field(default_factory=list)
    gpus: int = 0
    error: str | None = None  # regex the UnknownEngine message must match
    gpu_fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # GPU index -> GpuSample fields (extra.<key>)


EXPECTED: dict[str, Page] = {
    "vllm__DataDog__integrations-core__vllm_metrics.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "facebook/opt-125m",  # model_name label
                "requests_waiting": 0.0,  # vllm:num_requests_waiting
                "requests_running": 0.0,  # vllm:num_requests_running
                "kv_usage": 0.0,  # vllm:kv_cache_usage_perc 0.0 (before the older gpu_cache_usage_perc)
                "kv_capacity_tokens": 7281 * 16,  # cache_config_info num_gpu_blocks="7281" x block_size="16"
                "prefix_queries": 117.0,  # vllm:prefix_cache_queries_total
                "prefix_hits": 64.0,  # vllm:prefix_cache_hits_total
                "preemptions": 0.0,  # vllm:num_preemptions_total
                "prompt_tokens": 5.0,  # vllm:prompt_tokens_total
                "generation_tokens": 7.0,  # vllm:generation_tokens_total
                "requests_finished": 1.0,  # vllm:request_success_total{finished_reason="length"}
                "itl.count": 144.0,  # vllm:inter_token_latency_seconds_count (before time_per_output_token's 6)
                "queue_time.count": 6.0,  # vllm:request_queue_time_seconds_count
            }
        ]
    ),
    "vllm-0.10-api-servers__vllm-project__vllm__v1_metrics_loggers__from-source.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "requests_waiting": 8.0,  # num_requests_waiting (mostrecent, no pid): 3 + 5
                "requests_running": 78.0,  # num_requests_running: 40 + 38
                # kv_cache_usage_perc comes once per API server (pid 4101: 0.81/0.77, 4102: 0.62/0.58; mean 0.695):
                # gpu_cache_usage_perc, mostrecent, holds each engine's newest, 0.62 and 0.58
                "kv_usage": 0.60,
                # every engine's cache_config_info carries the front end's num_gpu_blocks, the total over its engines
                # (vllm/v1/engine/utils.py, "Sum values from all engines in DP case"): counted once
                "kv_capacity_tokens": 28000 * 16.0,
                "prefix_queries": 217000.0,  # prefix_cache_queries_total, summed over processes and engines
                "prefix_hits": 109000.0,
                "prompt_tokens": 2570000.0,  # 1.3e6 + 1.27e6
                "generation_tokens": 514000.0,
                "requests_finished": 2570.0,  # request_success_total: 1280 + 20 + 1250 + 20
                "ttft.count": 2570.0,  # 1300 + 1270
                "ttft.sum": 947.5,  # 475 + 472.5
            }
        ]
    ),
    "vllm-v1-dp2__handwritten.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "requests_waiting": 8.0,  # num_requests_waiting, engine 0 + engine 1
                "requests_running": 21.0,  # num_requests_running, summed over both engines
                "kv_usage": 0.5,  # kv_cache_usage_perc, mean of the two engines
                "kv_capacity_tokens": 320000.0,  # num_gpu_blocks on each engine's sample is the total: counted once
                "prefix_queries": 100000.0,
                "prefix_hits": 51000.0,
                "preemptions": 3.0,
                "prompt_tokens": 310000.0,
                "requests_finished": 616.0,  # request_success_total over engines and finished_reason
            }
        ]
    ),
    "vllm-hybrid-kv__handwritten.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "google/gemma-3-12b-it",
                "requests_waiting": 3.0,
                "requests_running": 12.0,
                "kv_usage": 0.42,
                # cache_config_info kv_cache_size_tokens="855836", not num_gpu_blocks x block_size (543,360)
                "kv_capacity_tokens": 855836.0,
                "requests_finished": 300.0,  # 290 stop + 10 length
            }
        ]
    ),
    "vllm-lmcache__handwritten.txt": Page(
        [
            {
                "engine": "vllm",  # lmcache:* beside vllm:* does not change the engine
                "model": "Qwen/Qwen3-8B",
                "requests_running": 4.0,
                "kv_capacity_tokens": 4096 * 16.0,
                "prefix_queries": 50000.0,  # vLLM's GPU prefix cache, not LMCache's 30000 requested tokens
                "prefix_hits": 20000.0,  # not lmcache:num_hit_tokens_total 9000
            }
        ]
    ),
    "vllm-v0-2024__DataDog__integrations-core__vllm_metrics.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "facebook/opt-125m",
                "requests_waiting": 0.0,  # vllm:num_requests_waiting
                "requests_running": 0.0,
                "kv_usage": 0.0,  # vllm:gpu_cache_usage_perc, the only KV gauge of V0
                "kv_capacity_tokens": 7281 * 16.0,  # cache_config_info num_gpu_blocks x block_size, typed gauge
                "prefix_queries": None,  # V0 before the prefix-cache counters
                "prefix_hits": None,
                "preemptions": 0.0,  # vllm:num_preemptions_total
                "prompt_tokens": 5.0,
                "generation_tokens": 7.0,
                "requests_finished": 1.0,  # request_success_total{finished_reason="length"}
                "ttft.count": 1.0,
                "ttft.sum": 0.31326723098754883,
                "itl.count": 6.0,  # time_per_output_token_seconds_count: V0 has no inter_token_latency
                "e2e.count": 1.0,
                "queue_time": None,  # no request_queue_time_seconds on this page
            }
        ]
    ),
    # vLLM behind opendatahub-io/vllm-tgis-adapter: its TGIS-compatible tgi_* series (written from vLLM's own stats)
    # beside vLLM's; read as vLLM, the same values as the vLLM capture alone, not as TGI
    "vllm-tgis-adapter__opendatahub-io__vllm-tgis-adapter__tgis_utils_metrics__from-source.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "facebook/opt-125m",
                "requests_waiting": 0.0,  # vllm:num_requests_waiting (tgi_queue_size 0 says the same)
                "requests_running": 0.0,
                "kv_usage": 0.0,  # vllm:gpu_cache_usage_perc: TGI's names have no KV gauge
                "kv_capacity_tokens": 7281 * 16.0,
                "prompt_tokens": 5.0,
                "generation_tokens": 7.0,
                "requests_finished": 1.0,
                "ttft.count": 1.0,
                "itl.count": 6.0,
                "queue_time": None,  # vLLM V0 has none; the adapter's tgi_request_queue_duration is TGI's name
            }
        ]
    ),
    "vllm-triton-backend__triton-inference-server__vllm_backend__README__trimmed.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "vllm_model",  # Triton's label model=, not vLLM's model_name=
                "requests_waiting": None,  # the README's sample has no scheduler gauges
                "kv_usage": None,
                "prompt_tokens": 10.0,  # vllm:prompt_tokens_total
                "generation_tokens": 16.0,
                "requests_finished": None,  # the backend exports no request_success counter
                "ttft.count": 1.0,
                "itl.count": 15.0,  # vllm:time_per_output_token_seconds_count
                "e2e.count": 1.0,
            }
        ]
    ),
    "vllm-triton-backend-two-models__handwritten.txt": Page(
        [
            {
                "replica": "#llama3",  # one replica per Triton model, never their sum
                "engine": "vllm",
                "model": "llama3",
                "requests_waiting": 5.0,
                "requests_running": 14.0,
                "kv_usage": 0.72,  # vllm:gpu_cache_usage_perc of llama3, not the mean of both models
                "preemptions": 2.0,
                "prompt_tokens": 61200.0,
                "requests_finished": None,  # nv_inference_request_success is Triton's, not read for vLLM
                "ttft.count": 120.0,
            },
            {
                "replica": "#mistral",
                "model": "mistral",
                "requests_waiting": 0.0,
                "requests_running": 3.0,
                "kv_usage": 0.18,
                "generation_tokens": 9050.0,
                "ttft.count": 45.0,
            },
        ],
        gpus=2,  # nv_gpu_* of both GPUs still read
    ),
    # vLLM production-stack router: vllm:* names per backend `server`; not a replica summing its backends
    "vllm-production-stack-router__handwritten.txt": Page(error="production-stack router"),
    "ray-serve-vllm__DataDog__integrations-core__ray_vllm_metrics__trimmed.txt": Page(
        [
            {
                "engine": "vllm",  # ray_vllm:* read as vllm:* once the found prefix "ray_" is removed
                "model": "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8",
                "requests_waiting": 0.0,  # ray_vllm:num_requests_waiting
                "requests_running": 0.0,  # ray_vllm:num_requests_running
                "kv_usage": 5.882698982295764e-05,  # ray_vllm:gpu_cache_usage_perc
                "kv_capacity_tokens": None,  # no cache_config_info on this page
                "prefix_hits": None,  # only the gpu_prefix_cache_hit_rate gauge (-1), not counters
                "prompt_tokens": 58.0,  # ray_vllm:prompt_tokens_total
                "generation_tokens": 300.0,  # ray_vllm:generation_tokens_total
                "requests_finished": 1.0,  # ray_vllm:request_success_total
                "ttft.count": 1.0,  # ray_vllm:time_to_first_token_seconds_count
                "itl.count": 299.0,  # ray_vllm:time_per_output_token_seconds_count
            }
        ]
    ),
    "ray-serve-vllm-sanitised-two-replicas__handwritten.txt": Page(
        [
            {
                "replica": "#llm-app#LLMServer:qwen#a1b2,0f3c",  # ReplicaId, WorkerId: one replica each
                "engine": "vllm",  # ray_vllm_* read as vllm:* (prefix "ray_", namespace separator restored)
                "model": "Qwen/Qwen3-8B",
                "requests_waiting": 5.0,  # ray_vllm_num_requests_waiting of this replica only
                "requests_running": 12.0,
                "kv_usage": 0.61,  # ray_vllm_kv_cache_usage_perc
                "kv_capacity_tokens": 2000 * 16.0,  # its ray_vllm_cache_config_info
                "prefix_queries": 90000.0,
                "prefix_hits": 30000.0,
                "requests_finished": 310.0,
            },
            {
                "replica": "#llm-app#LLMServer:qwen#c3d4,9e8d",
                "requests_waiting": 0.0,  # not 5: the other replica's queue is its own
                "requests_running": 3.0,
                "kv_usage": 0.12,
                "prompt_tokens": 50000.0,
                "generation_tokens": 20000.0,
            },
        ]
    ),
    "ray-serve-sglang-ray-actors__handwritten.txt": Page(
        [
            {
                "replica": "",  # one Serve replica: the scheduler actor (WorkerId 5be1) is not a replica of its own
                "engine": "sglang",  # ray_sglang_* read as sglang:* (prefix "ray_", namespace separator restored)
                "model": "Qwen/Qwen3-8B",
                "requests_waiting": 6.0,  # ray_sglang_num_queue_reqs, from the scheduler actor (ReplicaId="")
                "requests_running": 18.0,
                "kv_usage": 0.83,
                "kv_capacity_tokens": 285000.0,  # ray_sglang_max_total_num_tokens
                "preemptions": 2.0,
                "prompt_tokens": 740000.0,  # ray_sglang_prompt_tokens_total, from the replica's actor (WorkerId a03f)
                "prefix_hits": 296000.0,  # ray_sglang_cached_tokens_total{cache_source="device"}
                "requests_finished": 1650.0,
                "ttft.count": 1650.0,
            }
        ]
    ),
    "dynamo-frontend-nim-prefix__handwritten.txt": Page(
        [
            {
                "engine": "dynamo",  # nv_llm_http_service_*: Dynamo's frontend names under NIM's prefix
                "model": "meta/llama-3.1-8b-instruct",
                "requests_waiting": 7.0,  # nv_llm_http_service_queued_requests
                "requests_running": 24.0,  # inflight_requests 31 - queued 7
                "kv_capacity_tokens": 8000 * 64.0,  # model_total_kv_blocks x model_kv_cache_block_size
                "prompt_tokens": 900000.0,  # input_sequence_tokens_sum
                "generation_tokens": 160000.0,  # output_tokens_total
                "requests_finished": 800.0,  # requests_total
                "ttft.count": 800.0,
                "itl.count": 160000.0,
                "e2e.count": 800.0,
            }
        ]
    ),
    "vllm-sanitised-names__handwritten.txt": Page(
        [
            {
                "engine": "vllm",  # vllm_* is vLLM's vllm:* with the namespace sanitised, not NIM's bare names
                "model": "Qwen/Qwen3-8B",
                "requests_waiting": 2.0,  # vllm_num_requests_waiting
                "requests_running": 6.0,
                "kv_usage": 0.37,
                "kv_capacity_tokens": 4096 * 16.0,  # vllm_cache_config_info
                "prefix_queries": 52000.0,
                "prefix_hits": 13000.0,
                "requests_finished": 150.0,  # vllm_request_success_total, stop + length
                "ttft.count": 150.0,
            }
        ]
    ),
    "nim__DataDog__integrations-core__nim_metrics.txt": Page(
        [
            {
                "engine": "nim",
                "model": "meta/llama-3.1-8b-instruct",  # model_name label
                "requests_waiting": 0.0,  # num_requests_waiting
                "requests_running": 1.0,  # num_requests_running
                "kv_usage": 0.0002848191398461977,  # gpu_cache_usage_perc
                "kv_capacity_tokens": None,  # NIM exports no cache config
                "prompt_tokens": 109.0,  # prompt_tokens_total
                "generation_tokens": 174.0,  # generation_tokens_total
                "requests_finished": 5.0,  # request_finish_total{finished_reason="length"}
                "ttft.count": 5.0,  # time_to_first_token_seconds_count
                "itl.count": 169.0,  # time_per_output_token_seconds_count
                "e2e.count": 5.0,  # e2e_request_latency_seconds_count
            }
        ]
    ),
    "sglang__DataDog__integrations-core__sglang_metrics.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "facebook/opt-125m",
                "requests_waiting": 0.0,  # sglang:num_queue_reqs
                "requests_running": 0.0,  # sglang:num_running_reqs
                "kv_usage": 0.25,  # sglang:token_usage
                "kv_capacity_tokens": 430839.0,  # sglang:max_total_num_tokens
                "prefix_queries": 5.0,  # sglang:prompt_tokens_total
                "prefix_hits": 1.0,  # sglang:cached_tokens_total
                "generation_tokens": 32.0,  # sglang:generation_tokens_total
                "requests_finished": 1.0,  # sglang:num_requests_total
                "itl.count": 31.0,  # sglang:inter_token_latency_seconds_count
            }
        ]
    ),
    "sglang-2024__sgl-project__sglang__production_metrics__trimmed.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "google/gemma-2-9b-it",  # label name=, not model_name=
                "requests_waiting": 0.0,  # sglang:num_requests_waiting (queue_req says the same)
                "requests_running": 0.0,  # sglang:num_requests_running
                "kv_usage": 0.01,  # sglang:token_usage
                "kv_capacity_tokens": 161721.0,  # sglang:max_total_num_tokens
                "prefix_queries": None,  # no cached-token counter: no lookups counted either
                "prefix_hits": None,  # cached_token and cache_hit_rate (10.61) are gauges
                "prompt_tokens": 506780.0,  # sglang:prompt_tokens_total
                "generation_tokens": 424549.0,  # sglang:generation_tokens_total
                "ttft.count": 2124.0,  # sglang:time_to_first_token_seconds_count
                "queue_time.count": 2104.0,  # sglang:waiting_request_latency_seconds_count
                "queue_time.sum": 24885.007263183594,  # sglang:waiting_request_latency_seconds_sum
            }
        ]
    ),
    "sglang-v04__sgl-project__sglang__production_metrics.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "requests_waiting": 2826.0,  # sglang:num_queue_reqs
                "requests_running": 162.0,  # sglang:num_running_reqs
                "kv_usage": 0.28,  # sglang:token_usage
                "kv_capacity_tokens": None,  # no max_total_num_tokens on this page (num_used_tokens alone)
                "prefix_queries": None,  # cache_hit_rate is a gauge; no cached_tokens counter
                "prefix_hits": None,
                "prompt_tokens": 8128902.0,  # sglang:prompt_tokens_total 8.128902e+06
                "generation_tokens": 7557572.0,
                "requests_finished": None,  # no num_requests_total in this release
                "ttft.count": 11008.0,
                "itl.count": 7400757.0,  # time_per_output_token_seconds_count, not func_latency's 14007
                "e2e.count": 11228.0,
                "queue_time": None,
            }
        ]
    ),
    "sglang-pd-prefill__handwritten.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "deepseek-ai/DeepSeek-V3",
                "role": "prefill",  # engine_type="prefill": a disaggregated prefill worker, not a pool of both
                "requests_waiting": 11.0,  # num_queue_reqs of TP rank 0 (rank 1 repeats it)
                "requests_running": 6.0,
                "kv_usage": 0.18,
                "kv_capacity_tokens": 420000.0,
                "prefix_queries": 9600000.0,  # prompt_tokens_total
                "prefix_hits": 4800000.0,  # cached_tokens_total
                "requests_finished": 3200.0,
                "ttft.count": 3200.0,
            }
        ]
    ),
    "sglang-pd-decode__sgl-project__sglang__metrics_collector__from-source.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "deepseek-ai/DeepSeek-V3",
                "role": "decode",  # engine_type="decode"
                # num_queue_reqs 2 + num_decode_prealloc_queue_reqs 37 (requests waiting for decode KV memory), of TP
                # rank 0 (rank 1 repeats them); not the 5 in the transfer queue, whose KV is allocated and arriving
                "requests_waiting": 39.0,
                "requests_running": 48.0,
                "kv_usage": 0.93,  # sglang:token_usage
                "kv_capacity_tokens": 600000.0,  # sglang:max_total_num_tokens
                "preemptions": 12.0,  # num_retracted_requests_total of TP rank 0
                "generation_tokens": 1900000.0,
                "requests_finished": 3100.0,  # sglang:num_requests_total
                "queue_time.count": 3100.0,
            }
        ]
    ),
    "sglang-priority__sgl-project__sglang__observability_metrics_collector__from-source.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "Qwen/Qwen3-32B",
                # the priority="" totals only, not those plus the shares of priority 0 and 10 (24 + 20 + 4, 9 + 9 + 0)
                "requests_waiting": 9.0,  # sglang:num_queue_reqs{priority=""}
                "requests_running": 24.0,  # sglang:num_running_reqs{priority=""}
                "kv_usage": 0.77,
                "kv_capacity_tokens": 400000.0,
                "preemptions": 3.0,
                # the tokenizer's series carry each request's priority and no total: summed
                "prompt_tokens": 1000000.0,  # 900000 (priority 0) + 100000 (priority 10)
                "prefix_hits": 400000.0,  # cached_tokens_total 380000 + 20000
                "generation_tokens": 300000.0,
                "requests_finished": 2000.0,  # num_requests_total 1800 + 200
                "ttft.count": 2000.0,
            }
        ]
    ),
    "tgi__DataDog__integrations-core__payload__partial.txt": Page(
        [
            {
                "engine": "tgi",
                "model": None,  # TGI's series carry no model label
                "requests_waiting": 0.0,  # tgi_queue_size
                "requests_running": 0.0,  # tgi_batch_current_size
                "prompt_tokens": 662.0,  # tgi_request_input_length_sum
                "requests_finished": 109.0,  # tgi_request_success
            }
        ]
    ),
    "tgi-3__huggingface__text-generation-inference__reference_metrics__from-source.txt": Page(
        [
            {
                "engine": "tgi",
                "model": None,  # TGI's series carry no model label
                "requests_waiting": 14.0,  # tgi_queue_size
                "requests_running": 32.0,  # tgi_batch_current_size
                "kv_capacity_tokens": 131072.0,  # tgi_batch_max_total_tokens
                "kv_usage": 0.75,  # tgi_batch_current_max_tokens 98,304 / 131,072
                "prompt_tokens": 5200 * 900.0,  # tgi_request_input_length_sum
                "generation_tokens": 5200 * 300.0,  # tgi_request_generated_tokens_sum
                "requests_finished": 5200.0,  # tgi_request_success (no _total in this exporter)
                "ttft": None,  # TGI exports no time to first token
                "itl.count": 5200.0,  # tgi_request_mean_time_per_token_duration_count
                "queue_time.sum": 1300.0,  # tgi_request_queue_duration_sum
            }
        ]
    ),
    "trtllm-triton__triton-inference-server__tensorrtllm_backend__README.txt": Page(
        [
            {
                "engine": "trtllm",
                "model": "tensorrt_llm",  # model label of the nv_trt_llm_* series
                "requests_waiting": 1.0,  # nv_trt_llm_request_metrics{request_type="waiting"}
                "requests_running": 0.0,  # request_type="active"
                "kv_usage": 0.4875,  # nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}
                "kv_capacity_tokens": 6239 * 64.0,  # kv_cache_block_type max x tokens_per
                "requests_finished": 0.0,  # nv_inference_request_success{model="tensorrt_llm"}
            }
        ]
    ),
    "trtllm-triton-no-waiting__triton-inference-server__tensorrtllm_backend__from-source.txt": Page(
        [
            {
                "engine": "trtllm",
                "model": "tensorrt_llm",
                # no request_type="waiting" before that category: unknown. nv_inference_pending_request_count 0 is
                # Triton's queue before the model's execute, which hands every request to the executor at once
                "requests_waiting": None,
                "requests_running": 16.0,  # request_type="active" (= "max" 16: the batch is full)
                "kv_usage": 3900 / 4000,  # no "fraction": used / max blocks
                "kv_capacity_tokens": 4000 * 64.0,  # max x tokens_per
                "prefix_hits": 150 * 64.0,  # reused blocks x tokens_per
                "prefix_queries": None,
                "requests_finished": 2300.0,  # nv_inference_request_success{model="tensorrt_llm"} only
            }
        ],
        gpus=1,  # nv_gpu_* of the one GPU
    ),
    "trtllm-pytorch__ai-dynamo__dynamo__docs_backends_trtllm_prometheus.txt": Page(
        [
            {
                "engine": "trtllm-pytorch",
                "model": "Qwen/Qwen3-0.6B",  # model_name label
                "requests_waiting": None,  # 1.1.0rc5 exports no queue gauge
                "kv_usage": None,
                "requests_finished": 155.0,  # trtllm_request_success_total: 150 stop + 5 length
                "ttft.count": 150.0,  # trtllm_time_to_first_token_seconds_count (no +Inf bucket on the page)
                "ttft.sum": 8.75,  # trtllm_time_to_first_token_seconds_sum
                "itl.count": 150.0,  # trtllm_time_per_output_token_seconds_count
                "e2e.count": 150.0,  # trtllm_e2e_request_latency_seconds_count
                "queue_time.sum": 32.1,  # trtllm_request_queue_time_seconds_sum
            }
        ]
    ),
    "trtllm-dynamo-colon-prefix__fy2462__dynamo__docs_backends_trtllm_prometheus.txt": Page(
        [
            {
                # older Dynamo's trtllm:<name> spelling of TensorRT-LLM's series
                "engine": "trtllm-pytorch",
                "model": "Qwen/Qwen3-0.6B",  # model_name label
                "requests_waiting": None,  # no queue gauge on the page
                "requests_running": None,
                "kv_usage": None,
                "requests_finished": None,  # no request_success_total on the page
                "ttft.count": 150.0,  # trtllm:time_to_first_token_seconds_count (no +Inf bucket on the page)
                "ttft.sum": 8.75,  # trtllm:time_to_first_token_seconds_sum
                "e2e": None,  # trtllm:request_latency_seconds: not a name TensorRT-LLM's collector defines
                "itl": None,
            }
        ]
    ),
    "trtllm-serve-1.1__NVIDIA__TensorRT-LLM__metrics_collector__from-source.txt": Page(
        [
            {
                # unprefixed request_success_total & co. with engine_type="pytorch": TensorRT-LLM's, not NIM's
                "engine": "trtllm-pytorch",
                "model": "Qwen/Qwen3-8B",  # model_name label
                "requests_waiting": None,  # no queue gauge before the iteration series
                "kv_usage": None,
                "requests_finished": 40.0,  # request_success_total: 38 stop + 2 length
                "ttft.count": 40.0,  # time_to_first_token_seconds_count
                "ttft.sum": 6.72,  # time_to_first_token_seconds_sum
                "itl.count": 40.0,  # time_per_output_token_seconds_count
                "itl.sum": 0.7775,
                "e2e.sum": 87.0,  # e2e_request_latency_seconds_sum
                "queue_time.sum": 1.6,  # request_queue_time_seconds_sum
            }
        ]
    ),
    "trtllm-serve__NVIDIA__TensorRT-LLM__metrics_collector__from-source.txt": Page(
        [
            {
                "engine": "trtllm-pytorch",
                "model": "nvidia/Llama-3.1-8B-Instruct-FP8",
                "requests_waiting": 6.0,  # trtllm_num_requests_waiting
                "requests_running": 24.0,  # trtllm_num_requests_running
                "kv_usage": 0.65,  # trtllm_kv_cache_utilization (11,700 of 18,000 blocks)
                "kv_capacity_tokens": 18000 * 32.0,  # kv_cache_max_blocks x kv_cache_tokens_per_block
                "prefix_hits": 4200 * 32.0,  # kv_cache_reused_blocks_total x 32 tokens
                "prefix_queries": (4200 + 5800) * 32.0,  # (reused + missed) blocks x 32 tokens
                "prompt_tokens": 610000.0,  # trtllm_prompt_tokens_total
                "generation_tokens": 240000.0,  # trtllm_generation_tokens_total
                "requests_finished": 1200.0,  # trtllm_request_success_total: 1180 stop + 20 length
                "ttft.count": 1200.0,
                "ttft.sum": 2985.6,
                "e2e.sum": 37410.0,
                "queue_time.sum": 48.0,
            }
        ]
    ),
    "vllm-v1-current-dp2__vllm-project__vllm__v1_metrics_loggers__from-source.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen3-32B",
                "requests_waiting": 6.0,  # num_requests_waiting, engine 0 (4) + engine 1 (2)
                "requests_running": 33.0,  # 18 + 15
                "kv_usage": 0.70,  # kv_cache_usage_perc, mean of 0.74 and 0.66 (no gpu_cache_usage_perc any more)
                "kv_capacity_tokens": 24576 * 16.0,  # num_gpu_blocks on each engine's sample is the total: counted once
                "prefix_queries": 900000.0,  # prefix_cache_queries_total, not external_prefix_cache_queries_total
                "prefix_hits": 360000.0,  # prefix_cache_hits_total, not the KV connector's 120,000
                "preemptions": 7.0,
                "prompt_tokens": 1000000.0,  # prompt_tokens_total (= the three prompt_tokens_by_source sums)
                "generation_tokens": 310000.0,
                "requests_finished": 2503.0,  # request_success_total, engines and finished_reason
                "ttft.count": 2503.0,
                "itl.count": 2000.0,  # inter_token_latency_seconds, not request_time_per_output_token_seconds
                "e2e.count": 2503.0,
                "queue_time.count": 2503.0,
            }
        ]
    ),
    # llm-d's inference scheduler (the Gateway API Inference Extension EPP): a router's averages, not a replica
    "llm-d-epp__gateway-api-inference-extension__guides_metrics__from-source.txt": Page(error="endpoint picker"),
    "dynamo-frontend-stage-requests__handwritten.txt": Page(
        [
            {
                "engine": "dynamo",
                "model": "qwen/qwen3-0.6b",
                # no queued_requests: stage_requests over preprocess 1 + route 2 + dispatch 4
                "requests_waiting": 7.0,
                "requests_running": 5.0,  # active_requests 12 - 7
                "kv_capacity_tokens": 12894 * 16.0,  # model_total_kv_blocks x model_kv_cache_block_size
                "generation_tokens": 105000.0,  # output_tokens_total
                "requests_finished": 420.0,  # requests_total: 418 success + 2 error
                "ttft.count": 420.0,
                "prompt_tokens": None,  # no input_sequence_tokens histogram on the page
            }
        ]
    ),
    "dynamo-frontend-two-models__handwritten.txt": Page(
        [
            {
                "replica": "#meta-llama/llama-3.1-8b-instruct",  # one replica per model label value
                "engine": "dynamo",
                "model": "meta-llama/llama-3.1-8b-instruct",
                "requests_waiting": 7.0,  # dynamo_frontend_queued_requests
                "requests_running": 24.0,  # inflight_requests 31 - queued 7
                "kv_capacity_tokens": 8000 * 64.0,  # model_total_kv_blocks x model_kv_cache_block_size
                "prompt_tokens": 900000.0,  # input_sequence_tokens_sum
                "generation_tokens": 160000.0,  # output_tokens_total
                "requests_finished": 800.0,  # requests_total, status success
                "ttft.count": 800.0,
            },
            {
                "replica": "#qwen/qwen3-0.6b",
                "engine": "dynamo",
                "model": "qwen/qwen3-0.6b",
                "requests_waiting": 2.0,  # queued_requests of this model only, not 2 + 7
                "requests_running": 8.0,  # inflight 10 - queued 2
                "kv_capacity_tokens": 20000 * 16.0,
                "requests_finished": 1203.0,  # 1200 success + 3 error
                "ttft.count": 1203.0,
            },
        ]
    ),
    "dynamo-frontend-cached-tokens__ai-dynamo__dynamo__prometheus_names__from-source.txt": Page(
        [
            {
                "replica": "#meta-llama/llama-3.3-70b-instruct",
                "requests_waiting": 9.0,  # dynamo_frontend_queued_requests
                "requests_running": 16.0,  # inflight 25 - queued 9
                "kv_capacity_tokens": 40000 * 32.0,  # model_total_kv_blocks x model_kv_cache_block_size
                "prefix_queries": None,  # its engine reports no cached tokens: no cached_tokens series, no 0 % rate
                "prefix_hits": None,
                "prompt_tokens": 716 * 3000.0,  # input_sequence_tokens_sum
                "requests_finished": 700.0,
            },
            {
                "replica": "#qwen/qwen3-32b",
                "engine": "dynamo",
                "model": "qwen/qwen3-32b",
                "requests_waiting": 3.0,
                "requests_running": 17.0,  # inflight 20 - queued 3
                "kv_capacity_tokens": 65536 * 16.0,
                # cached_tokens_sum over input_sequence_tokens_sum: every request past its first token reported
                # (cached_tokens_count 2,022 = input_sequence_tokens_count 2,022)
                "prefix_queries": 2022000.0,
                "prefix_hits": 1011000.0,
                "prompt_tokens": 2022000.0,
                "generation_tokens": 520000.0,  # output_tokens_total
                "requests_finished": 2005.0,  # requests_total: 2,000 success + 5 error
                "ttft.count": 2005.0,
            },
        ]
    ),
    "dynamo-worker-vllm-prefill__ai-dynamo__dynamo__prometheus_names__from-source.txt": Page(
        [
            {
                "engine": "vllm",  # the engine's own vllm:* series win over Dynamo's dynamo_component_*
                "model": "Qwen/Qwen3-32B",
                "role": "prefill",  # dynamo_component="prefill" on Dynamo's series
                "requests_waiting": 2.0,  # vllm:num_requests_waiting, not dynamo_component_inflight_requests
                "requests_running": 5.0,
                "kv_usage": 0.3,  # vllm:kv_cache_usage_perc (kvstats_gpu_cache_usage_percent says the same)
                "kv_capacity_tokens": 30000 * 16.0,  # cache_config_info
                "prefix_queries": 2000000.0,
                "prefix_hits": 1100000.0,
                "requests_finished": 900.0,  # vllm:request_success_total, 899 length + 1 abort
                "ttft.count": 900.0,
            }
        ]
    ),
    "dynamo-frontend__ai-dynamo__dynamo__docs_guides_metrics.txt": Page(
        [
            {
                "engine": "dynamo",
                "model": "qwen/qwen3-0.6b",
                "requests_waiting": 7.0,  # dynamo_frontend_queued_requests (the doc: 7 in the HTTP queue)
                "requests_running": 3.0,  # inflight 10 - queued 7: the backend's 3 concurrent requests
                "kv_usage": None,  # a frontend has no KV pool of its own
            }
        ]
    ),
    "llamacpp-with-kv__handwritten.txt": Page(
        [{"engine": "llamacpp", "requests_waiting": 1.0, "requests_running": 2.0, "kv_usage": 0.27}]
    ),
    "llamacpp-without-kv__handwritten.txt": Page(
        [{"engine": "llamacpp", "requests_running": 4.0, "kv_usage": None, "prompt_tokens": 88120.0}]
    ),
    "llamacpp-prompt-cache__handwritten.txt": Page(
        [
            {
                "engine": "llamacpp",
                "requests_waiting": 2.0,  # llamacpp:requests_deferred
                "requests_running": 3.0,  # llamacpp:requests_processing
                "kv_usage": None,  # no kv_cache_usage_ratio in current releases
                # prompt_tokens_total excludes cached tokens here: every prompt token is 41,200 + 123,600 cached
                "prompt_tokens": 164800.0,
                "prefix_queries": 164800.0,  # lookups in tokens, as vLLM's: every prompt token
                "prefix_hits": 123600.0,  # llamacpp:prompt_tokens_cached_total
                "generation_tokens": 20480.0,  # llamacpp:tokens_predicted_total
                "requests_finished": None,
            }
        ]
    ),
    # plain Triton (ONNX, graphdef): its one GPU (nv_gpu_*), no LLM replica summing eight unrelated models
    "triton-plain__DataDog__integrations-core__nvidia_triton_metrics__trimmed.txt": Page([], gpus=1),
    # Triton's TTFT histogram alone: not a replica whose every value is unknown, but an error that says why
    "triton-ttft-only__handwritten.txt": Page(error="Triton without an LLM backend"),
    "dcgm__DataDog__integrations-core__metrics.txt": Page([], gpus=3),
    "dcgm-mig-hostname__handwritten.txt": Page([], gpus=4),  # two H100s and two MIG instances of an A100
    "dcgm-virtual-gpus__handwritten.txt": Page([], gpus=2),  # two H100s, one written once per each of its two users
    "dcgm-pod-hostname__handwritten.txt": Page([], gpus=2),  # two H100s named by the exporter pod, not a node
    # dcgm-exporter 3.x on eight A800s, GPU 0 split in three 2g.20gb MIG instances (GPU_I_ID 3, 5, 6): seven whole
    # GPUs and three instances (the capture's unrenderable "ERROR - ..." samples: test_dcgm)
    "dcgm-a800-mig-prof__gpu-dcgm-exporter-blog__index-5731120479__trimmed.txt": Page(
        [],
        gpus=10,
        gpu_fields={
            "0/3": {
                "mig_profile": "2g.20gb",  # GPU_I_PROFILE
                "mig_instance": "3",  # GPU_I_ID
                "utilisation": None,  # no DCGM_FI_DEV_GPU_UTIL sample for a MIG instance on the page: unknown, not 0
                "memory_used_bytes": 10 * 2**20,  # DCGM_FI_DEV_FB_USED 10 MiB, the instance's own
                "memory_free_bytes": 19957 * 2**20,  # DCGM_FI_DEV_FB_FREE
                "temperature_c": 33.0,
                "power_w": 78.174,  # DCGM_FI_DEV_POWER_USAGE 78.174000 (the parent GPU's, repeated per instance)
                "last_xid": 0,
                "extra.gr_engine_active": 0.0,  # DCGM_FI_PROF_GR_ENGINE_ACTIVE
                "extra.sm_clock_mhz": 1410.0,
            },
            "0/6": {"power_w": 78.446, "memory_free_bytes": 19957 * 2**20},
            "1": {
                "mig_profile": None,
                "utilisation": 0.0,  # DCGM_FI_DEV_GPU_UTIL 0
                "memory_used_bytes": 2 * 2**20,
                "memory_free_bytes": 81226 * 2**20,
                "temperature_c": 27.0,
                "power_w": 55.942,
                "remapped_rows_uncorrectable": 0.0,
                "row_remap_failure": False,
                "extra.energy_mj": 187554325.0,  # DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION
                "extra.memory_temp_c": 25.0,
            },
            "7": {"temperature_c": 29.0, "power_w": 55.011, "extra.memory_temp_c": 28.0},
        },
    ),
    # dcgm-exporter 4.x (pci_bus_id label), one T4, driver 580.105.08, profiling fields on
    "dcgm-4x-t4__ai-conformance-evidence__index-52520954393__assembled.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {
                "node": "ip-10-200-3-41",  # Hostname (no discovered node for a saved page)
                "model_name": "Tesla T4",
                "utilisation": 0.0,
                "memory_used_bytes": 0.0,  # DCGM_FI_DEV_FB_USED 0
                "memory_free_bytes": 14912 * 2**20,  # DCGM_FI_DEV_FB_FREE
                "temperature_c": 24.0,
                "power_w": 14.512,
                "last_xid": None,  # no XID family on the page
                "extra.memory_reserved_mib": 447.0,  # DCGM_FI_DEV_FB_RESERVED
                "extra.dram_active": 0.000001,  # DCGM_FI_PROF_DRAM_ACTIVE
                "extra.energy_mj": 48287135.0,
            }
        },
    ),
    # a live llama-server page (current names): prompt_tokens_total excludes the cached tokens
    "llamacpp-live__rust-test-parse_snapshot__index-63153620028.txt": Page(
        [
            {
                "engine": "llamacpp",
                "requests_running": 3.0,  # llamacpp:requests_processing
                "requests_waiting": 0.0,  # llamacpp:requests_deferred
                "kv_usage": None,  # no kv_cache_usage_ratio
                "kv_capacity_tokens": None,  # n_tokens_max is the longest sequence seen, not the cache's size
                "prompt_tokens": 77454.0 + 129725.0,  # prompt_tokens_total + prompt_tokens_cached_total
                "prefix_queries": 77454.0 + 129725.0,
                "prefix_hits": 129725.0,  # llamacpp:prompt_tokens_cached_total
                "generation_tokens": 1426.0,  # llamacpp:tokens_predicted_total
                "requests_finished": None,
            }
        ]
    ),
    # another server writing llama-server's names (older HELP texts, with the KV pair) beside its own halogen:*
    "llamacpp-compatible-halogen__server-doc__index-70860439863.txt": Page(
        [
            {
                "engine": "llamacpp",
                "requests_running": 1.0,
                "requests_waiting": 0.0,
                "kv_usage": 0.864746,  # llamacpp:kv_cache_usage_ratio
                "prompt_tokens": 806600.0,  # no llamacpp:prompt_tokens_cached_total: halogen's own is not read
                "prefix_hits": None,
                "generation_tokens": 24920.0,
            }
        ]
    ),
    # LiteLLM's proxy: a gateway's request counters, no replica
    "litellm-proxy__DataDog__integrations-core__litellm_metrics_v1_95__trimmed.txt": Page(error="LiteLLM's proxy"),
    # a Ray node's own page without Ray Serve LLM: Ray's metrics, no replica
    "ray-node__DataDog__integrations-core__ray_worker__trimmed.txt": Page(error="Ray's own metrics"),
    # the first released SGLang metrics (v0.3.5, model in label name=): the excerpt published in the pull request
    "sglang-0.3.5__sgl-project__sglang__pull_1853__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "/shared/public/elr-models/meta-llama/Llama-3.2-3B/5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60/",
                "kv_capacity_tokens": 570979.0,  # sglang:max_total_num_tokens
                "prompt_tokens": 230794.0,
                "requests_running": None,  # cut from the excerpt
            }
        ]
    ),
    # vLLM's docs show iteration_tokens_total then "...": no field of a replica, so an error, not a replica of unknowns
    "vllm-docs-fragment__vllm-project__vllm__docs_source_serving_metrics__excerpt.txt": Page(error="vllm:"),
    # SGLang Model Gateway's /engine_metrics: its two workers' pages on one, each sample labelled worker_addr; two
    # replicas, not one summing both workers' queues
    "sglang-gateway-two-workers__sgl-project__sglang__sgl_router_worker_manager__from-source.txt": Page(
        [
            {
                "replica": "#grpc://127.0.0.1:8001",
                "engine": "sglang",  # sglang_* (the gateway's renderer writes sglang: as sglang_)
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "requests_waiting": 11.0,  # sglang_num_queue_reqs of this worker only
                "requests_running": 48.0,
                "kv_usage": 0.65,
                "kv_capacity_tokens": 310000.0,
                "prefix_queries": 1250000.0,
                "prefix_hits": 500000.0,  # sglang_cached_tokens_total
                "generation_tokens": 380000.0,
                "requests_finished": 2100.0,
            },
            {
                "replica": "#grpc://127.0.0.1:8002",
                "requests_waiting": 0.0,  # not 11: the other worker's queue is its own
                "requests_running": 9.0,
                "kv_usage": 0.12,  # not the mean 0.385
                "kv_capacity_tokens": 310000.0,  # not 620,000
                "requests_finished": 700.0,
            },
        ]
    ),
    "trtllm-pytorch-pytrtllm__NVIDIA__TensorRT-LLM__pull_5560__excerpt.txt": Page(
        [
            {
                "engine": "trtllm-pytorch",  # not nim: pytrtllm: is TensorRT-LLM's own namespace here
                "model": "deepseek-ai/DeepSeek-V3-0324",  # model_name label
                "requests_running": 1.0,  # pytrtllm:num_requests_running
                "requests_waiting": 0.0,  # pytrtllm:num_requests_waiting
                "prompt_tokens": 201121.0,  # pytrtllm:prompt_tokens_total
                "generation_tokens": 81896.0,  # pytrtllm:generation_tokens_total
                "requests_finished": 707.0,  # pytrtllm:request_completed_total (request_success_total cut off)
                "kv_usage": None,  # the PR exported no KV series
            }
        ]
    ),
    "vllm-0.28-grep__index-70407796777.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "qwen3.8-27b-local",  # model_name label
                "requests_running": 0.0,  # vllm:num_requests_running
                "requests_waiting": 0.0,  # vllm:num_requests_waiting (not plus the by-reason split of the same queue)
                "kv_usage": 0.0,  # vllm:kv_cache_usage_perc
                "kv_capacity_tokens": None,  # no cache_config_info in the grep
                "prefix_queries": 64929219.0,  # vllm:prefix_cache_queries_total 6.4929219e+07
                "prefix_hits": 44041600.0,  # vllm:prefix_cache_hits_total 4.40416e+07
                "preemptions": 0.0,  # vllm:num_preemptions_total
                "prompt_tokens": None,  # not in the grep
                "ttft": None,
            }
        ]
    ),
    "dcgm-4x-vgpu-a100-8c__index-39331438774.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {
                "node": "vks-cluster-0-0-np1-worker-xtxww-xw4wp-wn7j2",  # Hostname
                "model_name": "GRID A100-8C",  # modelName: a vGPU profile
                "utilisation": 0.0,  # DCGM_FI_DEV_GPU_UTIL
                "memory_used_bytes": 0.0,  # DCGM_FI_DEV_FB_USED 0
                "memory_free_bytes": 7531 * 2**20,  # DCGM_FI_DEV_FB_FREE 7531 MiB
                "temperature_c": None,  # no GPU_TEMP on a vGPU page: unknown, not 0
                "power_w": None,  # no POWER_USAGE either
                "last_xid": 0,  # DCGM_FI_DEV_XID_ERRORS 0
                "extra.sm_clock_mhz": 1410.0,
                "extra.memory_temp_c": 0.0,  # DCGM_FI_DEV_MEMORY_TEMP 0, as the page says
            }
        },
    ),
    "sglang-nemotron-pid__index-54577339046__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",  # model_name label
                "requests_running": 2.0,  # sglang:num_running_reqs
                "requests_waiting": 1.0,  # sglang:num_queue_reqs
                "requests_finished": 579.0,  # sglang:num_requests_total
                "kv_usage": None,  # no token_usage in the fragment
            }
        ]
    ),
    "trtllm-serve-undefined-labels__vllm-project__aibrix__issue_2004__excerpt.txt": Page(
        [
            {
                "engine": "trtllm-pytorch",  # unprefixed TensorRT-LLM series, told apart by the engine_type label
                "model": None,  # model_name="undefined" is trtllm-serve's placeholder, not a model
                "e2e": None,  # three buckets and a sum, no +Inf nor _count: not a histogram to read
                "requests_finished": None,
            }
        ]
    ),
    "dynamo-frontend-aiperf__index-38217043958.txt": Page(
        [
            {
                "engine": "dynamo",
                "model": "qwen/qwen3-0.6b",  # model label
                # no dynamo_frontend_queued_requests on this page, but nothing is in flight (inflight 0) and the
                # queue is a subset of in flight (Dynamo's metrics.rs): nothing queued, nothing running
                "requests_waiting": 0.0,
                "requests_running": 0.0,
                "prompt_tokens": 18408629.0,  # dynamo_frontend_input_sequence_tokens_sum
                "itl.count": 16637145.0,  # dynamo_frontend_inter_token_latency_seconds_count
                "itl.sum": 813545.702521758,
                # dynamo_frontend_request_success_count counts successes only, under a name Dynamo's
                # prometheus_names.rs does not write: not read as every finished request
                "requests_finished": None,
                "generation_tokens": None,  # no output_tokens_total
            }
        ]
    ),
    # -- session 14: pages from stacks and versions not read before ------------------------------------------------
    "vllm-0.10-glm45__vllm-project__production-stack__issue_617__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "zai-org/GLM-4.5",  # model_name label, engine="0"
                "kv_usage": 9.75010481363281e-06,  # vllm:kv_cache_usage_perc
                "prefix_queries": 32.0,  # vllm:prefix_cache_queries_total
                # the deprecated vllm:gpu_prefix_cache_hits_total (tokens, like the new name in 0.10; the new
                # prefix_cache_hits_total is cut off the excerpt), not its _created timestamp gauge
                "prefix_hits": 0.0,
                "requests_running": None,  # not in the excerpt
                "kv_capacity_tokens": None,
            }
        ]
    ),
    "vllm-v1-0.8__vllm-project__production-stack__issue_318__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen2.5-Coder-32B-Instruct",
                "requests_running": 0.0,  # vllm:num_requests_running
                "requests_waiting": 0.0,
                "kv_usage": 0.0,  # vllm:gpu_cache_usage_perc, the only KV gauge of early V1
                "prefix_queries": None,  # gpu_prefix_cache_queries_total declared, its sample cut off the excerpt
            }
        ]
    ),
    "vllm-aura-by-reason__index-57981567209.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "aura-llm",
                "requests_running": 24.0,
                "requests_waiting": 72.0,  # num_requests_waiting, not plus its split by reason (capacity 72)
                "kv_usage": 0.0,
            }
        ]
    ),
    "vllm-v1-no-labels__index-52461312685__numbering-removed.txt": Page(
        [
            {
                "engine": "vllm",
                "model": None,  # no label at all on the page
                "prefix_queries": 413.0,
                "prefix_hits": 96.0,
                "prompt_tokens": 413.0,
                "generation_tokens": 10752.0,
                "requests_finished": None,  # no request_success_total
                # _count and _sum without buckets: the count and mean are known, every quantile is not
                "ttft.count": 21.0,
                "ttft.sum": 0.5709736347198486,
                "ttft.bounds": (float("inf"),),
                "itl.count": 10731.0,  # inter_token_latency_seconds, not request_time_per_output_token_seconds' 21
                "e2e.sum": 63.41587209701538,
                "queue_time": None,
            }
        ]
    ),
    "vllm-tgis-ibm__IBM__vllm__pull_18__excerpt.txt": Page(
        [
            {
                "engine": "tgi",  # the excerpt holds only the fork's TGIS-compatible tgi_* series
                "model": None,
                "requests_waiting": 0.0,  # tgi_queue_size
                "requests_running": 0.0,  # tgi_batch_current_size
                "kv_usage": None,
            }
        ]
    ),
    "sglang-0.5.1-tp-pp__sgl-project__sglang__issue_13485__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "Qwen-32B",
                "requests_running": 1.0,  # sglang:num_running_reqs, tp_rank 0
                "kv_usage": 0.0,  # sglang:token_usage (num_used_tokens 1 of a large pool)
                "requests_waiting": None,  # cut off before num_queue_reqs
                "kv_capacity_tokens": None,
            }
        ]
    ),
    "sglang-deepseek-r1-counters__sgl-project__sglang__pull_7944__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "/home/moyun.zty/models/deepseek-ai__DeepSeek-R1",
                "requests_running": 0.0,
                "kv_usage": 0.0,
                "requests_finished": 217.0,  # sglang:num_requests_total (its 157 aborted ones among them)
                "prefix_hits": 2688.0,  # sglang:cached_tokens_total
                "prefix_queries": None,  # no prompt_tokens_total in the excerpt
            }
        ]
    ),
    "sglang-dp8-pid__vllm-project__aibrix__issue_1614__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "deepseek-r1",
                "requests_waiting": 0.0,  # num_queue_reqs of the two DP ranks the excerpt shows, summed
                "requests_running": None,  # not in the excerpt; gen_throughput and the pid-labelled gauges are not read
                "kv_usage": None,
            }
        ]
    ),
    "llamacpp-ik-fork__ikawrakow__ik_llama.cpp__pull_695__excerpt.txt": Page(
        [
            {
                "engine": "llamacpp",
                "prompt_tokens": 6886.0,  # llamacpp:prompt_tokens_total
                "generation_tokens": 3469.0,  # llamacpp:tokens_predicted_total
                "requests_running": None,
                "kv_usage": None,
            }
        ]
    ),
    "llamacpp-vulkan-2025__ggml-org__llama.cpp__pull_13196__excerpt.txt": Page(
        [
            {
                "engine": "llamacpp",
                "prompt_tokens": 143.0,
                "generation_tokens": 673.0,
                "kv_usage": None,  # removed from llama-server in mid-2025 (the commenter's question)
            }
        ]
    ),
    "dcgm-4x-rtx4000ada-pod__linode__lke-ai-conformance__index-16996232183.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {
                "node": "lke529760-766837-0a634ab30000",  # Hostname (the GPU Operator sets it to the node)
                "model_name": "NVIDIA RTX 4000 Ada Generation",
                "pod": "cuda-75454ffb9f-8ljq7",  # the pod using the GPU; pod_uid="" left aside
                "namespace": "default",
                "container": "cuda",
                "utilisation": 0.0,  # DCGM_FI_DEV_GPU_UTIL
                "memory_used_bytes": 1 * 2**20,  # FB_USED 1 MiB
                "memory_free_bytes": 20015 * 2**20,
                "temperature_c": 48.0,
                "power_w": 40.979,
                "last_xid": 0,  # XID_ERRORS 0 (err_msg "No Error")
                "sm_active": None,  # no PROF_SM_ACTIVE on the page
                "extra.gr_engine_active": 0.004656,
                "extra.dram_active": 0.003074,
                "extra.memory_reserved_mib": 457.0,
            }
        },
    ),
    "jetstream__AI-Hypercomputer__JetStream__pull_121__excerpt.txt": Page(
        error=r"1 family starting with `jetstream_`; no engine adapter"
    ),
    # MindIE: vLLM V0's unprefixed names (as NIM) beside its own npu_* and request_received/failed series
    "mindie-coordinator__index-53612400031.txt": Page(
        [
            {
                "engine": "mindie",  # not nim: npu_cache_usage_perc, request_received_total, request_failed_total...
                "model": "llama3-8b",
                "requests_running": 0.0,
                "requests_waiting": 0.0,
                "kv_usage": 1.0,  # npu_cache_usage_perc 1 ("1 means 100 percent usage")
                "kv_capacity_tokens": None,
                "prefix_queries": None,  # npu_prefix_cache_hit_rate is a ratio gauge, not counters
                "preemptions": 637.0,
                "prompt_tokens": 9564.0,
                "generation_tokens": 84425.0,
                "requests_finished": 2267.0,  # request_success_total 2267 + request_failed_total 0
                "ttft.count": 2523.0,  # no _sum on the page: the mean is unknown, the buckets are read
                "itl.count": 85800.0,  # time_per_output_token_seconds
                "e2e.sum": 12684.5319980979,
                "queue_time": None,
            }
        ]
    ),
    "mindie-server__gpustack__gpustack__issue_1785__excerpt.txt": Page(
        [
            {
                "engine": "mindie",  # request_received_total and request_failed_total are MindIE's own
                "model": "qwen2.5-0.5b-instruct-mindie",
                "requests_running": 0.0,
                "requests_waiting": None,  # cut off
                "prompt_tokens": 195.0,
                "generation_tokens": 578.0,
                "preemptions": 0.0,
                "requests_finished": 4.0,  # success 4 + failed 0
            }
        ]
    ),
    # Session 15: pages nobody had shown the adapters. vLLM-compatible servers under their own namespace read as vLLM
    # (before: as NIM, the namespace cut off), a sparse MindIE page as MindIE (before: NIM by two shared names)
    "lmdeploy__InternLM__lmdeploy__metrics_loggers__from-source.txt": Page(
        [
            {
                "engine": "vllm",  # lmdeploy:* are vLLM's names under LMDeploy's namespace
                "model": "internlm/internlm2_5-7b-chat",  # model_name
                "requests_running": 45.0,  # lmdeploy:num_requests_running
                # lmdeploy:num_requests_waiting 5 (in the engine) + num_api_requests_waiting 50 (held by the API
                # server for a free engine instance): both queued here
                "requests_waiting": 55.0,
                "kv_usage": 0.216,  # lmdeploy:gpu_cache_usage_perc
                "kv_capacity_tokens": None,  # no cache config on LMDeploy's page
                "prompt_tokens": 92370.0,
                "generation_tokens": 55126.0,
                "requests_finished": 1.0,  # request_success_total over finished_reason: FINISH 1
                "ttft.count": 46.0,
                "itl.count": 1196.0,  # iter_token_latency (per token), not time_per_output_token_seconds' 1 request
                "e2e.count": 1.0,
                "queue_time.count": 1.0,  # request_queue_time_seconds
                "prefix_queries": None,  # LMDeploy writes no prefix-cache counters
            }
        ]
    ),
    "fastdeploy__PaddlePaddle__FastDeploy__metrics__from-source.txt": Page(
        [
            {
                "engine": "vllm",  # fastdeploy:* are vLLM's names under FastDeploy's namespace
                "model": None,  # FastDeploy labels none of its series
                "requests_running": 64.0,
                "requests_waiting": 9.0,  # no num_requests_enqueued on this release's page
                "kv_usage": 0.8,  # gpu_cache_usage_perc
                "kv_capacity_tokens": None,  # max_gpu_block_num 8000 but no block size on the page
                "generation_tokens": 262144.0,
                "prompt_tokens": None,
                "requests_finished": 500.0,  # request_success_total
                "ttft.count": 564.0,
                "itl.count": 500.0,  # time_per_output_token_seconds
                "queue_time.count": 564.0,
                "prefix_queries": None,  # hit_token_rate is a ratio gauge, not counters
            }
        ]
    ),
    "aphrodite-engine__index-1001090545__comment-markers-removed.txt": Page(
        [
            {
                "engine": "vllm",  # aphrodite:* (Aphrodite, a vLLM fork): vLLM V0's names under its namespace
                "model": "./Models/llama3-8b-instruct-exl2-6.0bpw",
                "requests_running": 1.0,
                "requests_waiting": 0.0,  # num_requests_swapped 0 is not read (vLLM V0's is not either)
                "kv_usage": None,
            }
        ]
    ),
    "mindie-sparse-scheduler__handwritten.txt": Page(
        [
            {
                "engine": "mindie",  # npu_cache_usage_perc only MindIE reads; the two scheduler gauges NIM's too
                "model": "qwen2.5-7b-instruct",
                "requests_running": 3.0,
                "requests_waiting": 1.0,
                "kv_usage": 0.4,  # npu_cache_usage_perc (as NIM: unknown)
            }
        ]
    ),
    "sglang-0.4.4-queue__sgl-project__sglang__pull_4444__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "/shared/public/models/Meta-Llama-3-8B-Instruct",  # model_name
                "requests_running": 0.0,  # num_running_reqs
                "requests_waiting": None,  # num_queue_reqs cut off
                "kv_usage": 0.0,  # token_usage
                "role": None,  # engine_type="unified": neither prefill nor decode
            }
        ]
    ),
    "sglang-2024-wip__sgl-project__sglang__pull_1461__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "google/gemma-2-9b-it",  # label name=
                "requests_running": 0.0,  # num_requests_running
                "requests_waiting": 0.0,  # num_requests_waiting (queue_req 0 too)
                "kv_usage": 0.0,  # token_usage
                "prefix_queries": None,  # cache_hit_rate 87.6 is a percentage gauge, cached_token a gauge
                "prefix_hits": None,
            }
        ]
    ),
    "trtllm-serve-core-metrics__NVIDIA__TensorRT-LLM__pull_5785__excerpt.txt": Page(
        [
            {
                "engine": "trtllm-pytorch",  # unprefixed names with TensorRT-LLM's engine_type label
                "model": None,  # model_name="undefined"
                # time_to_first_token_seconds_count (its buckets up to +Inf as quoted); its _sum line is before the
                # excerpt starts, so the sum is unknown (NaN), not 0
                "ttft.count": 2.0,
                "itl": None,  # time_per_output_token_seconds declared, its samples cut off
            }
        ]
    ),
    "dynamo-worker-kvstats__ai-dynamo__dynamo__pull_2704__excerpt.txt": Page(
        [
            {
                "engine": "dynamo",  # dynamo_component_kvstats_* of a worker whose engine series are off
                "model": None,
                "kv_usage": 0.00007755545084364712,  # kvstats_gpu_cache_usage_percent: a fraction, 1 of 12894 blocks
                "kv_capacity_tokens": None,  # total_blocks 12894, but no block size on the page
                "requests_running": None,
                "requests_waiting": None,
            }
        ]
    ),
    "dynamo-frontend-mocker-config__volcano-sh__kthena__issue_913__excerpt.txt": Page(
        [
            {
                "engine": "dynamo",
                "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",  # model label of the config gauges
                "kv_capacity_tokens": None,  # block size 64, no model_total_kv_blocks in the excerpt
                "requests_waiting": None,  # cut before the request series: nothing known, not zero
                "requests_running": None,
            }
        ]
    ),
    "lmcache-server__LMCache__LMCache__pull_1318__excerpt.txt": Page(error="LMCache's own metrics server"),
    "lmcache-retrieve__LMCache__LMCache__issue_729__excerpt.txt": Page(error="LMCache's own metrics server"),
    # helper A2 (session 15): pages read by hand, each against kvpilot parse
    "llamacpp-json-quoted__ggml-org__llama.cpp__issue_17384__rebuilt.txt": Page(
        error="a JSON string holding exposition text.*llama-server from build 7010.*#17386"  # one quoted line
    ),
    "trtllm-serve-iteration-stats-json__NVIDIA__TensorRT-LLM__issue_6364__excerpt.txt": Page(
        error="the page is JSON.*/prometheus/metrics"  # iteration stats (kvCacheStats...), not Prometheus text
    ),
    "trtllm-serve-empty-json__vllm-project__aibrix__issue_2004__excerpt.txt": Page(error="the page is JSON"),  # []
    "vllm-v1-kv-usage-only__index-59184602152.txt": Page(
        [
            {
                "engine": "vllm",  # V1-only names: no gpu_cache_usage_perc beside kv_cache_usage_perc
                "model": "qwen2.5-1.5b-instruct",  # model_name
                "requests_running": 0.0,  # blank lines between families, integer values as written
                "requests_waiting": 0.0,
                "kv_usage": 0.0,  # kv_cache_usage_perc 0 (known, not unknown)
                "kv_capacity_tokens": None,  # no cache_config_info on the page
                "requests_finished": None,
            }
        ]
    ),
    "llamacpp-docker-model-runner__docker__model-runner__pull_78__excerpt.txt": Page(
        [
            {
                "engine": "llamacpp",
                "model": "ai/llama3.2",  # the model label Docker Model Runner adds to each runner's samples
                "requests_running": None,  # the excerpt stops before requests_processing: unknown, not 0
                "requests_waiting": None,
                "prompt_tokens": None,  # prompt_seconds_total 0.047 is time, not tokens
            }
        ]
    ),
    "gpustack-worker-two-instances__gpustack__gpustack__metrics_config__from-source.txt": Page(
        [
            {
                "replica": "#qwen3-8b-p4m9d",  # model_instance_name: each GPUStack instance is a server of its own
                "engine": "vllm",  # gpustack:* read as vLLM's names under GPUStack's namespace
                "model": "qwen3-8b",  # model_name (GPUStack's, written over the engine's)
                "requests_running": 3.0,
                "requests_waiting": 0.0,
                "kv_usage": 0.18,  # gpustack:kv_cache_usage_ratio (vLLM's kv_cache_usage_perc)
                "preemptions": 0.0,  # gpustack:request_preemptions_total
                "requests_finished": 920.0,  # request_success_total 905 stop + 15 length
                "ttft.count": 920.0,
                "itl.count": 149300.0,  # inter_token_latency_seconds, not time_per_output_token (920, per request)
            },
            {
                "replica": "#qwen3-8b-x7kq2",
                "requests_running": 12.0,  # not 15: the other instance's 3 are its own
                "requests_waiting": 4.0,
                "kv_usage": 0.71,
                "preemptions": 9.0,
                "prefix_queries": 600000.0,  # gpustack:prefix_cache_queries_total (tokens, as vLLM's)
                "prefix_hits": 240000.0,
                "prompt_tokens": 812000.0,
                "generation_tokens": 203000.0,
                "requests_finished": 1200.0,
                "ttft.sum": 410.0,
                "itl.count": 201800.0,
            },
        ]
    ),
    "sglang-grpc-sidecar-sanitised__smg-project__smg__pull_813__excerpt.txt": Page(
        # SGLang's names sanitised (sglang_), but only families kvpilot maps to nothing (cuda-graph passes, the
        # prefill prealloc queue of a unified engine, the hit-rate gauge, realtime tokens): an error naming the stem
        error="4 families starting with `sglang_`"
    ),
    "dcgm-4x-mixed-models-mig__NVIDIA__dcgm-exporter__pull_736__excerpt.txt": Page(
        [],
        gpus=2,
        gpu_fields={
            "1": {
                "node": "dcgm-exporter-wwwjh",  # lowercase hostname label
                "model_name": "NVIDIA RTX 2000 Ada Generation",
                "memory_free_bytes": 11275 * 2**20,  # DCGM_FI_DEV_FB_FREE 11275 MiB
                "utilisation": None,  # no GPU_UTIL on the excerpt (DEC/ENC_UTIL are the video engines): unknown, not 0
                "mig_profile": None,
            },
            "2/3": {  # an A30 MIG instance (GPU_I_ID 3) beside a whole GPU on one node
                "model_name": "NVIDIA A30",
                "mig_profile": "1g.6gb",
                "pod": "triton-server-f7cb5d77-95xcf",
                "namespace": "default",
                "container": "triton-server",
                "memory_free_bytes": 2207 * 2**20,
            },
        },
    ),
    "dcgm-h100-mig-driver-label__NVIDIA__dcgm-exporter__issue_512__excerpt.txt": Page(
        [],
        gpus=3,
        gpu_fields={
            "0/7": {
                "node": "gsrh100-074",  # Hostname
                "mig_profile": "1g.10gb",
                "pod": "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl",
                "extra.gr_engine_active": 0.0,  # DCGM_FI_PROF_GR_ENGINE_ACTIVE 0.000000
                "memory_free_bytes": None,  # the issue: FB_* missing for GPU instances; unknown, not 0
            },
            "0/8": {"pod": None, "mig_instance": "8"},  # an instance no pod holds
            "0/9": {"pod": "tts-predictor-00011-deployment-5554f75554-8j8pl"},
        },
    ),
    "dcgm-lowercase-names-mig__NVIDIA__dcgm-exporter__issue_272__excerpt.txt": Page(
        error="`dcgm_`: DCGM fields named in lower case"  # no GPU read from dcgm_fi_*: said, not an empty page
    ),
    "vllm-stats-disabled-no-samples__MeetKai__functionary__pull_263__excerpt.txt": Page(
        [
            {
                "engine": "vllm",  # HELP/TYPE lines of vLLM V0's scheduler and cache gauges, no sample at all
                "model": None,
                "requests_running": None,  # unknown, not 0: the page has no value
                "requests_waiting": None,
                "kv_usage": None,
            }
        ]
    ),
    "kserve-model-server__kserve__kserve__qpext_main_test.txt": Page(
        error="KServe's model server"  # request_{pre,post}process/predict_seconds only: no LLM engine's series
    ),
    "triton-trtllm-ensemble-no-backend-metrics__triton-inference-server__tensorrtllm_backend__issue_49__excerpt.txt": (
        Page(error="no nv_trt_llm_\\* series")  # nv_inference_* of the ensemble only: no queue, KV or token series
    ),
    # session 16, helper A: stacks and versions not shown before
    # AMD's device-metrics-exporter (session 17, helper A: read, not only named; collector/gpus/amd.py)
    "amd-dme-mi300x-vf__ROCm__device-metrics-exporter__issue_171__excerpt.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {  # gpu_id="0", hostname="master-1", card_series "Aqua Vanjaram [Instinct MI300X VF]"
                "node": "master-1",
                "uuid": "17ff74b5-0000-1000-805c-37b0fbe69430",  # gpu_uuid
                "model_name": "Aqua Vanjaram [Instinct MI300X VF]",
                "temperature_c": None,  # gpu_edge_temperature 0: an MI3xx has no edge sensor, no reading
                "extra.edge_temp_c": None,
                "utilisation": None,  # no gpu_gfx_activity on the excerpt
                "mig_instance": None,  # spx: not partitioned
            }
        },
    ),
    "amd-dme-ryzen-ai-max-395__ROCm__device-metrics-exporter__issue_353__excerpt.txt": Page(
        [],
        gpus=1,  # gpu_average_package_power 0 of an AMD AI 395+ iGPU ("Power & temp metrics don't appear")
        gpu_fields={"0": {"node": "18ab41be1b15", "power_w": None, "model_name": None}},  # 0 W is no reading
    ),
    "amd-dme-radeon-no-card-model__ROCm__device-metrics-exporter__issue_259__excerpt.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {
                "node": "cb76105c40d0",  # hostname label (a container's id: the exporter ran in docker)
                "memory_used_bytes": 26.0 * 2**20,  # gpu_used_vram 26 (MB, read as MiB)
                "memory_free_bytes": None,  # gpu_free_vram is on the page's other part (the next row)
                "utilisation": None,
                "mig_instance": None,  # gpu_partition_id="NA", partition types none
            }
        },
    ),
    "amd-dme-radeon-free-vram__ROCm__device-metrics-exporter__issue_259__excerpt.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {
                "node": "cb76105c40d0",
                "memory_free_bytes": 24534.0 * 2**20,  # gpu_free_vram 24534
                "memory_used_bytes": None,  # gpu_used_vram is on the other part (26: 24,560 MiB in all)
                "utilisation": None,  # gpu_gfx_activity's HELP/TYPE only: its sample is cut from the excerpt
                "extra.energy_uj": 0.0,  # gpu_energy_consumed 0
            }
        },
    ),
    "amd-dme-mi300x-gfx-grep__ROCm__device-metrics-exporter__pull_236__excerpt.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {  # one grep'd gpu_gfx_activity line of an MI300X OAM, no comment lines
                "utilisation": 0.0,
                "node": "smc300x-clt-r4c3-18",
                "model_name": "AMD Instinct MI300X OAM",  # card_series, not card_model's part number
                "uuid": "a8ff74a1-0000-1000-807e-843c9b9a1d73",
            }
        },
    ),
    "amd-dme-mi300x-cpx-pods__silogen__kaiwo__metrics-watcher-comment__excerpt.txt": Page(
        [],
        gpus=3,
        gpu_fields={
            "2": {"node": "tw038", "utilisation": 0.0, "pod": None, "mig_profile": None},  # spx, no workload
            "47": {  # a CPX partition: gpu_id 47 of node tw009, gpu_partition_id 0, nps4
                "node": "tw009",
                "utilisation": 0.0,
                "mig_profile": "cpx/nps4",
                "mig_instance": "0",
                "uuid": "c3ff74a1-0000-0000-80ff-88426fc31c9e",
            },
            "0": {  # gpu_gfx_activity 100 for the workload the exporter maps to it
                "node": "tw038",
                "utilisation": 1.0,
                "pod": "high-utilization-57ls6",
                "namespace": "default",
                "container": "workload",
            },
        },
    ),
    "amd-dme-mi300x-amd-prefix-ecc-health__handwritten.txt": Page(
        [],
        gpus=2,
        gpu_fields={
            "0": {
                "node": "mi300x-node-1",
                "pod": "vllm-llama-0",
                "utilisation": 0.97,  # amd_gpu_gfx_activity 97
                "memory_used_bytes": 180121.0 * 2**20,  # amd_gpu_used_vram
                "memory_free_bytes": 16471.0 * 2**20,  # amd_gpu_free_vram
                "temperature_c": 48.0,  # amd_gpu_junction_temperature
                "extra.junction_temp_c": 48.0,
                "extra.edge_temp_c": None,
                "extra.memory_temp_c": 41.0,
                "power_w": 611.0,  # amd_gpu_power_usage (before amd_gpu_package_power 612)
                "ecc_dbe_volatile": 0.0,
                "extra.amd_health": 1.0,
            },
            "1": {
                "pod": None,  # pod="" written: no workload
                "temperature_c": None,  # junction 4294967295: amd-smi's "not available"; memory temp 0
                "extra.memory_temp_c": None,
                "power_w": 702.0,  # amd_gpu_power_usage 65535 (a leaked sentinel): amd_gpu_package_power
                "ecc_dbe_volatile": 2.0,  # amd_gpu_ecc_uncorrect_total
                "extra.ecc_uncorrectable_xgmi": 2.0,
                "extra.ecc_correctable": 12.0,
                "extra.amd_health": 0.0,  # amd_gpu_health 0: the exporter's own "unhealthy"
                "utilisation": 0.0,
            },
        },
    ),
    "amd-smi-exporter-two-mi210__handwritten.txt": Page(
        [],
        gpus=2,
        gpu_fields={
            "0": {  # each series labelled by the GPU index under its own name (gpu_use_percent="0"...)
                "model_name": "AMD Instinct MI210",  # productname
                "utilisation": 0.0,  # amd_gpu_use_percent 0
                "temperature_c": 44.0,  # amd_gpu_current_temperature 44000 millidegrees (edge)
                "power_w": 42.0,  # amd_gpu_power 4.2e+07 microwatts
                "extra.power_cap_w": 300.0,
            },
            "1": {"utilisation": 0.88, "temperature_c": 51.0, "power_w": None},  # amd_gpu_power 0: no reading
        },
    ),
    "scalellm__vectorch-ai__ScaleLLM__pull_210__excerpt.txt": Page(
        # ScaleLLM's own names; its bare prompt_tokens_total is NIM's and MindIE's name too, yet no adapter reads it
        # as theirs (it identifies neither): an error naming ScaleLLM
        error="ScaleLLM's server"
    ),
    "sgl-router-2025-05__sgl-project__sglang__pull_6537__excerpt.txt": Page(
        error="SGLang's router"  # sgl_router_running_requests by worker: its workers' figures
    ),
    "llm-d-inference-sim__volcano-sh__kthena__issue_1129__excerpt.txt": Page(
        [
            {
                "engine": "vllm",  # llm-d's inference simulator writes vLLM's names
                "model": "kthena-mock-test",
                "requests_running": 0.0,
                "requests_waiting": 0.0,
                "prefix_hits": 8.0,  # vllm:prefix_cache_hits, a counter written without _total
                "prefix_queries": None,  # its HELP line only: the excerpt is cut there
                "kv_usage": None,  # not on the page
                "generation_tokens": None,  # max_num_generation_tokens is a per-request histogram, not a count
            }
        ]
    ),
    "triton-20.03-gpu-only__triton-inference-server__server__issue_2755__excerpt.txt": Page(
        [],  # Triton 20.03: nv_inference_* HELP/TYPE only, no model served; its one GPU is read
        gpus=1,
        gpu_fields={"GPU-d4d0dbb0-037e-652e-6df4-a742b597738c": {"utilisation": 0.12}},  # nv_gpu_utilization 0.120000
    ),
    "triton-25.10-failure-reasons__triton-inference-server__server__issue_8561__excerpt.txt": Page(
        error="Triton without an LLM backend"  # resnet_50 on TensorRT, failures by reason: no LLM replica
    ),
    "triton-2021-cache-metrics__triton-inference-server__server__pull_3569__excerpt.txt": Page(
        error="Triton without an LLM backend"  # simple_* models, values written 40.000000: no LLM replica
    ),
    "vllm-0.2-aioprometheus__vllm-project__vllm__pull_1890__excerpt.txt": Page(
        # vLLM's first metrics (aioprometheus, Dec 2023): HTTP counters, and the throughput gauge's HELP/TYPE with
        # its sample cut from the excerpt: nothing kvpilot reads, an error
        error="no engine adapter"
    ),
    "ray-serve-llm-2.52-sanitised-grep__vllm-project__vllm__pull_24267__excerpt.txt": Page(
        # one grep'd ray_vllm_time_to_first_token_seconds_count line, no TYPE line: vLLM's names behind Ray's prefix,
        # none read; was "Ray's own metrics; Ray Serve LLM pages carry ray_vllm_*", which this page does
        error="vllm's names behind the prefix `ray_`"
    ),
    # session 19, helper A: real pages of stacks and releases not shown before (issue 12)
    "trtllm-triton-draft-target__triton-inference-server__tensorrtllm_backend__issue_416__excerpt.txt": Page(
        # two TensorRT-LLM models on one Triton (speculative decoding's target and draft), inflight-batcher gauges
        # only: one replica per model, never one (was: the target alone, the draft's series dropped)
        [
            {
                "replica": "#tensorrt_llm_draft",
                "engine": "trtllm",
                "model": "tensorrt_llm_draft",
                "requests_running": None,  # generation_requests 0 counts the last iteration's batch, not active
                "requests_waiting": None,  # no request_type="waiting" on the excerpt
                "kv_usage": None,
            },
            {
                "replica": "#tensorrt_llm_target",
                "model": "tensorrt_llm_target",
                "requests_running": None,  # generation_requests 64: unknown, not read as active requests
                "requests_finished": None,
            },
        ]
    ),
    "triton-trtllm-ensemble-bls__triton-inference-server__tensorrtllm_backend__issue_667__excerpt.txt": Page(
        # nv_inference_* of ensemble, pre/postprocessing, tensorrt_llm and tensorrt_llm_bls (exec count 232), cut
        # before any nv_trt_llm_* series: said as TensorRT-LLM's models without their series (was "Triton without an
        # LLM backend")
        error="Triton serving TensorRT-LLM's models \\(`tensorrt_llm`, `tensorrt_llm_bls`\\) but no nv_trt_llm_\\*"
    ),
    "dcgm-v100-four-gpus__NVIDIA__dcgm-exporter__issue_250__excerpt.txt": Page(
        [],
        gpus=4,  # four V100s on host r6i3n0 (PCIE_REPLAY_COUNTER of gpu 0-3)
        gpu_fields={
            "0": {
                "node": "r6i3n0",  # Hostname
                "model_name": "Tesla V100-SXM2-32GB",
                "uuid": "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd",
                "utilisation": 0.0,  # DCGM_FI_DEV_GPU_UTIL 0
                "pcie_replay": 0.0,
                "memory_free_bytes": None,  # no FB_* on the excerpt: unknown, not 0
                "temperature_c": None,
            },
            "3": {"utilisation": None, "pcie_replay": 0.0},  # its GPU_UTIL line is past the excerpt's end
        },
    ),
    "dcgm-l40s-prof-grep__NVIDIA__DCGM__issue_226__excerpt.txt": Page(
        [],
        gpus=3,  # three complete GR_ENGINE_ACTIVE lines of four L40S (the fourth cut)
        gpu_fields={
            "0": {
                "node": "l40s.example.com",
                "model_name": "NVIDIA L40S",
                "pod": "tensorflow-0",
                "namespace": "redacted",
                "extra.gr_engine_active": 0.0,  # DCGM_FI_PROF_GR_ENGINE_ACTIVE 0.000000
                "utilisation": None,  # no GPU_UTIL on the grep: unknown, not 0
            },
            "2": {"pod": None, "extra.gr_engine_active": 0.0},  # no pod holds GPU 2
        },
    ),
    "dcgm-a100-mig-dra__kubernetes-sigs__dra-driver-nvidia-gpu__issue_166__excerpt.txt": Page(
        [],
        gpus=3,  # MIG instances 8, 9, 10 of one A100 80GB PCIe
        gpu_fields={
            "0/8": {
                "node": "k8s-dra-driver-cluster-worker",
                "mig_profile": "1g.10gb",
                "mig_instance": "8",
                "extra.gr_engine_active": 0.029399,
                "utilisation": None,  # no GPU_UTIL for a MIG instance: unknown, not 0
            },
            "0/9": {"extra.gr_engine_active": 0.033893},
            "0/10": {"extra.gr_engine_active": 0.0},
        },
    ),
    "dcgm-a30-mig-empty-pod-labels__NVIDIA__dcgm-exporter__issue_68__excerpt.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0/1": {
                "model_name": "NVIDIA A30",
                "mig_profile": "2g.12gb",
                "pod": None,  # pod="" (and namespace="", container=""): no pod, not a pod named ""
                "namespace": None,
                "extra.tensor_active": 0.0,  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE 0.000000
                "extra.dram_active": 0.0,
                "utilisation": None,
            }
        },
    ),
    "dcgm-2020-no-model-label__NVIDIA__gpu-monitoring-tools__issue_138__excerpt.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {
                "node": "",  # no Hostname label on the 2020 exporter's page: unknown
                "model_name": None,  # no modelName label: unknown
                "uuid": "GPU-6bf47ca9-ad3e-15db-beed-1079a7d74116",
                "utilisation": 0.44,  # DCGM_FI_DEV_GPU_UTIL 44
                "temperature_c": 55.0,  # DCGM_FI_DEV_GPU_TEMP
                "power_w": 302.206,  # DCGM_FI_DEV_POWER_USAGE 302.206000
                "pcie_replay": 0.0,
                "pod": None,
                "memory_free_bytes": None,  # no FB_* on the page
                "extra.memory_temp_c": 54.0,
                "extra.sm_clock_mhz": 1530.0,
            }
        },
    ),
    "dcgm-a30-mig-tensor-grep__NVIDIA__dcgm-exporter__issue_317__excerpt.txt": Page(
        [],
        gpus=5,  # GPU 0's 1g.6gb instances 3-6 and GPU 1's instance 3
        gpu_fields={
            "0/3": {"node": "yg-data-k8s-gpu-a30-node-test-test0003.mt", "mig_profile": "1g.6gb"},
            "1/3": {"uuid": "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49", "extra.tensor_active": 0.0},
        },
    ),
    "llamacpp-memory-gauges-m1pro__ggml-org__llama.cpp__issue_26129__excerpt.txt": Page(
        # a build of llama.cpp PR #26130: per-device memory gauges and model_n_layer only; llama.cpp's names, none
        # a replica is read from (was "no engine adapter (…, llamacpp, …) reads these names")
        error="llamacpp's namespace, but none of the names kvpilot's llamacpp adapter reads"
    ),
    "vllm-0.6-lora-requests-info__vllm-project__vllm__pull_9477__excerpt.txt": Page(
        # vllm:lora_requests_info{max_lora="1",running_adapters="",waiting_adapters=""} 1.0 alone (V0, Oct 2024)
        error="vllm's namespace, but none of the names kvpilot's vllm adapter reads"
    ),
    "vllm-lora-adapter-loaded__vllm-project__vllm__pull_54830__excerpt.txt": Page(
        # a scrape of the LoRA-residency PR stack before any request: num_gpu_loaded_lora_adapters 1, alice loaded
        error="vllm's namespace"
    ),
    "triton-25.03-vllm-backend-grep__triton-inference-server__server__issue_8463__excerpt.txt": Page(
        # a grep of a vLLM-backend Triton (model hbvllm): nv_inference_count 3075905 and the duration counter, no
        # vllm:* line: no replica, said as no LLM backend's series on the page
        error="Triton without an LLM backend's series on the page"
    ),
    "lmcache-in-vllm-v1-grep__LMCache__LMCache__issue_621__excerpt.txt": Page(
        # vLLM's page grep'd for lmcache (one counter): not LMCache's own server, said as either
        error="LMCache's own metrics server, or a vLLM page cut to its LMCache lines"
    ),
    "lmcache-in-vllm-metrics__LMCache__LMCache__pull_1100__excerpt.txt": Page(
        error="or a vLLM page cut to its LMCache lines"  # lmcache:* counters and _created gauges, no vllm:* line
    ),
    "vllm-0.5.1-ttft-cut-histogram__vllm-project__vllm__issue_6337__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "/secondary/thies/Hermes-2-Theta-Llama-3-70B/",  # model_name
                "ttft": None,  # buckets 0.001-0.06 all 208, cut before +Inf/_count/_sum: no histogram to read
                "requests_running": None,
                "requests_finished": None,
            }
        ]
    ),
    "vllm-0.5.3-70b-lines__vllm-project__vllm__issue_8115__excerpt.txt": Page(
        [
            {
                "engine": "vllm",  # vLLM 0.5.3.post1, Llama 3 70B on H100: three lines quoted in the report
                "model": "meta-llama/Meta-Llama-3-70B-Instruct",
                "requests_finished": 3918.0,  # request_success_total 3810 stop + 108 length
                "ttft": None,  # a _count (8060) without its TYPE line or buckets is no histogram
                "requests_running": None,
                "kv_usage": None,
            }
        ]
    ),
    # session 23: real pages of current stacks, read by hand
    "vllm-0.27.1-cpu-48-streams__lkhun9311__gpu-platform-control-plane-KOR__vllm_metrics_golden.txt": Page(
        [
            {
                "engine": "vllm",  # vLLM 0.27.1 (CPU build), 48 streams against --max-num-seqs 16
                "model": "Qwen/Qwen2.5-0.5B-Instruct",
                "requests_running": 16.0,  # vllm:num_requests_running 16.0
                "requests_waiting": 32.0,  # num_requests_waiting 32.0, not plus its by-reason split (capacity 32)
                "kv_usage": 0.0058629534628068525,  # kv_cache_usage_perc
                "kv_capacity_tokens": 349440.0,  # cache_config_info kv_cache_size_tokens (= 2730 blocks x 128)
                "prefix_queries": 656.0,  # prefix_cache_queries_total (not plus external_prefix_cache_queries 0)
                "prefix_hits": 0.0,  # prefix_cache_hits_total
                "preemptions": 0.0,
                "prompt_tokens": 656.0,  # prompt_tokens_total (by_source local_compute 656 is the same tokens)
                "generation_tokens": 807.0,
                "requests_finished": 1.0,  # request_success_total: length 1, stop/abort/error/repetition 0
                "ttft.count": 17.0,  # time_to_first_token_seconds_count: 17 requests past their first token
                "ttft.sum": 57.77877116203308,
                "itl.count": 790.0,  # inter_token_latency_seconds, not request_time_per_output_token_seconds' 1
                "itl.sum": 17.33309237821959,
                "e2e.count": 1.0,
                "e2e.sum": 41.46303629875183,
                "queue_time.count": 1.0,
                "queue_time.sum": 1.7069978639483452e-05,
            }
        ]
    ),
    "vllm-v0-engine-qwen3-0.6b__index-15709253963__comment-markers-removed.txt": Page(
        [
            {
                "engine": "vllm",  # the V0 engine's names, no engine label
                "model": "Qwen/Qwen3-0.6B",  # model_name
                "requests_running": 0.0,
                "requests_waiting": 0.0,
                "kv_usage": 0.0,  # gpu_cache_usage_perc, the only KV gauge
                "kv_capacity_tokens": 2340 * 16.0,  # num_gpu_blocks x block_size: no kv_cache_size_tokens yet
                "prefix_queries": None,  # no prefix-cache counters in V0
                "prefix_hits": None,
                "preemptions": 0.0,
                "prompt_tokens": 43952.0,  # prompt_tokens_total (request_prompt_tokens_sum 12952 counts finished ones)
                "generation_tokens": 4874.0,
                "requests_finished": 38.0,  # request_success_total{finished_reason="length"}
                "ttft.count": 69.0,  # more first tokens than finished requests: the rest were aborted
                "ttft.sum": 4941.843970537186,
                "itl.count": 4805.0,  # time_per_output_token_seconds
                "e2e.count": 38.0,
                "e2e.sum": 902.0056705474854,
                "queue_time.count": 38.0,
            }
        ]
    ),
    "nim-vllm-qwen3-vl-cache-config-grep__index-60656349917__excerpt.txt": Page(
        [
            {
                "engine": "vllm",  # current NIM writes vLLM's own vllm: names
                "model": "qwen3-vl-235b-awq",
                "kv_usage": 0.0,  # kv_cache_usage_perc 0.0
                "kv_capacity_tokens": 551520.0,  # cache_config_info kv_cache_size_tokens (34470 blocks x 16 agree)
                "requests_running": None,  # not in the grep
                "requests_waiting": None,
                "requests_finished": None,
                "ttft": None,
            }
        ]
    ),
    "sglang-0.5.17-mi355x-unlabelled__index-70736517310__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": None,  # the labels are gone
                "kv_usage": 0.85,  # sglang:token_usage (the engine's max over its pools), not full_token_usage 0.8506
                # no max_total_num_tokens: kv_used + kv_available + kv_evictable (32,768) leaves out reserved tokens
                "kv_capacity_tokens": None,
                "preemptions": 48.0,  # num_retracted_requests_total, not the gauge num_retracted_reqs 1
                "prefix_hits": 4600439.0,  # cached_tokens_total
                "prefix_queries": None,  # no prompt_tokens_total to divide by
                "requests_running": None,
                "requests_waiting": None,
            }
        ]
    ),
    "lmcache-beside-vllm-0.11-grep__index-62567550381__excerpt.txt": Page(
        [
            {
                "engine": "vllm",  # vLLM's series beside LMCache's: vLLM's page
                "model": "Qwen/Qwen3-8B",
                "ttft.count": 45.0,  # _count without TYPE or buckets, read with its _sum: every quantile unknown
                "ttft.sum": 2.971604108810425,
                "ttft.bounds": (float("inf"),),
                "prefix_hits": None,  # lmcache:num_hit_tokens_total 1529 is LMCache's, not vLLM's prefix cache
                "prefix_queries": None,  # nor lmcache:num_prompt_tokens_total 36089
                "prompt_tokens": None,
                "requests_running": None,
                "kv_usage": None,
            }
        ]
    ),
    "vllm-0.4-llama3-8b__France-Travail__benchmark_llm_serving__metrics_response.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "/home/data/models/Meta-Llama-3-8B-Instruct",  # model_name, the model's path
                "requests_running": 2.0,
                "requests_waiting": 1.0,
                "kv_usage": None,  # gpu_cache_usage_perc 4.2: impossible on a 0..1 gauge, so unknown, not 420 %
                "kv_capacity_tokens": 27798 * 16.0,  # cache_config_info num_gpu_blocks x block_size
                "prefix_queries": None,  # prefix caching off, no counters in this release
                "preemptions": None,  # no num_preemptions_total in this release
                "prompt_tokens": 106246478.0,  # prompt_tokens_total 1.06246478e+08
                "generation_tokens": 3126790.0,  # 3.12679e+06
                "requests_finished": 53693.0,  # request_success_total: 53689 length + 4 stop
                "ttft.count": 53694.0,
                "ttft.sum": 149737.30035066605,
                "itl.count": 3073096.0,  # time_per_output_token_seconds_count 3.073096e+06
                "e2e.count": 53693.0,
                "e2e.sum": 352430.06688022614,
                "queue_time": None,
            }
        ]
    ),
    "dcgm-l40s-vllm-pod-clocks__index-55590588324__excerpt.txt": Page(
        [],
        gpus=1,
        gpu_fields={
            "0": {
                "node": "i-0e2c27f8b63f89296",  # Hostname
                "uuid": "GPU-1c2b08c1-f602-d290-4519-863bc0c96079",
                "model_name": "NVIDIA L40S",  # modelName
                "pod": "mistral-6cfb59d6cd-xbwgd",  # the vLLM pod holding the GPU
                "namespace": "default",
                "container": "vllm",
                "utilisation": None,  # no GPU_UTIL among the three families: unknown, not 0
                "memory_used_bytes": None,
                "temperature_c": None,  # MEMORY_TEMP is not the GPU's temperature
                "extra.sm_clock_mhz": 2520.0,
                "extra.mem_clock_mhz": 9001.0,
                "extra.memory_temp_c": 0.0,  # as the page says
            }
        },
    ),
    "llm-d-inference-sim-v0.8.2-kind__MicheleCampi__inferscope__is-metrics_fixture.txt": Page(
        [
            {
                "engine": "vllm",  # llm-d's simulator writes vLLM's names
                "model": "facebook/opt-125m",
                "requests_running": 0.0,
                "requests_waiting": 0.0,
                "kv_usage": 0.0,
                "kv_capacity_tokens": 1024 * 16.0,  # cache_config_info num_gpu_blocks x block_size
                "prefix_queries": 196.0,  # vllm:prefix_cache_queries, a counter written without _total
                "prefix_hits": 96.0,  # vllm:prefix_cache_hits
                "preemptions": None,  # the simulator has no preemption counter
                "prompt_tokens": 196.0,
                "generation_tokens": 38.0,
                "requests_finished": 7.0,  # request_success_total{finish_reason=...}: 2 length + 5 stop
                "ttft.count": 7.0,
                "itl.count": 31.0,  # inter_token_latency_seconds (time_per_output_token's 31 too)
                "e2e.count": 7.0,
                "e2e.sum": 0.001509284,
                "queue_time": None,
            }
        ]
    ),
    "vllm-qwen3.5-122b-two-node-kv-size-only__index-66927013356__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen3.5-122B-A10B-FP8",
                "requests_running": 1.0,
                "requests_waiting": 0.0,  # num_requests_waiting (the by_reason gauge's 3 contradicts it: edited page)
                "kv_usage": 0.018907563025210128,
                # cache_config_info kv_cache_size_tokens; no num_gpu_blocks to multiply block_size 2096 by
                "kv_capacity_tokens": 1892600.0,
                "prefix_queries": 1012506.0,  # 1.012506e+06
                "prefix_hits": 492560.0,
                "ttft": None,  # a NaN _sum without its histogram
                "prompt_tokens": None,
            }
        ]
    ),
    "llamacpp-b10380-one-request__index-69407774593__excerpt.txt": Page(
        [
            {
                "engine": "llamacpp",
                "model": None,
                "requests_running": 0.0,  # llamacpp:requests_processing
                "requests_waiting": None,  # no requests_deferred line on this page: unknown, not 0
                "kv_usage": None,
                "kv_capacity_tokens": None,  # n_tokens_max 224 is the largest batch seen
                "prompt_tokens": 25.0,
                "generation_tokens": 200.0,  # llamacpp:tokens_predicted_total
                "prefix_queries": None,  # no prompt_tokens_cached_total
                "prefix_hits": None,
            }
        ]
    ),
    "vllm-0.26-gemma-4-26b-cache-counters__index-68664677251__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "google/gemma-4-26B-A4B-it",
                "requests_waiting": None,  # no scheduler gauges on the page
                "requests_running": None,
                "kv_usage": None,
                "kv_capacity_tokens": 218464.0,  # kv_cache_size_tokens, not 24978 x 16 = 399,648
                "prefix_queries": 253529060.0,  # prefix_cache_queries_total (its _created gauge not added)
                "prefix_hits": 177479648.0,
                "preemptions": 0.0,
                "prompt_tokens": 2000.0,  # prompt_tokens_total counts cached tokens too: not + 1500
                "generation_tokens": 400.0,
                "requests_finished": 10.0,  # 7 stop + 3 length
            }
        ]
    ),
    "vllm-v0-oci-blueprint-llama31-8b__index-44537508297__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "/models/NousResearch/Meta-Llama-3.1-8B-Instruct",
                "requests_running": 0.0,
                "requests_waiting": None,  # cut before it
                "kv_usage": None,
                "kv_capacity_tokens": 10947 * 16.0,  # cache_config_info (no model_name label on V0's)
            }
        ]
    ),
    "tgi-whole__DataDog__integrations-core__payload__trimmed.txt": Page(
        [
            {
                "engine": "tgi",
                "model": None,
                "requests_waiting": 0.0,  # tgi_queue_size
                "requests_running": 0.0,  # tgi_batch_current_size
                "kv_capacity_tokens": None,  # no tgi_batch_max_total_tokens on the page
                "kv_usage": None,
                "prompt_tokens": 662.0,  # tgi_request_input_length_sum
                "generation_tokens": 3423.0,  # tgi_request_generated_tokens_sum
                "requests_finished": 109.0,  # tgi_request_success
                "itl.count": 109.0,  # tgi_request_mean_time_per_token_duration
                "itl.sum": 8.643160945,
                "e2e.count": 109.0,  # tgi_request_duration
                "e2e.sum": 541.2140316159999,
                "queue_time.count": 109.0,  # tgi_request_queue_duration
                "queue_time.sum": 295.275961956,
                "ttft": None,  # TGI writes no time-to-first-token histogram
            }
        ]
    ),
    "gaie-epp-sim-two-pods-head__index-28203871539__excerpt.txt": Page(error="endpoint picker"),
    # session 32 helper P (round 5), read by hand first, each read right as found
    # llm-d's EPP 1.x (inference_pool_per_pod_queue_size of three pods, inference_extension_*), a grep: a router
    "llm-d-epp-1.4-gaie-sim-three-pods-grep__index-58599990987__excerpt.txt": Page(
        error=r"found 6 families starting with `inference_`: the Gateway API Inference Extension's endpoint picker"
    ),
    "vllm-dgx-qwen3.8-27b-by-reason-ttft-one-bucket__index-68808039177__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "qwen3.8-27b",  # model_name
                "requests_waiting": 3.0,  # num_requests_waiting, not plus the by_reason split of the same queue (3)
                "requests_running": 2.0,
                "kv_usage": 0.4567,
                "kv_capacity_tokens": None,  # no cache_config_info in the excerpt
                "prefix_queries": None,
                "preemptions": 1.0,  # num_preemptions_total, untyped (only the first family has HELP/TYPE)
                "prompt_tokens": 5052943.0,  # 5.052943e+06
                "generation_tokens": 120000.0,
                "requests_finished": None,
                "ttft.count": 4.0,  # _count 4 and _sum 6 beside the one bucket le=0.5 (3); no +Inf line
                "ttft.sum": 6.0,
                "ttft.bounds": (0.5, float("inf")),
            }
        ]
    ),
    "vllm-0.27.1-help-without-type-qwen3-8b-awq__index-59764504136__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen3-8B-AWQ",  # HELP lines, no TYPE line: every family untyped
                "requests_running": 1.0,
                "requests_waiting": 0.0,  # not plus by_reason{reason="capacity"} 0
                "kv_usage": 0.42,
                "kv_capacity_tokens": None,
                "preemptions": None,
                "prompt_tokens": None,
                "ttft": None,
            }
        ]
    ),
    "vllm-0.30-cpu-two-completions-grep__index-68324944604__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen2.5-0.5B-Instruct",
                "requests_running": 0.0,
                "requests_waiting": 0.0,
                "kv_usage": 0.0,
                "kv_capacity_tokens": None,
                "prefix_queries": 8.0,
                "prefix_hits": None,  # no prefix_cache_hits line in the grep: unknown, not a 0 % hit rate
                "prompt_tokens": 8.0,  # 5 + 3
                "generation_tokens": 32.0,  # 2 x 16
                "requests_finished": 2.0,  # finished_reason="length"
            }
        ]
    ),
    "dcgm-4x-gb200-eks__index-58536126015__excerpt.txt": Page(
        gpus=4,
        gpu_fields={
            "0": {
                "node": "ip-100-64-135-20.ec2.internal",
                "model_name": "NVIDIA GB200",
                "pod": None,
                "temperature_c": 27.0,
                "power_w": 165.926,
                "utilisation": 0.0,
                "memory_used_bytes": 0.0,
                "memory_free_bytes": 188729 * 2.0**20,  # DCGM_FI_DEV_FB_FREE in MiB
                "extra.mem_copy_util_pct": 0.0,
            },
            "3": {"temperature_c": 26.0, "power_w": 174.197, "memory_free_bytes": 188729 * 2.0**20},
        },
    ),
    # OpenVINO Model Server: an engine without an adapter, named (was "no engine adapter ...")
    "ovms-resnet50-partial__openshift__microshift__ai_model_serving__excerpt.txt": Page(
        error=r"OpenVINO Model Server \(ovms_requests_success.*kvpilot has no OVMS adapter"
    ),
    # LMCache's multiprocess server (lmcache_mp_*): a cache beside the engines, named (was "no engine adapter ...")
    "lmcache-mp-server-three-requests__index-62108247994__excerpt.txt": Page(
        error=r"LMCache's multiprocess server \(lmcache_mp_\*.*scrape the vLLM server"
    ),
    # Huawei Ascend's npu-exporter: NPUs kvpilot does not read, named (was "no engine adapter ...")
    "ascend-npu-exporter-8x-910a__Ascend__ascend-npu-exporter__collector_testdata.txt": Page(
        error=r"Huawei Ascend's npu-exporter \(npu_chip_info_\*.*kvpilot reads no Ascend NPU"
    ),
    # ROCm Omnistat's rocm_* gauges by card: a GPU exporter kvpilot does not read, named (was "no engine adapter ...")
    "omnistat-4-gpus-curl__ROCm__omnistat__docs_developer__excerpt.txt": Page(
        error=r"ROCm Omnistat \(rocm_\*.*a GPU exporter kvpilot does not read"
    ),
    # nvidia-smi's fields as nvidia_smi_*: a GPU exporter kvpilot does not read, named (was "no engine adapter ...")
    "nvidia-gpu-exporter-rtx2080s__utkuozdemir__nvidia_gpu_exporter__METRICS.txt": Page(
        error=r"nvidia_gpu_exporter \(nvidia_smi_\*.*a GPU exporter kvpilot does not read"
    ),
    # NVML's figures as nvidia_gpu_* (pytimer/gpu-exporter, as mindprince's exporter names them): named as well
    "nvidia-gpu-nvml-exporter-two-p4__pytimer__gpu-exporter__README.txt": Page(
        error=r"an NVML GPU exporter \(nvidia_gpu_\*.*a GPU exporter kvpilot does not read"
    ),
    "dynamo-worker-vllm-eks-h100__index-54291311193__excerpt.txt": Page(
        [
            {
                "engine": "vllm",  # vLLM's series beside Dynamo's dynamo_component_*: the engine's own win
                "model": "Qwen/Qwen3-0.6B",  # model_name (Dynamo's `model` says the same)
                "role": None,  # dynamo_component="backend": an aggregated worker, neither prefill nor decode
                "prefix_queries": 50.0,  # vllm:prefix_cache_queries_total
                "prefix_hits": None,  # not in the excerpt
                "requests_running": None,  # no scheduler gauge in the excerpt: unknown, not 0
                "requests_waiting": None,
                "kv_usage": None,
                "requests_finished": None,  # dynamo_component_requests_total 10 counts the endpoint's requests
            }
        ]
    ),
    "pytorch-training-job-eks__index-54291311193__excerpt.txt": Page(
        error=r"found 5 families starting with `training_`; no engine adapter \(vllm, .*\) reads these names"
    ),
    "vllm-spec-decode-dgx-spark__index-59883029386__excerpt.txt": Page(
        error="vllm's namespace, but none of the names kvpilot's vllm adapter reads a replica from"
    ),
    "llm-d-inference-sim-e924683-lora-in-flight__MicheleCampi__inferscope__is-metrics_fixture.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen2.5-7B-Instruct",  # the base model, one replica (LoRA a1 is no replica of its own)
                "requests_running": 1.0,
                "requests_waiting": 0.0,
                "kv_usage": 0.0,
                "kv_capacity_tokens": None,  # cache_config_info block_size="0", num_gpu_blocks="0": no KV pool
                "prompt_tokens": None,  # no token counters on this build's page
                "requests_finished": None,
                "ttft.count": 1.0,
                "itl.count": 19.0,  # inter_token_latency_seconds
                "itl.sum": 1.9000000000000006,
                "e2e": None,
            }
        ]
    ),
    "sglang-tp4-rtx4090-grep__index-55529353766__excerpt.txt": Page(
        [
            {
                "engine": "sglang",
                "model": "Qwen3-14B",  # model_name, on the counters and on the gauges alike
                # one replica: without --enable-metrics-for-all-schedulers only TP rank 0's scheduler writes gauges, and
                # the tokenizer's counters carry no rank at all; they are the same server's
                "requests_running": 0.0,  # num_running_reqs{tp_rank="0"}
                "requests_waiting": 0.0,  # num_queue_reqs{tp_rank="0"}
                "prompt_tokens": 6.0,  # prompt_tokens_total{model_name="Qwen3-14B"}
                "generation_tokens": 8.0,  # generation_tokens_total
                "prefix_hits": None,  # no cached_tokens_total on the grep; cache_hit_rate is a gauge, not a count
                "kv_usage": None,  # no token_usage on the grep
                "kv_capacity_tokens": None,  # no max_total_num_tokens (298,447 in the note's log, not on the page)
            }
        ]
    ),
    "vllm-0.8.1-v1-blocks-none__vllm-project__vllm__issue_15719__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": None,  # cache_config_info carries no model_name
                "kv_capacity_tokens": None,  # num_gpu_blocks="None": the V1 front end never learnt it, not 0 tokens
                "kv_usage": None,
                "requests_running": None,
            }
        ]
    ),
    "vllm-0.11.0-cpu-offloading-cache-config__vllm-project__vllm__issue_28924__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "kv_capacity_tokens": 9271 * 16,  # num_gpu_blocks="9271" x block_size="16", engine="0"'s one sample
                "kv_usage": None,
            }
        ]
    ),
    "vllm-deepseek-v4-hybrid-cache-config__vllm-project__vllm__issue_51163__rebuilt.txt": Page(
        [
            {
                "engine": "vllm",
                # the engine's kv_cache_size_tokens, not num_gpu_blocks 20377 x block_size 4 = 81,508: block_size is
                # the smallest of DeepSeek-V4's KV groups' block sizes (256, 64, 8, 4), not the tokens a block holds
                "kv_capacity_tokens": 1179770.0,
                "kv_usage": None,
            }
        ]
    ),
    "vllm-0.20.2-qwen3.6-27b-hybrid-no-size__index-67494338468__rebuilt.txt": Page(
        [
            {
                "engine": "vllm",
                # no kv_cache_size_tokens, and mamba_block_size="16" says the model is a hybrid: num_gpu_blocks 1147 x
                # block_size 16 = 18,352 is not its pool (1,708,404 tokens by its start-up log): unknown, not that
                "kv_capacity_tokens": None,
                "kv_usage": None,
            }
        ]
    ),
    # session 27 (helper C, second brief): captures not seen before, each read right already
    "vllm-0.25.1-lmcache-external-prefix-grep__index-62671425911__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen2.5-Coder-7B-Instruct",  # model_name
                "requests_waiting": None,  # the excerpt has no scheduler gauges: unknown, not 0
                "requests_running": None,
                "kv_usage": 0.25,  # vllm:kv_cache_usage_perc
                "kv_capacity_tokens": None,  # no cache_config_info
                # vllm:prefix_cache_queries_total 72 / hits 32 (the GPU prefix cache); the KV connector's (LMCache's)
                # external_prefix_cache_queries_total 40 / hits 12 are a second tier, not added to them
                "prefix_queries": 72.0,
                "prefix_hits": 32.0,
                "prompt_tokens": None,
                "ttft": None,
            }
        ]
    ),
    "llamacpp-n-busy-slots-counter-blog__index-26007012983__excerpt.txt": Page(
        [
            {
                "engine": "llamacpp",
                "model": None,  # llama-server writes no labels
                "requests_running": 0.0,  # llamacpp:requests_processing
                "requests_waiting": 0.0,  # llamacpp:requests_deferred
                "kv_usage": None,  # no kv_cache_usage_ratio (removed mid-2025)
                "kv_capacity_tokens": None,
                "prompt_tokens": 33065.0,  # llamacpp:prompt_tokens_total; no prompt_tokens_cached_total on this build
                "prefix_queries": None,  # without the cached counter the prefix fields stay unknown
                "prefix_hits": None,
                "generation_tokens": 7801.0,  # llamacpp:tokens_predicted_total
                "ttft": None,
            }
        ]
    ),
    "llamacpp-b10752-cached-counter__index-71252748444__excerpt.txt": Page(
        [
            {
                "engine": "llamacpp",
                "model": None,
                "requests_running": 1.0,  # llamacpp:requests_processing
                "requests_waiting": 2.0,  # llamacpp:requests_deferred
                "kv_usage": None,
                "kv_capacity_tokens": None,  # n_tokens_max 170 is the longest context seen, not the cache's size
                "prompt_tokens": 21.0 + 0.0,  # prompt_tokens_total (processed) + prompt_tokens_cached_total
                "prefix_queries": 21.0,
                "prefix_hits": 0.0,  # llamacpp:prompt_tokens_cached_total 0: a 0 read, not unknown
                "generation_tokens": 150.0,  # llamacpp:tokens_predicted_total
            }
        ]
    ),
    "dcgm-4x-h100-eks-nim-pod__index-53015079001__excerpt.txt": Page(
        [],
        gpus=8,  # gpu="0".."7", one node's eight H100s
        gpu_fields={
            "0": {
                "node": "ip-10-0-180-136.ec2.internal",  # Hostname
                "uuid": "GPU-15704b32-f531-14ce-0530-1ac21e4b68e6",
                "model_name": "NVIDIA H100 80GB HBM3",
                "pod": None,  # no pod labels on this GPU's lines
                "temperature_c": 31.0,  # DCGM_FI_DEV_GPU_TEMP
                "power_w": 67.692,  # DCGM_FI_DEV_POWER_USAGE
                "utilisation": 0.0,  # DCGM_FI_DEV_GPU_UTIL 0
                "memory_used_bytes": None,  # no DCGM_FI_DEV_FB_USED in the sample
                "extra.mem_copy_util_pct": 0.0,  # DCGM_FI_DEV_MEM_COPY_UTIL
            },
            "6": {
                # the NIM pod's GPU: container/namespace/pod labels, pod_uid="" (empty, ignored)
                "pod": "llama-3-2-1b-7577f87fc7-dhb97",
                "namespace": "nim-workload",
                "container": "llama-3-2-1b-ctr",
                "temperature_c": 37.0,
                "power_w": 112.67,
                "utilisation": 0.0,
                "extra.mem_copy_util_pct": None,  # the sample's MEM_COPY_UTIL lines stop at gpu 5
            },
            "7": {"temperature_c": 31.0, "power_w": 65.061, "extra.mem_copy_util_pct": None},
        },
    ),
    "sglang-0.4.0-one-request__sgl-project__sglang__production_metrics__early-revision.txt": Page(
        [
            {
                "engine": "sglang",
                # model_name; func_latency_seconds' name="generate_request" is no model
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "requests_waiting": 0.0,  # sglang:num_queue_reqs
                "requests_running": 0.0,  # sglang:num_running_reqs
                "kv_usage": 0.0,  # sglang:token_usage
                "kv_capacity_tokens": None,  # num_used_tokens only, no max_total_num_tokens
                "prefix_queries": None,  # cache_hit_rate is a gauge; no cached_tokens counter
                "prefix_hits": None,
                "prompt_tokens": 7.0,  # sglang:prompt_tokens_total
                "generation_tokens": 8.0,  # sglang:generation_tokens_total
                "requests_finished": None,
                "ttft.count": 1.0,  # one request
                "ttft.sum": 0.30457592010498047,
                "itl.count": 1.0,  # time_per_output_token_seconds, not func_latency_seconds
                "itl.sum": 0.0381757915019989,
                "e2e.count": 1.0,
                "e2e.sum": 0.30521273612976074,
                "queue_time": None,
            }
        ]
    ),
    "vllm-v0-2025-aibrix-runtime__vllm-project__aibrix__docs_runtime__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "Qwen/Qwen2.5-Coder-1.5B-Instruct",  # model_name
                "requests_waiting": 0.0,  # vllm:num_requests_waiting (num_requests_swapped 0 beside it)
                "requests_running": 0.0,
                "kv_usage": 0.0,  # vllm:gpu_cache_usage_perc (V0's name; cpu_cache_usage_perc is not it)
                "kv_capacity_tokens": 81767 * 16,  # cache_config_info num_gpu_blocks="81767" x block_size="16"
                "prefix_queries": None,  # V0's gpu_prefix_cache_hit_rate -1.0 is a ratio gauge: not mapped
                "prefix_hits": None,
                "preemptions": 0.0,  # vllm:num_preemptions_total
                "prompt_tokens": 148.0,
                "generation_tokens": 955.0,
                "requests_finished": 4.0,  # request_success_total{finished_reason="stop"}
                "ttft": None,  # the doc's excerpt stops inside iteration_tokens_total (no +Inf, no _count)
                "itl": None,
            }
        ]
    ),
    # session 29 (helper D): real pages nobody here had seen, read by hand before kvpilot ran on them
    "vllm-0.29-t4-qwen2.5-1.5b__thealonemusk__InferStack__vllm_metrics_real__trimmed.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "qwen2.5-1.5b",  # model_name
                "requests_waiting": 0.0,  # num_requests_waiting (by_reason capacity 0 + deferred 0 say the same)
                "requests_running": 0.0,
                "kv_usage": 0.0,  # kv_cache_usage_perc
                # cache_config_info kv_cache_size_tokens="322944", = num_gpu_blocks 20184 x block_size 16
                "kv_capacity_tokens": 322944.0,
                "prefix_queries": 530.0,  # prefix_cache_queries_total; external_prefix_cache_* 0/0 are not added
                "prefix_hits": 432.0,
                "preemptions": 0.0,
                "prompt_tokens": 530.0,
                "generation_tokens": 584.0,
                "requests_finished": 10.0,  # request_success_total: length 10, stop/abort/error/repetition 0
                "ttft.count": 10.0,
                "ttft.sum": 1.4721317291259766,
                "itl.count": 574.0,  # inter_token_latency_seconds, not the per-request time_per_output_token
                "queue_time.count": 10.0,
            }
        ]
    ),
    "vllm-2026-deepseek-v4-flash-mla-size__jvr0x__lmswitch__vllm_metrics__trimmed.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "deepseek-v4-flash-vision-exp-ablit-dual",
                "requests_waiting": 0.0,
                "requests_running": 0.0,
                "kv_usage": 0.0,
                # the engine's kv_cache_size_tokens="1428520", not num_gpu_blocks 15998 x block_size 4 = 63,992
                # (cache_dtype nvfp4_ds_mla, sliding_window 128: a block is not block_size tokens of every layer)
                "kv_capacity_tokens": 1428520.0,
                "prefix_queries": 3675428.0,
                "prefix_hits": 3241216.0,
                "preemptions": 0.0,
                "prompt_tokens": 3675428.0,
                "generation_tokens": 44995.0,
                "requests_finished": 26.0,  # stop 26
                "ttft.count": 26.0,
                "ttft.sum": 417.90156173706055,
                "itl.count": 17807.0,
                "queue_time.count": 26.0,
            }
        ]
    ),
    "vllm-2026-idle-lab__harshuljain13__AdmitPerf__vllm_metrics_real__trimmed.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "lab",
                "requests_waiting": 0.0,
                "requests_running": 0.0,
                "kv_usage": 0.0,
                "kv_capacity_tokens": 1592144.0,  # kv_cache_size_tokens, = 99,509 blocks x 16
                "prefix_queries": 0.0,  # no request yet: 0 read, not unknown
                "prefix_hits": 0.0,
                "prompt_tokens": 0.0,
                "generation_tokens": 0.0,
                "requests_finished": 0.0,
                "ttft.count": 0.0,  # the histogram is on the page, empty
                "ttft.sum": 0.0,
                "itl.count": 0.0,
                "queue_time.count": 0.0,
            }
        ]
    ),
    # Xinference's own exporter: was "found 4 families starting with `xinference:`; no engine adapter (...) reads
    # these names", which did not say what the page is
    "xinference-exporter__xorbitsai__inference__pull_906__excerpt.txt": Page(error="Xinference's metrics exporter"),
    # AWS neuron-monitor on an inf1.xlarge: was the same generic error
    "aws-neuron-monitor-inf1__DataDog__integrations-core__aws_neuron_metrics__trimmed.txt": Page(
        error="AWS neuron-monitor's exporter .*kvpilot reads no Neuron device"
    ),
    # Dynamo's runtime example component (no model, no `generate` endpoint): was a `dynamo` replica whose every field
    # but requests_finished 3 and e2e was unknown
    "dynamo-runtime-example-component__ai-dynamo__dynamo__system_metrics_README.txt": Page(
        error="a Dynamo runtime component's generic endpoint series"
    ),
    # TorchServe's metrics API (five linear_regression models, label sets ending `,}`): was the generic error
    "torchserve-five-models__DataDog__integrations-core__torchserve_openmetrics_metrics.txt": Page(
        error="TorchServe's metrics API"
    ),
    # a LiteLLM proxy of mid-2025 (its Redis/Postgres service health): was the generic error
    "litellm-proxy-2025-06__DataDog__integrations-core__litellm_metrics__trimmed.txt": Page(error="LiteLLM's proxy"),
    # a build of Ollama with its eval counters (ollama/ollama pull request #11159): was the generic error
    "ollama-eval-counters__ollama__ollama__pull_11159__excerpt.txt": Page(error="Ollama's /metrics"),
    # session 30 (helper F), real pages read by hand before kvpilot ran on them. A research fork of vLLM V0 at startup
    # (its own scheduler_total_time, model_forward_total_time gauges; prefix caching off, hit rates -1): right as found
    "vllm-v0-fork-bsc-llama2-startup__FerranAgulloLopez__vLLMBatchingMemoryGap__cache_config_server.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "/gpfs/scratch/bsc98/bsc098069/llm_benchmarking/models/llama/llama-2-7b",  # model_name
                "requests_waiting": 0.0,
                "requests_running": 0.0,
                "kv_usage": 0.0,  # gpu_cache_usage_perc
                "kv_capacity_tokens": 5659 * 16.0,  # num_gpu_blocks="5659" x block_size="16": no kv_cache_size_tokens
                "prefix_queries": None,  # enable_prefix_caching="False", gpu_prefix_cache_hit_rate -1.0: no counters
                "prefix_hits": None,
                "preemptions": 0.0,
                "prompt_tokens": 0.0,
                "generation_tokens": 0.0,
                "requests_finished": None,  # no request_success_total on the page
                "ttft": None,
                "itl": None,
                "queue_time": None,
            }
        ]
    ),
    # a current llama-server's whole page (n_tokens_max, n_decode_total, no KV series): right as found; n_tokens_max
    # 8,156 (the largest batch seen) is neither KV in use nor capacity
    "llamacpp-real-dump-n-tokens-max__index-56238338707.txt": Page(
        [
            {
                "engine": "llamacpp",
                "model": None,  # no label on the page
                "requests_waiting": 0.0,  # requests_deferred
                "requests_running": 0.0,  # requests_processing
                "kv_usage": None,
                "kv_capacity_tokens": None,
                "prefix_queries": None,
                "preemptions": None,
                "prompt_tokens": 18292.0,  # prompt_tokens_total (18,292 / 35.585 s = prompt_tokens_seconds 514.04)
                "generation_tokens": 1406.0,  # tokens_predicted_total
                "requests_finished": None,
                "ttft": None,
            }
        ]
    ),
    # pages pointed at by mistake on the way to an engine's: each was the generic "found N families starting with
    # `keda_` (`node_`, `prometheus_`, `container_`, `kong_`); no engine adapter (...) reads these names"
    "keda-operator-2.16__DataDog__integrations-core__keda_metrics__trimmed.txt": Page(error="KEDA's operator"),
    "node-exporter-e2e__prometheus__node_exporter__e2e_output__trimmed.txt": Page(error="Prometheus' node_exporter"),
    "prometheus-2.40-server__index-14084090669__trimmed.txt": Page(error="the Prometheus server's own /metrics"),
    "cadvisor-0.28-k80-accelerator__google__cadvisor__issue_1912__excerpt.txt": Page(
        error="cAdvisor's per-container accelerator gauges .*a GPU exporter kvpilot does not read"
    ),
    "kong-ai-gateway-docs__index-69525788031__excerpt.txt": Page(error="Kong's gateway .*scrape the engines behind it"),
    "alertmanager-0.24__index-14182870062__excerpt.txt": Page(error="Prometheus' Alertmanager"),
    "kube-state-metrics-gke__DataDog__integrations-core__ksm_standard_tags_gke__trimmed.txt": Page(
        error="kube-state-metrics .*not an engine's requests"  # kube_deployment_status_replicas are pod counts
    ),
    # Envoy's statistics, a family's second cluster written after every family's first (non-contiguous)
    "envoy-two-clusters__DataDog__integrations-core__envoy_openmetrics__trimmed.txt": Page(error="Envoy's statistics"),
    "otelcol-elastic-8.15-internal__index-32346778844__excerpt.txt": Page(
        error="an OpenTelemetry Collector's own telemetry"
    ),
    # only the decode-time histogram's buckets of one data-parallel engine: right as found, vLLM's namespace said
    "vllm-decode-time-buckets-dp-engine1__vllm-project__vllm__pull_22227__excerpt.txt": Page(
        error="vllm's namespace, but none of the names"
    ),
    # a real V1 scrape trimmed by its author (model_name normalized to "M"), every family untyped, the TTFT histogram's
    # _count and _sum without buckets: right as found
    "vllm-untyped-trimmed-model-normalized__index-61087090659__excerpt.txt": Page(
        [
            {
                "engine": "vllm",
                "model": "M",
                "requests_waiting": 0.0,
                "requests_running": 0.0,
                "kv_usage": 0.0,
                "kv_capacity_tokens": None,  # no cache_config_info
                "prefix_queries": None,
                "preemptions": None,
                "prompt_tokens": 343.0,
                "generation_tokens": 826.0,
                "requests_finished": 6.0,  # request_success_total: stop 3 + length 1 + abort 0 + error 2
                "ttft.count": 4.0,  # _count and _sum only: no bucket but the count itself
                "ttft.sum": 0.88,
                "itl": None,
            }
        ]
    ),
    # session 31, round 4 of unseen real pages (hand readings in /tmp/s31/F-notes.md, written before the parse):
    # Istio's sidecar's merged page (istio-agent and Envoy, no application metrics merged): was "Envoy's statistics
    # ... scrape the engines behind it"
    "istio-1.11-merged-sidecar__DataDog__integrations-core__istio_merged__trimmed.txt": Page(
        error="Istio's sidecar .*prometheus.io/port"
    ),
    # the NGINX Ingress controller's page: was "no engine adapter (...) reads these names"
    "nginx-ingress-controller-go1.10__DataDog__integrations-core__nginx_ingress_controller_metrics__trimmed.txt": Page(
        error="the NGINX Ingress controller"
    ),
    # answers to /metrics that are no exposition at all (not-exposition/), each said for what it is
    "sglang-0.4.6-metrics-off-json-404__sgl-project__sglang__issue_7305.txt": Page(
        error="an error answered in JSON"  # {"detail":"Not Found"}: was "trtllm-serve answers /metrics with JSON"
    ),
    "mindie-behind-squid-proxy-html__gpustack__gpustack__issue_1785__excerpt.txt": Page(
        error="the page is HTML"  # a Squid proxy's error page: was "invalid metric name"
    ),
    "go-404-page-not-found__eko__pihole-exporter__issue_33.txt": Page(
        error="an HTTP error's text"  # `404 page not found`: was "invalid metric name"
    ),
}


def _value(sample: ReplicaSample, key: str) -> Any:
    name, _, part = key.partition(".")
    value = getattr(sample, name)
    return getattr(value, part) if part and value is not None else value


@pytest.mark.parametrize("page", PAGES, ids=lambda p: f"{p.parent.parent.parent.name}/{p.name}")
def test_every_page_reads_as_read_by_hand(page: Path) -> None:
    expected = EXPECTED.get(page.name)
    assert expected is not None, f"{page.name}: no expected values; read the page by hand and add a row"
    target = TargetInfo(url=page.name, pod="pod-0")
    if expected.error is not None:
        with pytest.raises((UnknownEngine, ParseError), match=expected.error):
            adapt_page(page.read_bytes(), target, 0.0)
        return
    adapted = adapt_page(page.read_bytes(), target, 0.0)
    assert len(adapted.gpus) == expected.gpus
    gpus = {g.index: g for g in adapted.gpus}
    for index, fields in expected.gpu_fields.items():
        for key, value in fields.items():
            name, _, extra = key.partition(".")
            got = gpus[index].extra.get(extra) if extra else getattr(gpus[index], name)
            assert got == (pytest.approx(value) if isinstance(value, float) else value), f"{page.name}: {index} {key}"
    replicas = sorted(adapted.replicas, key=lambda r: r.replica)
    assert len(replicas) == len(expected.replicas), [r.replica for r in replicas]
    for sample, want in zip(replicas, expected.replicas, strict=True):
        for key, value in want.items():
            if key == "replica":
                assert sample.replica == "pod-0" + value
                continue
            got = _value(sample, key)
            assert got == (pytest.approx(value) if isinstance(value, float) else value), f"{page.name}: {key}"


def test_the_shared_pages_are_read_too() -> None:
    # where the shared directory is present it is part of the table; an empty glob there would check nothing
    if not DIRS[2].is_dir():
        pytest.skip("no ../shared/fixtures/metrics in this checkout")
    assert any(re.search(r"shared", str(p)) for p in PAGES)
