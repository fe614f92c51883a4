"""Engine adapters: one file per engine or serving stack, registered in ``ENGINES``; detection by families present."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Protocol

from collector.engines import dynamo, llamacpp, mindie, nim, sglang, tgi, trtllm, trtllm_pytorch, vllm
from collector.engines._prefix import common_stems, find_prefix, is_kvpilot_page, strip_prefix
from collector.engines._read import family_names
from collector.exposition import MetricFamily
from collector.samples import ReplicaSample, TargetInfo


class EngineAdapter(Protocol):
    """What the collector needs from an engine: which families it reads, how to recognise and adapt a page."""

    @property
    def name(self) -> str: ...

    @property
    def families(self) -> frozenset[str]: ...

    @property
    def fallback(self) -> bool: ...

    @property
    def identifying(self) -> frozenset[str]: ...

    def score(self, families: Mapping[str, MetricFamily]) -> int: ...

    def adapt(
        self, families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float
    ) -> list[ReplicaSample]: ...


ENGINES: dict[str, EngineAdapter] = {
    adapter.name: adapter
    for adapter in (
        vllm.ADAPTER,
        sglang.ADAPTER,
        tgi.ADAPTER,
        trtllm.ADAPTER,
        trtllm_pytorch.ADAPTER,
        llamacpp.ADAPTER,
        nim.ADAPTER,
        mindie.ADAPTER,
        dynamo.ADAPTER,
    )
}

# Pages that carry an engine's own names yet are no replica of it: a router re-exporting each backend's queue under
# its own ``server`` label. The families only such a page has, and what it is. Such a page is an error, never a replica
# summing the backends it routes to (the scaler would count their requests twice: the backends are scraped too).
_NOT_A_REPLICA: dict[str, tuple[frozenset[str], str]] = {
    "vllm-router": (
        frozenset(
            key
            for name in (
                "vllm:current_qps",
                "vllm:healthy_pods",
                "vllm:num_decoding_requests",
                "vllm:avg_decoding_length",
            )
            for key in family_names(name)
        ),
        "it is the vLLM production-stack router (vllm:current_qps, vllm:healthy_pods_total), whose vllm:* gauges are"
        " its backends' figures by `server`, not an engine's: scrape the vLLM engines behind it",
    ),
}

ENGINE_FAMILIES: frozenset[str] = frozenset().union(
    *(a.families for a in ENGINES.values()), *(markers for markers, _ in _NOT_A_REPLICA.values())
)
# Engine namespaces (``vllm`` of ``vllm:…``): a stack that sanitises names writes them ``vllm_…``.
NAMESPACES: frozenset[str] = frozenset(n.split(":", 1)[0] for n in ENGINE_FAMILIES if ":" in n)
# The same, in the order of ENGINES (vLLM's first): the one a namespace of a vLLM-compatible server stands for where
# several read as many of its names (``_prefix.namespace_behind``).
NAMESPACE_ORDER: tuple[str, ...] = tuple(
    dict.fromkeys(n.split(":", 1)[0] for a in ENGINES.values() for n in sorted(a.families) if ":" in n)
)
# The names that make a page some engine's (what detection counts): a prefix is looked for against these only.
IDENTIFYING_FAMILIES: frozenset[str] = frozenset().union(*(a.identifying or a.families for a in ENGINES.values()))

# How many adapters read each name. A name only one adapter reads is that adapter's own: NIM's `num_requests_running` is
# read by MindIE too (MindIE writes vLLM V0's unprefixed names beside its npu_* gauges), MindIE's
# `npu_cache_usage_perc` by no other adapter.
_READERS: Counter[str] = Counter(name for a in ENGINES.values() for name in a.families)
_OWN_NAMES: dict[str, frozenset[str]] = {
    name: frozenset(n for n in (a.identifying or a.families) if _READERS[n] == 1) for name, a in ENGINES.items()
}

# Pages that are not an engine's but are often pointed at by mistake: their leading word, and what they are.
# What an NVIDIA GPU exporter kvpilot does not read is told, whichever it is (both entries below).
_NVIDIA_NOT_READ = (
    "a GPU exporter kvpilot does not read; for these GPUs scrape dcgm-exporter (DCGM_FI_*) or run `kvpilot gpu-agent`"
    " (NVML) on the node; no engine is on it"
)

_NOT_AN_ENGINE = {
    # LMCache's series alone: its own metrics server (LMCache PR #1318), or the vLLM server's page cut to its
    # lmcache:* lines (LMCache issues #621 and #729, PR #1100: PROMETHEUS_MULTIPROC_DIR puts them on vLLM's page)
    "lmcache:": "LMCache's own metrics server, or a vLLM page cut to its LMCache lines (lmcache:* without vllm:*);"
    " scrape the vLLM server's whole /metrics",
    # LMCache's multiprocess server (vLLM's LMCacheMPConnector talks to it) writes its own page through an
    # OpenTelemetry bridge: lmcache_mp_lookup_requested_tokens_total, lmcache_mp_lookup_hit_tokens_total,
    # lmcache_mp_l1_*... (a real page in an LMCache run report, index file 62108247994)
    "lmcache_": "LMCache's multiprocess server (lmcache_mp_*: its lookups and L1/L2 store), a cache beside the engines,"
    " not one: scrape the vLLM server it serves",
    # a Triton of ONNX/graphdef models, or a grep of a vLLM-backend Triton's core series (triton-inference-server/server
    # issue #8463): core series only either way
    "nv_inference_": "Triton without an LLM backend's series on the page (no nv_trt_llm_* nor vllm:*: a Triton of"
    " other models, or an excerpt without them); it is not an LLM replica",
    "DCGM_": "dcgm-exporter; give the target kind: gpu",
    # KServe's Python model server times each request's steps (kserve/kserve python/kserve/kserve/metrics.py):
    # a model behind it that is no LLM engine writes nothing else (kserve/kserve qpext/cmd/qpext/main_test.go)
    "request_predict_seconds": "KServe's model server (request_*_seconds around its predict step) without an LLM"
    " engine's series: no queue, KV or token figure; with the Hugging Face runtime's vLLM backend the vllm:*"
    " series are served beside these",
    # a real page (NVIDIA/dcgm-exporter issue #272): DCGM's field names in lower case, with pod_name/pod_namespace
    "dcgm_": "DCGM fields named in lower case (dcgm_fi_*); kvpilot reads them under the names dcgm-exporter writes"
    " (DCGM_FI_*)",
    "ray_": "Ray's own metrics; Ray Serve LLM pages carry ray_vllm:* (or ray_vllm_*) once a vLLM replica runs",
    # Dynamo's DistributedRuntime gives every component endpoint the work handler's series; a page of them alone, for
    # no model and no `generate` endpoint (the runtime's own system_metrics example: ai-dynamo/dynamo @ 2fcc8cf :
    # lib/runtime/examples/system_metrics/README.md), is a component that is no LLM worker (collector.engines.dynamo)
    "dynamo_component_": "a Dynamo runtime component's generic endpoint series (dynamo_component_requests_total,"
    " request_duration_seconds...) for no model and no `generate` endpoint, without a worker's KV stats or its"
    " engine's series: no LLM replica; scrape a worker serving `generate` (its engine's page) or Dynamo's frontend",
    # LiteLLM's proxy (DataDog/integrations-core litellm/tests/fixtures: metrics.txt of mid-2025, metrics_v1_95.txt):
    # litellm_proxy_*, litellm_deployment_*, spend and its own Redis/Postgres service health: a gateway, no engine
    "litellm_": "LiteLLM's proxy (litellm_*: its requests, spend, deployments' health and its Redis/Postgres services),"
    " a gateway in front of the engines or hosted APIs: no queue, KV or token figure of a replica; scrape the engines"
    " behind it",
    # TorchServe's metrics API (DataDog/integrations-core torchserve/tests/fixtures/openmetrics/metrics.txt:
    # ts_inference_requests_total, ts_queue_latency_microseconds... by model_name, beside its CamelCase host gauges)
    **dict.fromkeys(
        ("ts_inference_", "ts_queue_latency_"),
        "TorchServe's metrics API (ts_inference_requests_total, ts_queue_latency_microseconds... by model_name, and its"
        " host gauges): a model server kvpilot has no adapter for; no queue, KV or token figure",
    ),
    # Ollama's own /metrics (ollama/ollama pull requests #3529, #6537, #11159: ollama_eval_total,
    # ollama_prompt_eval_total, ollama_requests_total... by `model`): request and token counters of a server kvpilot has
    # no adapter for, and no queue, running batch or KV figure
    "ollama_": "Ollama's /metrics (ollama_eval_total, ollama_prompt_eval_total, ollama_*requests_total... by `model`):"
    " kvpilot has no Ollama adapter, and the page has no queue, running-batch or KV figure",
    # Xinference's own exporter (xorbitsai/inference pull request #906: xinference:generate_tokens_per_s,
    # xinference:input_tokens_total_counter... by model, node, format, quantization)
    "xinference:": "Xinference's metrics exporter (xinference:* by `model` and `node`: generate_tokens_per_s,"
    " input_tokens_total_counter...); kvpilot has no Xinference adapter: no queue, KV or running-batch figure",
    # AWS neuron-monitor's Prometheus exporter (DataDog/integrations-core aws_neuron/tests/fixtures:
    # neuron_hardware_info, neuroncore_utilization_ratio, neuroncore_memory_usage_*... by `neuroncore`, beside system_*
    # and instance_info)
    **dict.fromkeys(
        ("neuroncore_", "neuron_"),
        "AWS neuron-monitor's exporter (neuron_hardware_info, neuroncore_*: Inferentia/Trainium NeuronCores, with its"
        " system_* and instance_info): kvpilot reads no Neuron device, and no engine is on it",
    ),
    # routers in front of the engines: their queue and KV figures are the backends' (averaged or by worker)
    "inference_pool_": "the Gateway API Inference Extension's endpoint picker (llm-d's inference scheduler), whose"
    " inference_pool_* gauges average the model servers it routes to: scrape those servers",
    "sgl_router_": "SGLang's router, whose figures are its workers' by worker_url: scrape the SGLang workers",
    "smg_": "the SGLang Model Gateway (SGLang's router), whose figures are its workers': scrape the workers",
    # the vLLM Router (vllm-project/router, grown from SGLang's router): vllm_router_running_requests{worker},
    # vllm_router_processed_requests_total{worker}, vllm_router_active_workers... Its `vllm_` is no sanitised `vllm:`
    "vllm_router_": "the vLLM Router (vllm_router_*), whose figures are its workers' by `worker`: scrape the vLLM"
    " engines behind it",
    # llm-d's endpoint picker from EPP 0.9 writes only llm_d_epp_* (llm_d_epp_request_total,
    # llm_d_epp_per_endpoint_queue_size, llm_d_epp_flow_control_queue_size...: llm-d/llm-d issue #2269, "only
    # llm_d_epp_* remains"); before it, inference_objective_* (inference_model_* before that) and
    # inference_extension_* beside the pool's gauges
    **dict.fromkeys(
        (
            "llm_d_epp_",
            "inference_objective_",
            "inference_model_",
            "inference_extension_",
            "llm_d_inference_scheduler_",
        ),
        "llm-d's endpoint picker (the Gateway API Inference Extension's EPP), a router whose queue and KV figures are"
        " the model servers' it routes to: scrape those servers",
    ),
    # ScaleLLM's server (vectorch-ai/ScaleLLM pull request #210): its own names, no adapter for them
    "request_handling_latency_seconds": "ScaleLLM's server (request_status_total, request_handling_latency_seconds,"
    " scheduling_latency_seconds); kvpilot has no ScaleLLM adapter",
    # OpenVINO Model Server (openvinotoolkit/model_server: ovms_requests_success, ovms_infer_req_queue_size,
    # ovms_current_requests... by model `name`; MicroShift's model-serving guide shows a real page of it), which also
    # serves LLMs through OpenVINO GenAI under the same names: no adapter for them
    "ovms_": "OpenVINO Model Server (ovms_requests_success, ovms_infer_req_queue_size...); kvpilot has no OVMS adapter",
    # AMD's amd_smi_exporter (amd/amd_smi_exporter src/cpu_data.go: amd_gpu_power, amd_gpu_current_temperature,
    # amd_core_energy, amd_num_gpus...), whose GPUs collector.gpus.amd reads: a page reaching this has none of them (a
    # CPU-only node); device-metrics-exporter behind its amd_ prefix is told by its labels first
    "amd_": "an AMD exporter (amd_*) without a GPU series kvpilot reads: amd_smi_exporter's CPU gauges"
    " (amd_core_energy, amd_socket_power) or a node it found no GPU on; no engine is on it",
    # Intel Gaudi's Prometheus metric exporter (docs.habana.ai "Prometheus Metric Exporter": habanalabs_utilization,
    # habanalabs_memory_used_bytes, habanalabs_power_mW, ...): Gaudi devices, not GPUs kvpilot reads
    "habanalabs_": "Intel Gaudi's metric exporter (habanalabs_*): kvpilot reads no Gaudi device, and no engine is"
    " on it",
    # Huawei Ascend's npu-exporter (Ascend/ascend-npu-exporter collector/npu_collector.go; its golden page @ 0a8a973 :
    # collector/testdata/prometheus_metrics: npu_chip_info_utilization, npu_chip_info_hbm_used_memory... by NPU `id`,
    # machine_npu_nums): Ascend NPUs, which no GPU adapter reads; MindIE, the engine on them, serves its own page
    "npu_chip_info_": "Huawei Ascend's npu-exporter (npu_chip_info_* by NPU `id`): kvpilot reads no Ascend NPU, and no"
    " engine is on it (scrape MindIE's own /metrics for the replica)",
    # utkuozdemir/nvidia_gpu_exporter (nvidia-smi's query fields as nvidia_smi_*, labelled by uuid; its
    # METRICS.md @ 15d422b): NVIDIA GPUs, but under names no GPU adapter reads (collector.gpus)
    "nvidia_smi_": "nvidia_gpu_exporter (nvidia_smi_* gauges from nvidia-smi): " + _NVIDIA_NOT_READ,
    # NVML's figures as nvidia_gpu_* (pytimer/gpu-exporter's README page: nvidia_gpu_memory_used_mb,
    # nvidia_gpu_power_usage...; mindprince/nvidia_gpu_prometheus_exporter: nvidia_gpu_duty_cycle...). After
    # nvidia_smi_: nvidia_gpu_exporter's page carries its nvidia_gpu_exporter_build_info too
    "nvidia_gpu_": "an NVML GPU exporter (nvidia_gpu_* gauges): " + _NVIDIA_NOT_READ,
    # ROCm Omnistat's rocm-smi and amd-smi collectors (ROCm/omnistat @ 0e8d7ed : omnistat/collector_smi_v2.py,
    # prefix "rocm_": rocm_utilization_percentage, rocm_temperature_celsius{card,location},
    # rocm_average_socket_power_watts, rocm_vram_total_bytes... by `card`; its docs' real page @ 0eb1812 :
    # docs/developer/developers.md), and Omniwatch before it (rocm_num_gpus beside card0_rocm_*): AMD GPUs under
    # names no GPU adapter reads (collector.gpus)
    "rocm_": "ROCm Omnistat (rocm_* GPU gauges by `card`: rocm_utilization_percentage, rocm_temperature_celsius...):"
    " a GPU exporter kvpilot does not read; for these AMD GPUs scrape AMD's device-metrics-exporter (gpu_*) or"
    " amd_smi_exporter (amd_gpu_*); no engine is on it",
    # cAdvisor's per-container accelerator gauges (google/cadvisor issue #1912: container_accelerator_duty_cycle,
    # container_accelerator_memory_total_bytes of a Tesla K80 by acc_id/make/model, beside cadvisor_version_info), as
    # the kubelet wrote them until Kubernetes 1.20: NVIDIA GPUs, under names no GPU adapter reads
    "container_accelerator_": "cAdvisor's per-container accelerator gauges (container_accelerator_duty_cycle,"
    " container_accelerator_memory_*): " + _NVIDIA_NOT_READ,
    # cAdvisor itself, standalone or the kubelet's /metrics/cadvisor: the containers' CPU, memory and I/O
    **dict.fromkeys(
        ("cadvisor_", "container_"),
        "cAdvisor (cadvisor_version_info, container_*: the containers' CPU, memory and I/O, as a standalone cAdvisor or"
        " the kubelet's /metrics/cadvisor writes them): no engine is on it; point the target at the engine's /metrics",
    ),
    # Pages pointed at by mistake on the way to an engine's. KEDA's operator (DataDog/integrations-core
    # keda/tests/fixtures/keda_metrics.txt: keda_build_info 2.16.0, keda_scaler_metrics_value of a Redis ScaledJob)
    "keda_": "KEDA's operator (keda_build_info, keda_scaler_*: its ScaledObjects' and ScaledJobs' triggers), which asks"
    " kvpilot's external scaler for figures (docs/keda.md) and is no engine; point the target at the engines' /metrics",
    # the Prometheus server's own page (a real 2.40.5 page, index file 14084090669): prometheus_engine_queries and the
    # query engine's queue_time are PromQL's, not an engine's requests
    **dict.fromkeys(
        ("prometheus_build_info", "prometheus_engine_", "prometheus_tsdb_"),
        "the Prometheus server's own /metrics (prometheus_build_info, prometheus_tsdb_*, prometheus_engine_*: its"
        " storage and PromQL engine, whose queries and queue_time are PromQL's, not an engine's requests); point the"
        " target at the engines' /metrics",
    ),
    # Istio's sidecar: the merged page its agent serves on port 15020 (/stats/prometheus; DataDog/integrations-core
    # istio/tests/fixtures/1.5/istio-merged.txt: pilot-agent 1.11.4's istio_agent_* then its Envoy's envoy_*), which
    # holds the application's own metrics only when Istio merges them from the pod's prometheus.io annotations. Before
    # envoy_: such a page is Istio's, not a proxy's in front of the engines
    "istio_": "Istio's sidecar (istio_agent_*, istio_requests_* and its Envoy's envoy_*: the page its agent serves on"
    " port 15020 at /stats/prometheus, or Envoy's on 15090), without the engine's own metrics, which Istio merges onto"
    " it only when the pod's prometheus.io/port and prometheus.io/path annotations name the engine's; point the target"
    " at the engine's port and path",
    # the NGINX Ingress controller (DataDog/integrations-core nginx_ingress_controller/tests/fixtures/metrics.txt:
    # nginx_ingress_controller_bytes_sent, _request_duration_seconds... by ingress, service, path and status)
    "nginx_ingress_controller_": "the NGINX Ingress controller (nginx_ingress_controller_*: the requests it proxied by"
    " ingress, service and status), a proxy in front of the engines with no queue, KV or running-batch figure of a"
    " replica; scrape the engines behind it",
    # Envoy's statistics (DataDog/integrations-core envoy/tests/fixtures/openmetrics/openmetrics.txt:
    # envoy_cluster_upstream_rq_total, envoy_cluster_upstream_rq_pending_total... by envoy_cluster_name), the proxy
    # under Envoy AI Gateway, Istio and kgateway
    "envoy_": "Envoy's statistics (envoy_*: a proxy's listeners and upstream clusters, as under Envoy AI Gateway, Istio"
    " or kgateway), whose pending requests wait for a connection, not in an engine's queue; scrape the engines behind"
    " it",
    # an OpenTelemetry Collector's own telemetry (Elastic's distribution 8.15.0, a blog's page, index file 32346778844:
    # otelcol_receiver_accepted_metric_points, otelcol_scraper_scraped_metric_points... beside target_info)
    "otelcol_": "an OpenTelemetry Collector's own telemetry (otelcol_*: its receivers, processors and exporters), no"
    " engine; point the target at the engines' /metrics, or at a Prometheus exporter of the collector that re-exports"
    " them",
    # Alertmanager (a real 0.24.0 page, index file 14182870062: alertmanager_alerts_received_total, build_info...)
    "alertmanager_": "Prometheus' Alertmanager (alertmanager_*: the alerts it received and the notifications it sent),"
    " where kvpilot's alerts go, not an engine; point the target at the engines' /metrics",
    # kube-state-metrics (DataDog/integrations-core kubernetes_state/tests/fixtures/ksm-standard-tags-gke.txt:
    # kube_deployment_status_replicas, kube_daemonset_status_number_ready...): the cluster's objects, whose replicas are
    # deployments' pod counts, not engine replicas
    "kube_": "kube-state-metrics (kube_*: the cluster's objects, such as kube_deployment_status_replicas), which"
    " counts pods, not an engine's requests (kvpilot's Kubernetes discovery reads deployments and pods from the API"
    " itself); point the target at the engines' /metrics",
    # Prometheus' node_exporter (prometheus/node_exporter collector/fixtures/e2e-output.txt: node_cpu, node_disk_*...)
    "node_": "Prometheus' node_exporter (node_*: the host's CPU, memory, disks and network): no engine and no GPU is on"
    " it; point the target at the engine's /metrics port, and GPUs at dcgm-exporter or `kvpilot gpu-agent`",
    # Kong's gateway with its AI plugins (Kong AI Gateway's docs, "Metrics output example": kong_ai_llm_requests_total,
    # kong_ai_llm_tokens_total, kong_ai_llm_ttft_latency_ms... by ai_provider and ai_model, beside
    # kong_http_requests_total)
    "kong_": "Kong's gateway (kong_*; its kong_ai_llm_* count the requests, tokens and latencies of the LLM APIs or"
    " engines it proxies), a gateway with no queue, KV or running-batch figure of a replica; scrape the engines"
    " behind it",
}

# GPU exporters told by the labels only their series carry, whatever the names' prefix, on a page none of whose
# GPUs was read (AMD's device-metrics-exporter writes `gpu_gfx_activity`, or `amd_gpu_gfx_activity` with a configured
# prefix, each sample labelled by the GPU's partition modes: ROCm/device-metrics-exporter issues #171, #259, #353, pull
# request #236; collector.gpus.amd reads it, under either prefix: a page reaching this carries none of the fields read).
_GPU_EXPORTERS_NOT_READ: tuple[tuple[frozenset[str], str], ...] = (
    (
        frozenset(("gpu_compute_partition_type", "gpu_memory_partition_type")),
        "AMD's device-metrics-exporter (gpu_* labelled gpu_id, gpu_compute_partition_type), but none of the fields"
        " kvpilot reads a GPU from (gpu_gfx_activity, gpu_used_vram, gpu_junction_temperature, gpu_power_usage,"
        " gpu_ecc_uncorrect_total...) under the names it knows (no prefix, or `amd_`): enable them in the exporter's"
        " GPUConfig.Fields, or set the target's prefix to the exporter's MetricsFieldPrefix; no engine is on it",
    ),
)


class UnknownEngine(ValueError):
    """A page whose families match no engine adapter (or not the one asked for)."""


def _not_a_replica(families: Mapping[str, MetricFamily]) -> str | None:
    """What the page is when it carries an engine's names but is no replica of it (see ``_NOT_A_REPLICA``)."""
    for markers, what in _NOT_A_REPLICA.values():
        if any(name in families for name in markers):
            return what
    return None


def _gpu_exporter_not_read(families: Mapping[str, MetricFamily]) -> str | None:
    """What GPU exporter the page is, where kvpilot reads none of its GPUs (see ``_GPU_EXPORTERS_NOT_READ``)."""
    for labels, what in _GPU_EXPORTERS_NOT_READ:
        for family in families.values():
            if any(not labels.isdisjoint(sample.labels) for sample in family.samples[:1]):
                return what
    return None


def _engine_names_behind_prefix(names: list[str]) -> str | None:
    """An engine's names behind a stack's prefix that no adapter reads, said as such.

    A real grep of a Ray Serve LLM 2.52 page (vllm-project/vllm pull request #24267) holds one
    `ray_vllm_time_to_first_token_seconds_count` line and no TYPE line: vLLM's names behind Ray's prefix, yet no
    family any adapter reads. Before, the page was "Ray's own metrics; Ray Serve LLM pages carry ray_vllm_*"."""
    for name in names:
        for namespace in NAMESPACE_ORDER:
            for sep in (":", "_"):
                at = name.find(namespace + sep, 1)
                if at > 0 and name[at - 1] == "_":
                    prefix = name[:at]
                    return (
                        f"{namespace}'s names behind the prefix `{prefix}` (`{prefix}{namespace}{sep}*`, as Ray Serve"
                        " LLM writes them), but none that kvpilot reads a replica from (scheduler gauges, KV usage,"
                        " token counters, whole histograms: a `_count` line without its TYPE line is no histogram)"
                    )
    return None


def _families(n: int) -> str:
    return "1 family" if n == 1 else f"{n} families"


Evidence = tuple[int, int]


def _evidence(name: str, families: Mapping[str, MetricFamily]) -> Evidence:
    """How strongly the page is adapter ``name``'s: first the families only that adapter reads (and those it is told
    by its own label), then every family that identifies it (``score``).

    Names several adapters read decide only between adapters the page has no name of their own for: a sparse MindIE
    page (running, waiting and `npu_cache_usage_perc`) carries two names NIM identifies and MindIE reads too, and one
    only MindIE reads; it is MindIE's, not NIM's by a count of shared names.
    """
    adapter = ENGINES[name]
    score = adapter.score(families)
    if not score:
        return (0, 0)
    named = adapter.identifying or adapter.families
    by_label = score - sum(1 for n in families if n in named)  # identifying_label: the engine's own label
    own = _OWN_NAMES[name]
    return (sum(1 for n in families if n in own) + by_label, score)


def _best(families: Mapping[str, MetricFamily]) -> tuple[Evidence, str]:
    return max((_evidence(name, families), name) for name in ENGINES)


def _ranked(families: Mapping[str, MetricFamily]) -> list[tuple[Evidence, str]]:
    """Adapters by how much of the page is theirs (``_evidence``), best first, as detection ranks them: the engines,
    and a stack's fallback adapter only where no engine reads anything."""
    ranked = sorted(((_evidence(n, families), n) for n, a in ENGINES.items() if not a.fallback), reverse=True)
    if ranked[0][0][1] == 0:
        ranked = sorted(((_evidence(n, families), n) for n, a in ENGINES.items() if a.fallback), reverse=True)
    return ranked


def _two_best(families: Mapping[str, MetricFamily]) -> tuple[tuple[Evidence, str], tuple[Evidence, str]]:
    ranked = _ranked(families)
    return ranked[0], ranked[1] if len(ranked) > 1 else ((0, 0), "")


_AS_ENGINE = (
    "an engine's page, not a GPU exporter's: scrape it as an engine (`kind: engine`, the default, in a targets file"
    " or POST /v1/targets; the pod's `kvpilot.io/kind`; kvpilot scrape and parse without `--kind gpu` or"
    " `--engine dcgm`)"
)


def _gpu_exporters_read() -> str:
    """The GPU exporters collector.gpus reads, as a GPU target's error names them: from GPU_ADAPTERS itself, so an
    adapter added there is named here. Imported here, not at the top: collector.gpus' adapters import this module."""
    from collector.gpus import GPU_ADAPTERS

    shown = [adapter.shown for adapter in GPU_ADAPTERS.values()]
    return ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else "".join(shown)


def describe_page(families: Mapping[str, MetricFamily], *, gpu_target: bool = False) -> str:
    """What is on a page no adapter reads, and the nearest thing to try: prefixes, the closest adapter. For a GPU
    target (``gpu_target``) an engine's page is the wrong kind of target, not the wrong engine."""
    names = list(families)
    if not names:
        return "the page has no metric families at all"
    if is_kvpilot_page(names):
        return "this is kvpilot's own /metrics page (kvpilot_* families), not an engine's"
    stems = common_stems(names)
    if not stems:
        return f"found only runtime families ({', '.join(sorted(names)[:3])}), no engine's series"
    first, rest = stems[0], stems[1:]
    seen = f"found {_families(first[1])} starting with `{first[0]}`" + "".join(f", {n} with `{s}`" for s, n in rest)
    router = _not_a_replica(families)
    if router is not None:
        return f"{seen}: {router}"
    (evidence, name), (second, other) = _two_best(families)
    score = evidence[1]
    if score and gpu_target:
        return f"{seen}; it reads as {name}, {_AS_ENGINE}"
    if score and second == evidence:  # detection refuses a tie: the engine must be named
        return f"{seen}; it reads as {name} and as {other} equally ({_families(score)} each): pass `--engine`"
    if score:
        return f"{seen}; it reads as {name}: try `--engine {name}` or leave the engine out"
    found = find_prefix(names, IDENTIFYING_FAMILIES, NAMESPACE_ORDER)
    if found is not None:
        prefix, _ = found
        (_, score), name = _best(strip_prefix(families, prefix, NAMESPACE_ORDER, IDENTIFYING_FAMILIES))
        if score:
            return f"{seen}; try `--prefix {prefix}` or `--engine {name}` (prefix `{prefix}` before {name}'s names)"
    what_gpus = _gpu_exporter_not_read(families)
    if what_gpus is not None:
        return f"{seen}: {what_gpus}"
    behind = _engine_names_behind_prefix(names)
    if behind is not None:
        return f"{seen}: {behind}"
    trtllm_models = _triton_trtllm_models(families)
    if trtllm_models:
        return f"{seen}: {_TRITON_TRTLLM_SILENT.format(models=', '.join(f'`{m}`' for m in trtllm_models))}"
    for stem, what in _NOT_AN_ENGINE.items():  # no adapter matched: the first kind of page present says what it is
        if any(n.startswith(stem) for n in names):
            return f"{seen}: {what}"
    unread = _engine_namespace_unread(first[0])
    if unread is not None:
        return f"{seen}: {unread}"
    if gpu_target:  # GPUs were asked for: the adapters that could have read the page are the GPU exporters'
        return f"{seen}; no GPU exporter kvpilot reads ({_gpu_exporters_read()}) writes these names"
    return f"{seen}; no engine adapter ({', '.join(ENGINES)}) reads these names"


# TensorRT-LLM's Triton model repository names its models tensorrt_llm and tensorrt_llm_bls beside the ensemble's
# preprocessing and postprocessing (triton-inference-server/tensorrtllm_backend all_models/inflight_batcher_llm/). A
# page of Triton core's nv_inference_* series for such models but no nv_trt_llm_* series is that backend's page cut
# before them, or a backend writing none: still no queue, KV or token figure, but not "Triton without an LLM backend".
# Real pages: tensorrtllm_backend issues #49 and #667.
_TRITON_TRTLLM_SILENT = (
    "Triton serving TensorRT-LLM's models ({models}) but no nv_trt_llm_* series on the page (an excerpt, or a backend"
    " writing none): no queue, KV or token figure, so it is not read as an LLM replica"
)


def _triton_trtllm_models(families: Mapping[str, MetricFamily]) -> list[str]:
    models = {
        s.labels["model"]
        for name, fam in families.items()
        if name.startswith("nv_inference_")
        for s in fam.samples
        if s.labels.get("model", "").startswith("tensorrt_llm")
    }
    return sorted(models)


# The adapter that reads each engine namespace (``llamacpp`` of ``llamacpp:…``), the first in ENGINES' order.
_NAMESPACE_READER: dict[str, str] = {}
for _name, _adapter in ENGINES.items():
    for _family in sorted(_adapter.families):
        if ":" in _family:
            _NAMESPACE_READER.setdefault(_family.split(":", 1)[0], _name)
# Words of the names a replica is read from (scheduler gauges, KV usage), for the examples said: the shortest name
# with each word.
_REPLICA_WORDS = ("running", "processing", "waiting", "deferred", "usage")


def _engine_namespace_unread(stem: str) -> str | None:
    """An engine's own namespace whose names on the page no adapter reads, said as such (was "no engine adapter
    (vllm, ..., llamacpp, ...) reads these names", as if llama.cpp had no adapter).

    Real pages: llama-server's per-device memory gauges only (`llamacpp:memory_model_bytes`..., ggml-org/llama.cpp
    issue #26129, a build of pull request #26130), vLLM's `vllm:lora_requests_info` alone (vllm-project/vllm pull
    request #9477): the engine's names, but none that a replica's queue, KV or token figures come from."""
    namespace = stem[:-1] if stem.endswith(":") else None
    reader = _NAMESPACE_READER.get(namespace) if namespace else None
    if reader is None:
        return None
    read = sorted((n for n in ENGINES[reader].families if n.startswith(stem)), key=lambda n: (len(n), n))
    examples = list(dict.fromkeys(n for n in (_first(read, w) for w in _REPLICA_WORDS) if n is not None))
    return (
        f"{reader}'s namespace, but none of the names kvpilot's {reader} adapter reads a replica from"
        f" ({', '.join((examples or read)[:3])}...): a build or an excerpt without the scheduler, KV and token series"
    )


def _first(names: list[str], word: str) -> str | None:
    return next((n for n in names if word in n), None)


def detect_engine(families: Mapping[str, MetricFamily], previous: str | None = None) -> str:
    """The engine whose families the page carries most, names only it reads first (``_evidence``); ``UnknownEngine``
    when none or a tie.

    A page is reported rather than guessed: adapting the wrong engine would yield a replica whose every
    value is unknown, which downstream reads as "no data" instead of "misconfigured target".

    ``previous``: the engine the same target's last page read as. Where the page has no name only one adapter reads
    (a sparse MindIE page without `npu_cache_usage_perc` is NIM's names and MindIE's alike), or ties between
    ``previous`` and another, it stays ``previous`` if that adapter reads any of the page's names: a live target does
    not flip engine between scrapes. A page with a name only another adapter reads still reads as that one.
    """
    if _not_a_replica(families) is not None:
        raise UnknownEngine(f"no engine adapter matches this page: {describe_page(families)}")
    scores = _ranked(families)  # no engine's own series: a stack's (Dynamo frontend) may still be there
    best, name = scores[0]
    if best[1] == 0:
        raise UnknownEngine(f"no engine adapter matches this page: {describe_page(families)}")
    if previous is not None and _still(previous, best, families):
        return previous
    if len(scores) > 1 and scores[1][0] == best:
        raise UnknownEngine(f"page matches {name} and {scores[1][1]} equally; pass the engine explicitly")
    return name


def _still(previous: str, best: Evidence, families: Mapping[str, MetricFamily]) -> bool:
    """Whether a page whose best evidence is ``best`` stays the engine ``previous`` (see ``detect_engine``)."""
    adapter = ENGINES.get(previous)
    if adapter is None or not any(n in adapter.families for n in families):
        return False
    return best[0] == 0 or _evidence(previous, families) == best


def require_engine(name: str, families: Mapping[str, MetricFamily]) -> EngineAdapter:
    """The adapter named, checked against the page: a page with none of its families is an error."""
    adapter = ENGINES.get(name)
    if adapter is None:
        raise UnknownEngine(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    if adapter.score(families) == 0 or _not_a_replica(families) is not None:
        raise UnknownEngine(f"page has none of the {name} families: {describe_page(families)}")
    return adapter


__all__ = [
    "ENGINES",
    "ENGINE_FAMILIES",
    "IDENTIFYING_FAMILIES",
    "NAMESPACES",
    "NAMESPACE_ORDER",
    "EngineAdapter",
    "UnknownEngine",
    "describe_page",
    "detect_engine",
    "require_engine",
]
