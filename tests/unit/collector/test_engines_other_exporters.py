"""Pages of exporters and servers kvpilot reads nothing from say what they are (issue 12, session 16 helper A).

- AMD's device-metrics-exporter writes `gpu_*` gauges (`amd_gpu_*` with a configured prefix), every sample labelled
  by the GPU's partition modes (`gpu_compute_partition_type`, `gpu_memory_partition_type`): its GPUs are read since
  session 17 (helper A); a page of it with none of the fields read is told by those labels, not by the generic `gpu_`
  word, on an engine target and on a GPU target alike.
- Intel Gaudi's exporter writes `habanalabs_*`; ScaleLLM its own `request_handling_latency_seconds`...
Before, each was "no engine adapter ... reads these names" (or "none of the GPU exporters' families") without a word
of what the page is.
"""

from __future__ import annotations

import pytest

from collector.adapt import NoGpuFamilies, adapt_page
from collector.engines import UnknownEngine
from collector.samples import TargetInfo

TARGET = TargetInfo(url="http://10.0.0.9:5000/metrics", pod="node-0")
GPU_TARGET = TargetInfo(url="http://10.0.0.9:5000/metrics", pod="node-0", kind="gpu")

# label layout of ROCm/device-metrics-exporter issue #353's page (AMD AI 395+), values chosen here
_AMD_LABELS = (
    'card_model="",gpu_compute_partition_type="none",gpu_id="0",gpu_memory_partition_type="none",'
    'gpu_partition_id="0",hostname="node-0"'
)


@pytest.mark.parametrize("prefix", ["", "amd_"])
def test_amd_device_metrics_exporter_without_a_field_read_is_named(prefix: str) -> None:
    # since session 17 the exporter's GPUs are read (collector/gpus/amd.py, tests/unit/collector/test_amd.py); a page
    # of it with none of the fields read (voltage, VCN activity) is still named, and says what to enable
    page = f"# TYPE {prefix}gpu_voltage gauge\n{prefix}gpu_voltage{{{_AMD_LABELS}}} 12\n"
    with pytest.raises(UnknownEngine, match=r"AMD's device-metrics-exporter.*none of the fields kvpilot reads"):
        adapt_page(page, TARGET, 0.0)


@pytest.mark.parametrize("prefix", ["", "amd_"])
def test_amd_device_metrics_exporter_gpus_are_read(prefix: str) -> None:
    page = f"# TYPE {prefix}gpu_gfx_activity gauge\n{prefix}gpu_gfx_activity{{{_AMD_LABELS}}} 12\n"
    for target in (TARGET, GPU_TARGET):
        adapted = adapt_page(page, target, 0.0)
        assert adapted.engine is None
        assert adapted.replicas == []
        assert [(g.index, g.utilisation) for g in adapted.gpus] == [("0", 0.12)]


def test_amd_page_on_a_gpu_target_is_named_too() -> None:
    page = f"gpu_vcn_activity{{{_AMD_LABELS}}} 26\n"
    with pytest.raises(NoGpuFamilies, match="AMD's device-metrics-exporter"):
        adapt_page(page, GPU_TARGET, 0.0)
    with pytest.raises(UnknownEngine, match="AMD's device-metrics-exporter"):
        adapt_page(page, TARGET, 0.0, engine="dcgm")


def test_a_gpu_word_alone_is_not_taken_for_amd() -> None:
    # some other exporter's gpu_* without AMD's partition labels: not named AMD's
    with pytest.raises(UnknownEngine) as raised:
        adapt_page('gpu_utilization{gpu="0"} 50\n', TARGET, 0.0)
    assert "AMD" not in str(raised.value)


def test_intel_gaudi_exporter_is_named() -> None:
    # names as docs.habana.ai's Prometheus Metric Exporter lists them; labels and values chosen here
    page = 'habanalabs_utilization{bus_id="0000:19:00.0"} 37\nhabanalabs_power_mW{bus_id="0000:19:00.0"} 210000\n'
    with pytest.raises(UnknownEngine, match="Intel Gaudi's metric exporter"):
        adapt_page(page, TARGET, 0.0)


def test_scalellm_is_named() -> None:
    # names of vectorch-ai/ScaleLLM pull request #210's page; its bare prompt_tokens_total is not read as NIM's
    page = (
        'request_handling_latency_seconds{type="chat"} 0\nscheduling_latency_seconds 6.9e-05\n'
        "# TYPE prompt_tokens_total counter\nprompt_tokens_total 0\n"
    )
    with pytest.raises(UnknownEngine, match="ScaleLLM's server"):
        adapt_page(page, TARGET, 0.0)


def test_engine_names_behind_a_prefix_that_no_adapter_reads_are_said_so() -> None:
    # the one line of a Ray Serve LLM 2.52 grep (vllm-project/vllm pull request #24267), labels shortened
    page = 'ray_vllm_time_to_first_token_seconds_count{ReplicaId="3r4e76ag",engine="0",model_name="qwen-0.5b"} 266.0\n'
    with pytest.raises(UnknownEngine, match="vllm's names behind the prefix `ray_`") as raised:
        adapt_page(page, TARGET, 0.0)
    assert "Ray's own metrics" not in str(raised.value)  # before: it said the page lacked what it carries


def test_amd_smi_exporter_without_a_gpu_is_named() -> None:
    # names and label dimensions of amd/amd_smi_exporter src/cpu_data.go (each gauge labelled by its own name): a
    # node without GPUs writes only the CPU gauges and amd_num_gpus 0
    page = 'amd_num_gpus{num_gpus=""} 0\namd_socket_power{socket="0"} 150\namd_core_energy{thread="0"} 12\n'
    with pytest.raises(UnknownEngine, match=r"an AMD exporter .* without a GPU series kvpilot reads"):
        adapt_page(page, TARGET, 0.0)


def test_amd_smi_exporter_gpus_are_read() -> None:
    page = 'amd_num_gpus{num_gpus=""} 1\namd_gpu_power_avg{gpu_power_avg="0"} 150\n'
    assert [(g.index, g.power_w) for g in adapt_page(page, TARGET, 0.0).gpus] == [("0", 150.0)]


# utkuozdemir/nvidia_gpu_exporter's page (METRICS.md @ 15d422b), cut to three of its gauges and its info series
_NVIDIA_SMI_PAGE = (
    'nvidia_gpu_exporter_build_info{branch="",goversion="go1.16.5",revision="",version=""} 1\n'
    'nvidia_smi_gpu_info{name="NVIDIA GeForce RTX 2080 SUPER",uuid="df6e7a7c",index="0"} 1\n'
    'nvidia_smi_utilization_gpu_ratio{uuid="df6e7a7c"} 0\n'
    'nvidia_smi_memory_used_bytes{uuid="df6e7a7c"} 7.06740224e+08\n'
    'nvidia_smi_temperature_gpu{uuid="df6e7a7c"} 34\n'
)


def test_nvidia_gpu_exporter_is_named() -> None:
    # nvidia-smi's fields as nvidia_smi_*, by uuid: a GPU exporter whose GPUs kvpilot does not read. Before: "found 5
    # families starting with `nvidia_`; no engine adapter (vllm, ...) reads these names", nothing of what it is.
    with pytest.raises(UnknownEngine, match=r"nvidia_gpu_exporter .*a GPU exporter kvpilot does not read") as raised:
        adapt_page(_NVIDIA_SMI_PAGE, TARGET, 0.0)
    assert "reads these names" not in str(raised.value)
    assert "dcgm-exporter" in str(raised.value)  # what to scrape instead


def test_nvidia_gpu_exporter_on_a_gpu_target_is_named_too() -> None:
    with pytest.raises(NoGpuFamilies, match="nvidia_gpu_exporter") as raised:
        adapt_page(_NVIDIA_SMI_PAGE, GPU_TARGET, 0.0)
    assert "reads these names" not in str(raised.value)  # a GPU target asks for no engine
    with pytest.raises(UnknownEngine, match="nvidia_gpu_exporter"):
        adapt_page(_NVIDIA_SMI_PAGE, TARGET, 0.0, engine="dcgm")


def test_nvml_gpu_exporters_are_named() -> None:
    # pytimer/gpu-exporter's README page (two Tesla P4, labels shortened) and the names of
    # mindprince/nvidia_gpu_prometheus_exporter (nvidia_gpu_duty_cycle, nvidia_gpu_memory_used_bytes): NVML's figures as
    # nvidia_gpu_*, not read
    for page in (
        'nvidia_gpu_num_devices 2\nnvidia_gpu_power_usage{name="Tesla P4",uuid="GPU-9bb5"} 7\n',
        'nvidia_gpu_duty_cycle{minor_number="0",uuid="GPU-9bb5"} 12\nnvidia_gpu_memory_used_bytes{uuid="GPU-9bb5"} 1\n',
    ):
        with pytest.raises(UnknownEngine, match=r"an NVML GPU exporter .*a GPU exporter kvpilot does not read"):
            adapt_page(page, TARGET, 0.0)
        with pytest.raises(NoGpuFamilies, match="an NVML GPU exporter"):
            adapt_page(page, GPU_TARGET, 0.0)


# ROCm Omnistat's page in its docs (ROCm/omnistat @ 0eb1812 : docs/developer/developers.md, `curl
# localhost:8001/metrics` on a node of four AMD GPUs), cut to one GPU; and the page of Omniwatch, its predecessor, as
# Omniwatch's guide shows it (rocm_num_gpus beside card0_rocm_*), cut the same way
_OMNISTAT_PAGE = (
    "rocm_num_gpus 4.0\n"
    'rocm_temperature_celsius{card="0",location="edge"} 54.0\n'
    'rocm_average_socket_power_watts{card="0"} 35.0\n'
    'node_uptime_secs{kernel="5.14.0-503.38.1.el9_5.x86_64"} 948415.84\n'
)
_OMNIWATCH_PAGE = (
    "rocm_num_gpus 8.0\ncard0_rocm_temp_die_edge 32.0\ncard0_rocm_avg_pwr 93.0\ncard0_rocm_utilization 0.0\n"
)


@pytest.mark.parametrize("page", [_OMNISTAT_PAGE, _OMNIWATCH_PAGE])
def test_rocm_omnistat_is_named(page: str) -> None:
    # AMD GPUs under Omnistat's rocm_* names, which no GPU adapter reads. Before: "found 2 families starting with
    # `rocm_`, 1 with `node_`; no engine adapter (vllm, ...) reads these names", nothing of what the page is
    with pytest.raises(UnknownEngine, match=r"ROCm Omnistat .*a GPU exporter kvpilot does not read") as raised:
        adapt_page(page, TARGET, 0.0)
    assert "reads these names" not in str(raised.value)
    assert "device-metrics-exporter" in str(raised.value)  # what to scrape instead
    with pytest.raises(NoGpuFamilies, match="ROCm Omnistat") as on_gpu_target:  # asked for GPUs: named too
        adapt_page(page, GPU_TARGET, 0.0)
    assert "reads these names" not in str(on_gpu_target.value)


# Huawei Ascend's npu-exporter's own golden page (Ascend/ascend-npu-exporter @ 0a8a973 :
# collector/testdata/prometheus_metrics), cut to one NPU and three of its gauges
_NPU_EXPORTER_PAGE = (
    "machine_npu_nums 8\n"
    'npu_chip_info_name{id="0",name="910Awn-Ascend-V1",vdie_id=""} 1 1606402000\n'
    'npu_chip_info_utilization{id="0",vdie_id=""} 0 1606402000\n'
    'npu_chip_info_hbm_used_memory{id="0",vdie_id=""} 0 1606402000\n'
)


def test_ascend_npu_exporter_is_named() -> None:
    # Ascend NPUs, which no GPU adapter reads. Before: "found 3 families starting with `npu_`, 1 with `machine_`; no
    # engine adapter (vllm, ...) reads these names": nothing of what the page is
    with pytest.raises(UnknownEngine, match=r"Huawei Ascend's npu-exporter .*kvpilot reads no Ascend NPU") as raised:
        adapt_page(_NPU_EXPORTER_PAGE, TARGET, 0.0)
    assert "reads these names" not in str(raised.value)
    assert "MindIE" in str(raised.value)  # the engine on these NPUs, read from its own page
    with pytest.raises(NoGpuFamilies, match="Huawei Ascend's npu-exporter"):
        adapt_page(_NPU_EXPORTER_PAGE, GPU_TARGET, 0.0)


def test_a_mindie_page_with_npu_gauges_is_still_mindie() -> None:
    # MindIE's own npu_cache_usage_perc is no npu-exporter series: the page stays an engine's
    page = "npu_cache_usage_perc 0.25\nnum_requests_running 3\nnum_requests_waiting 1\n"
    assert adapt_page(page, TARGET, 0.0).engine == "mindie"


def test_lmcache_multiprocess_server_is_named() -> None:
    # LMCache's multiprocess server through its OpenTelemetry bridge (an LMCache run report's lines, index file
    # 62108247994). Before: "found 2 families starting with `lmcache_`; no engine adapter (vllm, ...) reads these
    # names", where its `lmcache:` pages are named
    page = (
        'lmcache_mp_lookup_requested_tokens_total{cache_salt="",model_name="facebook/opt-125m"} 960.0\n'
        'lmcache_mp_lookup_hit_tokens_total{cache_salt="",model_name="facebook/opt-125m"} 640.0\n'
    )
    with pytest.raises(UnknownEngine, match=r"LMCache's multiprocess server .*scrape the vLLM server") as raised:
        adapt_page(page, TARGET, 0.0)
    assert "reads these names" not in str(raised.value)
    # beside vLLM's own series the page is vLLM's, LMCache's lines a second tier not read into it
    beside = 'vllm:num_requests_running{model_name="facebook/opt-125m"} 2\n' + page
    assert adapt_page(beside, TARGET, 0.0).engine == "vllm"


def test_openvino_model_server_is_named() -> None:
    # OVMS's page as MicroShift's model-serving guide shows it (tests/fixtures/metrics/ovms-resnet50-partial__...).
    # Before: "found 1 family starting with `ovms_`; no engine adapter (vllm, ...) reads these names"
    page = (
        "# TYPE ovms_requests_success counter\n"
        'ovms_requests_success{api="KServe",interface="REST",method="ModelReady",name="ovms-resnet50"} 4\n'
    )
    with pytest.raises(UnknownEngine, match=r"OpenVINO Model Server .*kvpilot has no OVMS adapter") as raised:
        adapt_page(page, TARGET, 0.0)
    assert "reads these names" not in str(raised.value)


def test_a_gpu_target_of_no_gpu_exporter_names_the_gpu_exporters_not_the_engines() -> None:
    # a PyTorch training job's page (tests/fixtures/metrics/pytorch-training-job-eks__...): asked for GPUs, the error
    # said "no engine adapter (vllm, sglang, ...) reads these names", as if an engine had been asked for
    page = "# TYPE training_loss gauge\ntraining_loss 1.334257\ntraining_gpu_memory_used_bytes 79213568\n"
    for raises, target, engine in ((NoGpuFamilies, GPU_TARGET, None), (UnknownEngine, TARGET, "dcgm")):
        with pytest.raises(raises, match=r"found 2 families starting with `training_`; no GPU exporter kvpilot reads"):
            adapt_page(page, target, 0.0, engine=engine)
    with pytest.raises(UnknownEngine, match="no engine adapter") as engine_target:  # an engine target: as before
        adapt_page(page, TARGET, 0.0)
    assert "GPU exporter" not in str(engine_target.value)


def test_a_gpu_target_of_no_gpu_exporter_names_every_gpu_exporter_kvpilot_reads() -> None:
    # the list was a hand-written copy of collector.gpus.GPU_ADAPTERS (session 23 review): an adapter added there is
    # named in the error without a second edit
    from collector.gpus import GPU_ADAPTERS

    page = "# TYPE training_loss gauge\ntraining_loss 1.334257\ntraining_gpu_memory_used_bytes 79213568\n"
    with pytest.raises(NoGpuFamilies) as raised:
        adapt_page(page, GPU_TARGET, 0.0)
    for adapter in GPU_ADAPTERS.values():
        assert adapter.shown in str(raised.value)
