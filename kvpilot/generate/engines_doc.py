"""docs/engines.md, generated from the engine adapters' declarative mappings (``collector.engines``) and the GPU
adapters (``collector.gpus``): which series feed each canonical field, which older names are still read, and what
each engine cannot tell kvpilot. The prose that code cannot hold (how to switch metrics on) is ``ENABLE`` below,
one entry per registered adapter; the unit test fails when an adapter has none.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import collector.engines as engines_pkg
from collector.engines import ENGINES
from collector.engines._declarative import HISTOGRAM_FIELDS, SCALAR_FIELDS, DeclarativeAdapter, Field
from collector.gpus import GPU_ADAPTERS, amd, dcgm, triton
from collector.samples import GpuSample
from kvpilot.generate.markdown import md_cell, source_comments

# Display name, and how to make each engine serve the series kvpilot reads. Keyed like collector.engines.ENGINES.
ENABLE: dict[str, tuple[str, str]] = {
    "vllm": (
        "vLLM",
        "On by default: the OpenAI-compatible server (`vllm serve`) serves `/metrics` on its own port (8000 "
        "unless `--port`). Do not pass `--disable-log-stats`: in V1 it switches off the stat loggers, Prometheus's "
        "included; some releases also disable them when `--api-server-count` > 1 (vllm-project/vllm#22227). With "
        'data parallelism every engine labels its series `engine="N"`; kvpilot treats the pod as one replica.',
    ),
    "sglang": (
        "SGLang",
        "Start the server with `--enable-metrics`; `/metrics` is served on the server's port (30000 unless "
        "`--port`). `--enable-metrics-for-all-schedulers` adds per-rank series; kvpilot reads the lowest "
        "`tp_rank` of each `dp_rank` either way.",
    ),
    "tgi": (
        "Hugging Face TGI",
        "On by default: the router serves `/metrics` on its HTTP port (80 in the official image, `--port`). "
        "TGI's series carry no model label; name the deployment through discovery labels.",
    ),
    "trtllm": (
        "TensorRT-LLM behind Triton",
        "Triton serves metrics on port 8002 (`--allow-metrics=true`, the default; `--metrics-port`). The "
        "TensorRT-LLM backend reports its `nv_trt_llm_*` families there by itself; time to first token needs "
        "Triton's latency histograms (`--metrics-config histogram_latencies=true`) and a decoupled model.",
    ),
    "trtllm-pytorch": (
        "TensorRT-LLM, PyTorch backend (trtllm-serve, Dynamo workers)",
        "`trtllm-serve` serves `/metrics` on its own port; behind Dynamo, start the worker with "
        "`--publish-events-and-metrics` and `DYN_SYSTEM_PORT` set (the series appear on that port, next to Dynamo's). "
        "Releases up to 1.1 export only the five request series: queue, batch and KV stay unknown there.",
    ),
    "nim": (
        "NVIDIA NIM for LLMs",
        "On by default: NIM LLM containers serve `/metrics` on their HTTP port (8000), vLLM's series without the "
        "`vllm:` namespace. NIM builds that serve `vllm:` names are read by the vLLM adapter.",
    ),
    "mindie": (
        "Huawei MindIE (Ascend NPUs)",
        "The MindIE server serves `/metrics` (GPUStack's MindIE backend serves it on the instance's port, "
        "gpustack/gpustack#1785): vLLM V0's names without a namespace, the KV gauge named for the NPU "
        "(`npu_cache_usage_perc`). MindIE's documentation turns the service monitor on with "
        "`MIES_SERVICE_MONITOR_MODE=1` before the service starts; its Coordinator's `/metrics` then sums the nodes' "
        "pages under the same names: scrape the servers, not the Coordinator, or their requests count twice.",
    ),
    "dynamo": (
        "NVIDIA Dynamo (frontend and workers)",
        "The frontend serves `/metrics` on its HTTP port (8000); workers serve theirs on `DYN_SYSTEM_PORT` (set it, "
        "e.g. 8081). Point kvpilot at the workers where it can: their pages carry the engine's own series, which the "
        "engine's adapter reads (queue, KV). The Dynamo adapter is used only when a page has no engine series.",
    ),
    "llamacpp": (
        "llama.cpp (llama-server)",
        "Start `llama-server` with `--metrics` (off by default); `/metrics` is served on the server's port "
        "(8080 unless `--port`).",
    ),
}

_COMBINE = {
    "sum": "summed over samples",
    "mean": "mean over samples",
    "histogram": "histogram, merged over label sets",
}


# What each canonical ReplicaSample field means to an operator (keys checked against the dataclass by the test).
MEANING: dict[str, str] = {
    "requests_waiting": "requests queued, not yet scheduled",
    "requests_running": "requests in the running batch",
    "kv_usage": "share of the KV-cache pool in use, 0..1",
    "kv_capacity_tokens": "size of the KV-cache pool, tokens",
    "prefix_queries": "prompt tokens looked up in the prefix cache (counter)",
    "prefix_hits": "of those, tokens found in the cache (counter)",
    "preemptions": "requests preempted for lack of KV space (counter)",
    "prompt_tokens": "prompt tokens processed (counter)",
    "generation_tokens": "tokens generated (counter)",
    "requests_finished": "requests that left the engine, any reason (counter)",
    "ttft": "time to first token, histogram (s)",
    "itl": "inter-token latency, histogram (s)",
    "e2e": "end-to-end request latency, histogram (s)",
    "queue_time": "time queued before scheduling, histogram (s)",
}


def _field_meaning() -> dict[str, str]:
    return MEANING


def _sources(f: Field) -> str:
    names = [f"`{s}`" for s in f.sources]
    first, older = names[0], names[1:]
    text = first + (" (then " + ", ".join(older) + ")" if older else "")
    how = _COMBINE[f.combine] + (f", ×{f.scale:g} to seconds" if f.scale != 1.0 else "")
    return f"{text}; {how}"


def derived_fields(adapter: DeclarativeAdapter) -> set[str]:
    """Fields the adapter's ``derive`` hook sets (it returns its keys even on an empty page)."""
    return set(adapter.derive({}, {}))


def mapping_rows(adapter: DeclarativeAdapter) -> list[tuple[str, str]]:
    """(canonical field, where it comes from) for every ReplicaSample field an adapter could fill."""
    derived = derived_fields(adapter)
    rows = []
    for name in (*SCALAR_FIELDS, *HISTOGRAM_FIELDS):
        mapped = adapter.fields.get(name)
        parts = []
        if mapped is not None:
            parts.append(_sources(mapped))
        if name in derived:
            parts.append("computed from the page (see the notes)" if mapped is None else "else computed (notes)")
        rows.append((name, "; ".join(parts) if parts else "**not exported: always unknown**"))
    return rows


def adapter_module(adapter: object) -> ModuleType:
    """The ``collector.engines`` module whose ``ADAPTER`` this is (its docstring holds the mapping decisions)."""
    for info in pkgutil.iter_modules(engines_pkg.__path__):
        module = importlib.import_module(f"{engines_pkg.__name__}.{info.name}")
        if getattr(module, "ADAPTER", None) is adapter:
            return module
    raise LookupError(f"no module in collector.engines defines the adapter {adapter!r}")


def _notes(module_doc: str | None) -> str:
    """An adapter module's docstring without its title line: the mapping decisions, as written in the code."""
    doc = inspect.cleandoc(module_doc or "")
    return doc.split("\n", 1)[1].strip() if "\n" in doc else ""


def _engine_section(name: str, adapter: DeclarativeAdapter) -> list[str]:
    module = adapter_module(adapter)
    title = inspect.cleandoc(module.__doc__ or name).split("\n", 1)[0]
    meaning = _field_meaning()
    display, enable = ENABLE.get(name, (name, "(not documented yet)"))
    lines = [f"## {display} (`{name}`)", "", f"Adapter: `{module.__name__}`. {title}", ""]
    lines += [f"**Enabling metrics.** {enable}", ""]
    if adapter.model_labels:
        lines += ["Model name read from the label " + ", ".join(f"`{m}`" for m in adapter.model_labels) + ".", ""]
    lines += ["| canonical field | meaning | read from (first name present wins; older names after) |", "|---|---|---|"]
    for field, where in mapping_rows(adapter):
        lines.append(f"| `{field}` | {md_cell(meaning.get(field, ''))} | {md_cell(where)} |")
    lines.append("")
    if adapter.extra_families:
        extra = ", ".join(f"`{f}`" for f in sorted(adapter.extra_families))
        lines += [f"Also read, or used to recognise the page: {extra}.", ""]
    notes = _notes(module.__doc__)
    if notes:
        lines += ["Notes from the adapter:", "", notes, ""]
    return lines


_CONVERT = {"_percent": "÷ 100 (percent → ratio)", "_mib": "× 2²⁰ (MiB → bytes)", "_flag": "≠ 0 → true", "_same": ""}


def _gpu_section() -> list[str]:
    gpu_meaning = source_comments(GpuSample)
    lines = [
        "## GPUs: dcgm-exporter, Triton, NVML and AMD's exporters",
        "",
        "GPU pages are recognised by their families (" + ", ".join(f"`{n}`" for n in GPU_ADAPTERS) + "). "
        "dcgm-exporter is the usual source: a DaemonSet on every GPU node serving `/metrics` on port 9400. ",
        "",
        "### dcgm-exporter",
        "",
        _notes(dcgm.__doc__),
        "",
        "| GpuSample field | meaning | dcgm-exporter field | conversion |",
        "|---|---|---|---|",
    ]
    for m in dcgm.FIELDS:
        names = ", ".join(f"`{n}`" for n in m.families)
        conv = _CONVERT.get(m.convert.__name__, m.convert.__name__)
        lines.append(f"| `{m.field}` | {md_cell(gpu_meaning.get(m.field, ''))} | {names} | {conv} |")
    lines += [
        "| `last_xid` | last XID seen | `DCGM_FI_DEV_XID_ERRORS` (value, else label `err_code`) | |",
        "| `xid_count` | XIDs within the exporter's window | `DCGM_EXP_XID_ERRORS_COUNT`, summed over `xid` | |",
        "",
        "Kept as extras (`GpuSample.extra`): "
        + ", ".join(f"`{k}` ← `{v}`" for v, k in sorted((v, k) for k, v in dcgm.EXTRA.items()))
        + ".",
        "",
        "What dcgm-exporter's default counter file leaves out: the profiling fields (`DCGM_FI_PROF_*`, e.g. SM "
        "activity) and `DCGM_EXP_XID_ERRORS_COUNT` are not in every default collector CSV; enable them in the "
        "exporter's counters file (the profiling ones need a datacenter GPU). Fields the exporter cannot read arrive "
        "as DCGM's blank sentinels and become unknown. dcgm-exporter 4.9 renamed a set of default fields and changed "
        "some units (its release notes list them); the table above is exactly what kvpilot reads.",
        "",
        "### Triton's own GPU series",
        "",
        _notes(triton.__doc__),
        "",
        "Families read: " + ", ".join(f"`{n}`" for n in sorted(triton.FAMILIES)) + ". No XID, ECC or row-remapping "
        "series: a Triton-only node cannot feed the stuck-GPU detector's health checks.",
        "",
        "### NVML (no dcgm-exporter)",
        "",
        "`collector.gpus.nvml` reads NVML directly (the `nvidia-ml-py` package) on the node, for clusters without "
        "dcgm-exporter. Unlike dcgm-exporter's XID gauge, which keeps only the last XID, it drains NVML's XID event "
        "queue on every collect, so two XIDs between scrapes are both seen; it also reads the GPU recovery action "
        "(NVML field 230) that newer drivers report. It does not enumerate MIG instances (health belongs to the "
        "physical GPU) and needs the driver's library on the node. Memory is counted as nvidia-smi and "
        "dcgm-exporter count it (NVML's v2 query: the driver's reserve is neither used nor free).",
        "",
        "`kvpilot gpu-agent` (docs/gpu-agent.md) runs it on each node and serves the readings as a dcgm-exporter "
        "page — dcgm-exporter's names, units and labels — so the dcgm adapter above reads it; what dcgm-exporter "
        "does not export comes as `kvpilot_nvml_gpu_recovery_action`, `kvpilot_nvml_xid_events_total` (every XID "
        "since the agent started: `xid_count`), `kvpilot_nvml_gpu_lost`, `kvpilot_nvml_read_errors` and "
        "`kvpilot_nvml_retired_pages_pending`, with `kvpilot_nvml_gpu_info` so that a GPU NVML told nothing of "
        "still appears. Tested against a stub of the pynvml functions and against NVML's answers recorded on a "
        "real H200 beside nvidia-smi's (tests/fixtures/nvml/).",
        "",
        *_amd_section(),
    ]
    return lines


_AMD_CONVERT = {
    "_percent": "÷ 100 (percent → ratio)",
    "_mib": "× 2²⁰ (MB → bytes, read as MiB)",
    "_milli": "÷ 1000 from 1000 up (millidegrees)",
    "_micro": "÷ 10⁶ from 100,000 up (microwatts)",
    "_same": "",
}


def _amd_rows(reads: tuple[amd._Read, ...]) -> list[str]:
    rows = []
    for read in reads:
        field = f"`extra[{read.field!r}]`" if read.extra else f"`{read.field}`"
        names = ", then ".join(f"`{n}`" for n in read.names)
        unknown = (["0 is no reading"] if read.zero_unknown else []) + (["mean of its series"] if read.mean else [])
        unknown += ["wins on a partitioned GPU"] if read.partitioned_first else []
        conv = "; ".join(c for c in [_AMD_CONVERT.get(read.convert.__name__, read.convert.__name__), *unknown] if c)
        rows.append(f"| {field} | {names} | {conv} |")
    return rows


def _amd_section() -> list[str]:
    return [
        "### AMD: device-metrics-exporter and amd_smi_exporter",
        "",
        _notes(amd.__doc__),
        "",
        "| GpuSample field | device-metrics-exporter name (also with the `amd_` prefix; first a GPU has wins) | "
        "conversion |",
        "|---|---|---|",
        *_amd_rows(amd.DME_READS),
        "",
        "| GpuSample field | amd_smi_exporter name | conversion |",
        "|---|---|---|",
        *_amd_rows(amd.SMI_READS),
        "",
        "**Detectors on AMD GPUs.** The stuck-GPU detector's `hang` (a GPU pinned busy while its replica makes no "
        "token progress) and `idle_while_running` read `utilisation`, which is AMD's gfx activity as it is DCGM's "
        "GPU utilisation (the graphics/compute engine's busy share; on a partitioned GPU its compute cores' busy "
        "share, `gpu_gfx_busy_instantaneous`): both are on for AMD GPUs, joined to replicas "
        "by the exporter's `pod`/`namespace` labels (or the node), as for NVIDIA. `vanished` (a GPU its exporter "
        "stops listing) is on too. The XID conditions are NVIDIA's: the triage table (ENGINES.md) classes NVIDIA "
        "driver error codes, and no AMD reading is one, so none is made up: `last_xid` stays unknown on AMD GPUs "
        "and no XID finding (restart, reset or drain) comes from them. AMD's error readings are read and shown "
        "(`kvpilot parse`, the GPU views): uncorrectable ECC errors (`ecc_dbe_volatile`, every block's; "
        "`extra['ecc_uncorrectable_xgmi']` for the XGMI links), correctable ones, and the exporter's own "
        "`gpu_health` (`extra['amd_health']`, 0 = unhealthy). None of them drains a node on its own, because none "
        "maps onto a drain signal safely: `gpu_health` 0 is what AMD's device plugin withdraws a GPU on (an "
        "uncorrectable ECC count over a threshold, 0 by default; a critical event; a fatal CPER record), but the "
        "exporter also writes 0 for every GPU of the node when its gpuagent is unreachable or reports no GPU "
        "(ROCm/device-metrics-exporter pkg/amdgpu/gpuagent/gpuagent_health.go, `setUnhealthyGPU`), so it does not "
        "tell a sick GPU from a sick exporter; and an ECC count carries no class of the kind XID triage acts on "
        "(page retirement is the driver's, not kvpilot's). Alert on `amd_gpu_health == 0` or a rising "
        "`gpu_ecc_uncorrect_total` in Prometheus and drain by hand.",
        "",
        "Read through Prometheus (`collector.discovery.promql_url`): `promql_mode: replicas` reads AMD GPUs as a "
        "scrape does. `aggregates` selects server-side the device-metrics-exporter GPUs a detector needs and reads "
        "every series of those only: a GPU serving a stuck replica (requests running, no token over the rate window; "
        "joined by the `namespace` and `pod` the exporter labels it with, so its scrape config needs "
        "`honor_labels: true`; kvpilot keeps them on the GPU, so it joins its replica by pod as when scraped), "
        "whose utilisation the `hang` and `idle_while_running` conditions read, and a GPU with "
        "an uncorrectable ECC error, shown as a DCGM double-bit error is; `gpu_health` and the other extras come with "
        "them. The answer grows with the sick GPUs, not the fleet. No XID is read or made up. A GPU the selection "
        "stops naming is healthy again, not gone; a GPU its exporter stops listing while the exporter answers "
        "(`up == 1`) is selected apart and raises `vanished`, for NVIDIA and both AMD exporters "
        "(docs/scaling-large-fleets.md). amd_smi_exporter's GPUs carry no pod, no UUID and no ECC or XID reading: "
        "in `aggregates` mode those on a node where a stuck replica runs are read, joined by Prometheus' `node` "
        "label on the exporter's and the replica's targets (relabelled from the pod's node; without it none is), as "
        "a scrape joins a GPU without a pod to the replicas of its node; none is selected by a fault. AMD's series "
        "stay out of the replicas' query (the exporter labels a GPU with the pod using it).",
        "",
    ]


def engines_page() -> str:
    meaning = _field_meaning()
    lines = [
        "<!-- Generated by kvpilot/generate/engines_doc.py (`make generate`); do not edit by hand. -->",
        "",
        "# Engines and GPU sources",
        "",
        "kvpilot reads every engine's own `/metrics` page and maps it onto one canonical `ReplicaSample` "
        "(`collector/samples.py`). The engine is recognised by the series the page carries (or named per target). "
        "A value an engine does not export stays **unknown** (`None`), never 0: a detector or the scaler that needs it "
        "stays silent for that replica rather than acting on an invented number. The tables below are generated from "
        "the adapters in `collector/engines/` and `collector/gpus/`, so they are what the code reads.",
        "",
        "Counters (`prefix_*`, `preemptions`, `*_tokens`, `requests_finished`) become rates over "
        "`collector.rate_window_s`; histograms are merged across label sets and read as quantiles.",
        "",
        "## Serving stacks: prefixes, several replicas on one page, pages that are not an engine's",
        "",
        "- **Prefixed names.** Some stacks put text before the engine's names: Ray Serve LLM serves vLLM's series as "
        "`ray_vllm:…`, or `ray_vllm_…` on Ray releases that sanitise names (kvpilot restores the engine's `vllm:`), "
        "with Ray's labels (`Component`, `ReplicaId`, `WorkerId`…). Set `prefix: ray_` on the target "
        "(targets file, `static_targets`, the pod annotation `kvpilot.io/prefix`; `kvpilot parse` and "
        "`kvpilot scrape` with `--prefix ray_`; "
        "targets added through the API rely on the search), or leave it out: when no adapter reads a page, kvpilot "
        "looks for the leading text that turns the most names into an engine's, reads the page with it removed, and "
        'remembers it for that target. `prefix: ""` turns the search off.',
        "- **vLLM-compatible servers under their own namespace.** LMDeploy (`lmdeploy:`), FastDeploy (`fastdeploy:`) "
        "and vLLM forks such as Aphrodite (`aphrodite:`) write vLLM's names under a namespace of their own: that "
        "namespace stands in place of `vllm:` (the engine namespace under which most of the page's names are an "
        "adapter's), so the page reads as vLLM, and `kvpilot parse` says under which namespace it read it. Where "
        "such a server names a series differently, its name is read as vLLM's: LMDeploy's per-token "
        "`iter_token_latency` is the ITL (its `time_per_output_token_seconds` is observed once per request), and "
        "the requests its API server holds for a free engine instance (`num_api_requests_waiting`) are waiting "
        "requests beside the engine's own; FastDeploy's `num_requests_enqueued` (queued, not yet scheduled) too. "
        "What such a server does not export stays unknown (LMDeploy and FastDeploy write no cache config, so "
        "`kv_capacity_tokens` is unknown; neither writes prefix-cache counters). Written sanitised by a stack that "
        "rewrites names (`lmdeploy_…`), the namespace of a server known to do this (LMDeploy, FastDeploy, Aphrodite, "
        "GPUStack) reads the same; any other word before vLLM's bare names is read as a prefix before NIM's (whose "
        "names are the same strings: nothing on the page tells the two apart).",
        "- **GPUStack.** A GPUStack worker's page renames each model instance's series into `gpustack:` (vLLM's, "
        "SGLang's and MindIE's alike, mostly to vLLM's names) and reads as vLLM under that namespace: "
        "`kv_cache_usage_ratio` is the KV usage, `request_preemptions` the preemptions, and its "
        "`time_per_output_token_seconds` (vLLM's per-request figure) is not read as the ITL "
        "(`inter_token_latency_seconds` is). Each `model_instance_name` is a replica of its own.",
        "- **One replica per model, per Ray worker, per gateway worker.** A page whose series carry several values "
        "of the model label (Triton with two TensorRT-LLM models, a Dynamo frontend serving two models), of Ray's "
        "`ReplicaId` or `WorkerId`, of `worker_addr` (SGLang Model Gateway's `/engine_metrics`, its workers' "
        "pages on one), of GPUStack's `model_instance_name`, or of `model` on llama.cpp pages (Docker Model Runner "
        "serves its runners' pages as one, labelled by `model`) "
        "yields one replica each, named `<pod>#<label values>`; their queues and counters are never "
        'summed. Data-parallel engines of one vLLM pod (`engine="N"`) stay one replica. Ray workers that are helper '
        "actors of a Serve replica (SGLang's schedulers as Ray actors, writing with an empty `ReplicaId`) are not "
        "replicas of their own: there `ReplicaId` alone tells replicas apart.",
        "- **Engine-reported facts win.** Where an engine states a value (vLLM's `kv_cache_size_tokens`), it is used "
        "rather than one derived from other series (`num_gpu_blocks × block_size`, wrong for hybrid-KV models). "
        "vLLM reports it per engine since 0.24 (PR 42206). Before, the product is kept where vLLM's source makes it "
        "the pool: each data-parallel engine's sample carries the front end's total `num_gpu_blocks`, so it is "
        "counted once, not once per engine. It is unknown rather than wrong for a model with Mamba-type layers "
        "(`mamba_block_size` or `mamba_page_size_padded` a number above 0: Qwen3.5/3.6, Qwen3-Next, Nemotron-H; the "
        "front end wrote a block size its engine did not use: 18,352 for a pool of 1,708,404), an attention-free "
        'model, a model without KV cache groups (an encoder-only model: `kv_cache_size_tokens` "None", a pool of one '
        "block), and a V1 page with a `sliding_window` (gpt-oss, Gemma 3: several KV groups share the blocks, the "
        "product is that many times too large, and the page does not tell such a model from one whose every layer "
        "slides). Llama 4's chunked local attention, encoder-decoder cross-attention and decode context parallelism "
        "leave no label on the page: on vLLM before 0.24 their product may be off.",
        "- **Not an LLM replica.** Triton without TensorRT-LLM (`nv_inference_*` only) yields its GPUs and no replica; "
        "an LMCache-only page (`lmcache:*`, or LMCache's multiprocess server's `lmcache_mp_*`), a GPU exporter's "
        "page, KServe's model server without an engine "
        "(`request_predict_seconds` only), DCGM fields named in lower case (`dcgm_fi_*`) or kvpilot's own "
        "`/metrics` are named as such in the error. AMD's device-metrics-exporter and amd_smi_exporter pages yield "
        "their GPUs (below), on an engine target and a GPU target alike; a device-metrics-exporter page with none of "
        "the fields read (told by its `gpu_compute_partition_type` and `gpu_memory_partition_type` labels, not by "
        "the word `gpu_`) and an amd_smi_exporter page without a GPU (`amd_*` CPU gauges) are named as such. So is "
        "Intel Gaudi's exporter (`habanalabs_*`) and Huawei Ascend's npu-exporter (`npu_chip_info_*`), whose devices "
        "kvpilot does not read; nvidia_gpu_exporter "
        "(`nvidia_smi_*` from nvidia-smi) and NVML exporters writing `nvidia_gpu_*`, whose GPUs it does not read "
        "either (scrape dcgm-exporter or run `kvpilot gpu-agent` for them); ROCm Omnistat (`rocm_*` gauges by "
        "`card`), whose AMD GPUs it does not read (scrape AMD's device-metrics-exporter or amd_smi_exporter); "
        "engines without an adapter (ScaleLLM, OpenVINO Model Server, Xinference's `xinference:*` exporter, "
        "TorchServe's `ts_inference_*`, Ollama's `ollama_*`); AWS neuron-monitor's exporter (`neuron_hardware_info`, "
        "`neuroncore_*`), whose Inferentia/Trainium devices it does not read; a Dynamo runtime component's generic "
        "endpoint series (`dynamo_component_requests_total`...) for no model and no `generate` endpoint, which are "
        "no LLM worker's (a worker's carry a `model` label or serve `generate`); and an engine's names behind a "
        "stack's prefix none of which an adapter reads (one grep'd `ray_vllm_..._count` line). "
        "So are routers in front of the engines, whose queue and KV figures are their backends' (the vLLM "
        "production-stack router, llm-d's endpoint picker with `inference_pool_*`, `inference_objective_*` or, from "
        "EPP 0.9, `llm_d_epp_*`, the vLLM Router's `vllm_router_*`, SGLang's router `sgl_router_*` "
        "or `smg_*`, LiteLLM's proxy `litellm_*`): scrape the engines behind them. "
        "Pages pointed at on the way to an engine's are named too: KEDA's operator (`keda_*`), Prometheus' "
        "node_exporter (`node_*`), the Prometheus server's own page (`prometheus_build_info`, `prometheus_engine_*`, "
        "whose PromQL queries and `queue_time` are no engine's), cAdvisor (`container_*`; its per-container "
        "`container_accelerator_*` GPU gauges are not read: scrape dcgm-exporter or run `kvpilot gpu-agent`) and "
        "Kong's gateway (`kong_*`; its `kong_ai_llm_*` count the LLM calls it proxies), Alertmanager "
        "(`alertmanager_*`), kube-state-metrics (`kube_*`, whose replicas are pod counts: kvpilot reads "
        "deployments from the Kubernetes API), Istio's sidecar (`istio_*` beside its Envoy's `envoy_*`: the merged "
        "page on port 15020 carries the engine's metrics only when the pod's prometheus.io annotations name them), the "
        "NGINX Ingress controller (`nginx_ingress_controller_*`) and Envoy's statistics (`envoy_*`, under Envoy AI "
        "Gateway or kgateway: its pending requests wait for a connection, not in an engine's queue), and an "
        "OpenTelemetry Collector's own telemetry (`otelcol_*`). "
        "LMCache's `lmcache:*` series beside vLLM's are a second cache tier and are not mixed into the prefix-cache "
        "counters.",
        "- **Which engine a page is.** The names only one adapter reads decide first, then every name that "
        "identifies an adapter: a MindIE page with only its scheduler gauges (vLLM V0's unprefixed names, which NIM "
        "writes too) and `npu_cache_usage_perc` is MindIE's, not NIM's by a count of shared names. Two adapters "
        "with as much of the page each are a tie, and the engine must be named. A live target keeps the engine its "
        "last page read as where a page could be either (none of the names only one adapter reads, or a tie with "
        "that engine): a MindIE target whose page lacks `npu_cache_usage_perc` on one scrape stays MindIE rather "
        "than flipping to NIM and back; a page with a name only another adapter reads switches it.",
        "- **A page that is JSON** is an error that says so: llama-server from build 7010 until ggml-org/llama.cpp "
        "pull request #17386 served `/metrics` as one JSON-quoted string (upgrade the server); trtllm-serve's "
        "`/metrics` is JSON iteration stats, its Prometheus page `/prometheus/metrics`. An error answered in JSON "
        '(FastAPI\'s `{"detail":"Not Found"}`: SGLang without `--enable-metrics`, or a node of a multi-node SGLang '
        "server other than its first, which serves no `/metrics`), an HTML page (a proxy's error "
        "page) or an HTTP error's text (`404 page not found`, Go's answer for a path it lacks; Starlette's plain "
        "`Not Found`) is named as such.",
        "- **When no adapter matches**, the error lists the leading words of the page's families and what to try, "
        "e.g. found 53 families starting with `ray_vllm:`; try `--prefix ray_` or `--engine vllm`. Naming an "
        "engine (`--engine`, a target's `engine:`) whose series the page lacks is an error too.",
        "",
        "## What each engine can tell kvpilot",
        "",
        "| canonical field | " + " | ".join(f"`{n}`" for n in ENGINES) + " |",
        "|---|" + "---|" * len(ENGINES),
    ]
    adapters = {n: a for n, a in ENGINES.items() if isinstance(a, DeclarativeAdapter)}
    for field in (*SCALAR_FIELDS, *HISTOGRAM_FIELDS):
        cells = []
        for name in ENGINES:
            a = adapters.get(name)
            known = a is not None and (field in a.fields or field in derived_fields(a))
            cells.append("yes" if known else "—")
        lines.append(f"| `{field}` ({md_cell(meaning.get(field, ''))}) | " + " | ".join(cells) + " |")
    lines += [
        "",
        "\u2014: the engine exports nothing kvpilot can read for it. Consequences: without `kv_usage` the "
        "KV-exhaustion detector is silent; without `prefix_queries`/`prefix_hits` the prefix-cache detector is; "
        "without `ttft` the TTFT SLO burn detector is; the scaler then works from queue length and arrivals alone.",
        "",
    ]
    for name, adapter in adapters.items():
        lines += _engine_section(name, adapter)
    lines += _gpu_section()
    return "\n".join(lines)


ENGINES_PAGE = "docs/engines.md"


def files() -> dict[str, str]:
    """The engines page, for ``kvpilot.generate``."""
    return {ENGINES_PAGE: engines_page()}
