"""`kvpilot parse`: JSON and table output of saved pages, and every failure as exit 2 with a reason."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from collector.samples import GpuSample, Histogram, ReplicaSample
from kvpilot.cli import app
from kvpilot.render import sample_to_dict, samples_json

REPLICA_KEYS = [f.name for f in fields(ReplicaSample)]
# pages that are deliberately neither an LLM replica nor GPUs (tests/fixtures/metrics/README.md)
# pages that are an error, with what they are: Triton's TTFT alone; the vLLM production-stack router's page; llm-d's
# endpoint picker; LiteLLM's proxy; a Ray node without Serve LLM; vLLM's docs excerpt with no field of a replica;
# JetStream's page; LMCache's own pages
NOT_A_REPLICA_NOR_GPUS = {
    "triton-ttft-only__handwritten.txt",
    "vllm-production-stack-router__handwritten.txt",
    "llm-d-epp__gateway-api-inference-extension__guides_metrics__from-source.txt",
    "gaie-epp-sim-two-pods-head__index-28203871539__excerpt.txt",  # an endpoint picker, EPP <= 0.3 names
    "llm-d-epp-1.4-gaie-sim-three-pods-grep__index-58599990987__excerpt.txt",  # an endpoint picker, EPP 1.x names
    "litellm-proxy__DataDog__integrations-core__litellm_metrics_v1_95__trimmed.txt",
    "ray-node__DataDog__integrations-core__ray_worker__trimmed.txt",
    "vllm-docs-fragment__vllm-project__vllm__docs_source_serving_metrics__excerpt.txt",
    "jetstream__AI-Hypercomputer__JetStream__pull_121__excerpt.txt",  # JetStream: no adapter reads jetstream_*
    "lmcache-server__LMCache__LMCache__pull_1318__excerpt.txt",  # LMCache's own metrics server
    "lmcache-retrieve__LMCache__LMCache__issue_729__excerpt.txt",  # LMCache's series alone
    "lmcache-mp-server-three-requests__index-62108247994__excerpt.txt",  # LMCache's multiprocess server
    "sglang-grpc-sidecar-sanitised__smg-project__smg__pull_813__excerpt.txt",  # only SGLang families read by nothing
    "triton-trtllm-ensemble-no-backend-metrics__triton-inference-server__tensorrtllm_backend__issue_49__excerpt.txt",
    "dcgm-lowercase-names-mig__NVIDIA__dcgm-exporter__issue_272__excerpt.txt",  # DCGM fields in lower case
    "kserve-model-server__kserve__kserve__qpext_main_test.txt",  # KServe's own latency histograms only
    "scalellm__vectorch-ai__ScaleLLM__pull_210__excerpt.txt",  # ScaleLLM: no adapter
    "ovms-resnet50-partial__openshift__microshift__ai_model_serving__excerpt.txt",  # OpenVINO Model Server
    "sgl-router-2025-05__sgl-project__sglang__pull_6537__excerpt.txt",  # SGLang's router
    "triton-2021-cache-metrics__triton-inference-server__server__pull_3569__excerpt.txt",  # Triton, no LLM, no GPU
    "triton-25.10-failure-reasons__triton-inference-server__server__issue_8561__excerpt.txt",  # Triton 25.10, ResNet
    "vllm-0.2-aioprometheus__vllm-project__vllm__pull_1890__excerpt.txt",  # HTTP counters, no figure of a replica
    "ray-serve-llm-2.52-sanitised-grep__vllm-project__vllm__pull_24267__excerpt.txt",  # one TTFT _count line
    # TensorRT-LLM's models on Triton, no nv_trt_llm_* series; llama.cpp's memory gauges only; vLLM's LoRA gauges only
    "triton-trtllm-ensemble-bls__triton-inference-server__tensorrtllm_backend__issue_667__excerpt.txt",
    "llamacpp-memory-gauges-m1pro__ggml-org__llama.cpp__issue_26129__excerpt.txt",
    "vllm-0.6-lora-requests-info__vllm-project__vllm__pull_9477__excerpt.txt",
    "vllm-lora-adapter-loaded__vllm-project__vllm__pull_54830__excerpt.txt",
    "triton-25.03-vllm-backend-grep__triton-inference-server__server__issue_8463__excerpt.txt",  # core series only
    "lmcache-in-vllm-v1-grep__LMCache__LMCache__issue_621__excerpt.txt",  # vLLM's page cut to LMCache's lines
    "lmcache-in-vllm-metrics__LMCache__LMCache__pull_1100__excerpt.txt",
    "nvidia-gpu-exporter-rtx2080s__utkuozdemir__nvidia_gpu_exporter__METRICS.txt",  # a GPU exporter not read
    "nvidia-gpu-nvml-exporter-two-p4__pytimer__gpu-exporter__README.txt",  # another one
    "omnistat-4-gpus-curl__ROCm__omnistat__docs_developer__excerpt.txt",  # ROCm Omnistat: AMD GPUs not read
    "ascend-npu-exporter-8x-910a__Ascend__ascend-npu-exporter__collector_testdata.txt",  # Ascend NPUs not read
    "pytorch-training-job-eks__index-54291311193__excerpt.txt",  # a training job's own gauges
    "vllm-spec-decode-dgx-spark__index-59883029386__excerpt.txt",  # vLLM's spec-decode counters only
    "xinference-exporter__xorbitsai__inference__pull_906__excerpt.txt",  # Xinference's own exporter
    "aws-neuron-monitor-inf1__DataDog__integrations-core__aws_neuron_metrics__trimmed.txt",  # Neuron devices not read
    "dynamo-runtime-example-component__ai-dynamo__dynamo__system_metrics_README.txt",  # a component, no LLM worker
    "torchserve-five-models__DataDog__integrations-core__torchserve_openmetrics_metrics.txt",  # TorchServe
    "litellm-proxy-2025-06__DataDog__integrations-core__litellm_metrics__trimmed.txt",  # a gateway
    "ollama-eval-counters__ollama__ollama__pull_11159__excerpt.txt",  # Ollama's own counters
    "keda-operator-2.16__DataDog__integrations-core__keda_metrics__trimmed.txt",  # KEDA's operator
    "node-exporter-e2e__prometheus__node_exporter__e2e_output__trimmed.txt",  # a host exporter
    "prometheus-2.40-server__index-14084090669__trimmed.txt",  # the Prometheus server itself
    "cadvisor-0.28-k80-accelerator__google__cadvisor__issue_1912__excerpt.txt",  # cAdvisor's GPU gauges, not read
    "kong-ai-gateway-docs__index-69525788031__excerpt.txt",  # a gateway
    "alertmanager-0.24__index-14182870062__excerpt.txt",  # where kvpilot's alerts go
    "kube-state-metrics-gke__DataDog__integrations-core__ksm_standard_tags_gke__trimmed.txt",  # the cluster's objects
    "envoy-two-clusters__DataDog__integrations-core__envoy_openmetrics__trimmed.txt",  # a proxy
    "istio-1.11-merged-sidecar__DataDog__integrations-core__istio_merged__trimmed.txt",  # Istio's sidecar, merged page
    "nginx-ingress-controller-go1.10__DataDog__integrations-core__nginx_ingress_controller_metrics__trimmed.txt",
    "otelcol-elastic-8.15-internal__index-32346778844__excerpt.txt",  # an OTel Collector's own telemetry
    "vllm-decode-time-buckets-dp-engine1__vllm-project__vllm__pull_22227__excerpt.txt",  # decode-time buckets alone
}
GPU_KEYS = [f.name for f in fields(GpuSample)]
KVPILOT = Path(sys.executable).with_name("kvpilot")


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, ["parse", *args])


def test_json_of_the_vllm_dp_page(metrics_fixtures: Path) -> None:
    result = _run(str(metrics_fixtures / "vllm-v1-dp2__handwritten.txt"), "--json")
    assert result.exit_code == 0, result.stderr
    doc = _strict_json(result.stdout)
    assert list(doc) == ["replicas", "gpus"]
    assert doc["gpus"] == []
    (replica,) = doc["replicas"]
    assert list(replica) == REPLICA_KEYS
    assert (replica["engine"], replica["model"]) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct")
    assert (replica["requests_waiting"], replica["requests_running"], replica["kv_usage"]) == (8.0, 21.0, 0.5)
    assert (replica["prompt_tokens"], replica["kv_capacity_tokens"]) == (310000.0, 320000.0)
    ttft = replica["ttft"]
    assert list(ttft) == ["bounds", "counts", "sum", "count"]
    assert (ttft["bounds"][0], ttft["bounds"][-1], ttft["counts"][-1], ttft["count"]) == (0.001, "+Inf", 616.0, 616.0)


@pytest.mark.parametrize("engine", ["auto", "dcgm"])
def test_json_of_the_dcgm_page(metrics_fixtures: Path, engine: str) -> None:
    # auto: a page with only GPU families yields GPUs; dcgm: asked for explicitly
    result = _run(str(metrics_fixtures / "dcgm-mig-hostname__handwritten.txt"), "--json", "--engine", engine)
    assert result.exit_code == 0, result.stderr
    doc = _strict_json(result.stdout)
    assert doc["replicas"] == []
    assert [g["index"] for g in doc["gpus"]] == ["0", "1", "2/1", "2/2"]
    assert all(list(g) == GPU_KEYS for g in doc["gpus"])
    assert (doc["gpus"][0]["last_xid"], doc["gpus"][0]["utilisation"], doc["gpus"][1]["sm_active"]) == (79, 0.87, None)


@pytest.mark.parametrize(
    "fixture",
    sorted(p.name for p in (Path(__file__).resolve().parents[3] / "fixtures" / "metrics").glob("*.txt")),
)
def test_every_fixture_parses_to_strict_json(metrics_fixtures: Path, fixture: str) -> None:
    result = _run(str(metrics_fixtures / fixture), "--json")
    if fixture in NOT_A_REPLICA_NOR_GPUS:
        assert result.exit_code == 2, result.stderr
        assert result.stderr.startswith("kvpilot parse: ")
        return
    assert result.exit_code == 0, result.stderr
    doc = _strict_json(result.stdout)
    assert doc["replicas"] or doc["gpus"]


def test_prefix_option_reads_a_ray_serve_page(metrics_fixtures: Path) -> None:
    page = metrics_fixtures / "ray-serve-vllm__DataDog__integrations-core__ray_vllm_metrics__trimmed.txt"
    result = _run(str(page), "--json", "--prefix", "ray_", "--engine", "vllm")
    assert result.exit_code == 0, result.stderr
    (replica,) = _strict_json(result.stdout)["replicas"]
    assert (replica["engine"], replica["generation_tokens"]) == ("vllm", 300.0)


WRONG_PREFIX = [
    # a Ray Serve page read with a prefix none of its families carries: said so, and that it reads without it
    # (the adapters saw no family under the prefix, which read as "the page has no metric families at all")
    (
        "ray-serve-vllm__DataDog__integrations-core__ray_vllm_metrics__trimmed.txt",
        "no family on the page starts with `foo_` \\(--prefix\\); "
        "without it the page reads as vllm: leave --prefix out",
    ),
    # a page that no adapter reads either way: the prefix is named, then what the page holds
    (
        "triton-ttft-only__handwritten.txt",
        "no family on the page starts with `foo_` \\(--prefix\\); without it: no engine adapter matches this page: "
        "found 1 family starting with `nv_`",
    ),
]


@pytest.mark.parametrize(("fixture", "message"), WRONG_PREFIX)
def test_a_prefix_the_page_lacks_is_named(metrics_fixtures: Path, fixture: str, message: str) -> None:
    result = _run(str(metrics_fixtures / fixture), "--prefix", "foo_")
    assert result.exit_code == 2
    assert "no metric families at all" not in result.stderr
    assert re.search(message, result.stderr), result.stderr


def test_table_output_is_readable(metrics_fixtures: Path) -> None:
    result = _run(str(metrics_fixtures / "llamacpp-without-kv__handwritten.txt"))
    assert result.exit_code == 0, result.stderr
    lines = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.stdout.splitlines()
        if line.count("│") == 3
    }
    assert (lines["engine"], lines["requests_running"], lines["prompt_tokens"]) == ("llamacpp", "4", "88120")
    assert lines["kv_usage"] == "—"  # unknown, shown as such and not as 0


_MALFORMED = 'vllm:num_requests_running{model_name="m" 3\n'


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        # missing file
        (lambda d: d / "absent.txt", [], "cannot read .*absent.txt: No such file or directory"),
        # a directory is not a page
        (lambda d: d, [], "cannot read .*: Is a directory"),
        # malformed line in a family the adapters read: the page is read without its family, and the error names the
        # line and the family left out
        (
            lambda d: _write(d / "bad.txt", "# TYPE x gauge\nx 1\n" + _MALFORMED),
            [],
            "no engine adapter matches .*line 3: .*families left out: vllm:num_requests_running",
        ),
        # a page no adapter recognises lists what it saw
        (lambda d: _write(d / "proc.txt", "process_open_fds 3\n"), [], "no engine adapter matches .*process_open_fds"),
        # an explicit engine the page does not carry
        (lambda d: _write(d / "l.txt", "llamacpp:requests_processing 1\n"), ["--engine", "vllm"], "none of the vllm"),
    ],
)
def test_failures_exit_2_with_a_reason_and_no_traceback(
    tmp_path: Path, make: Any, args: list[str], message: str
) -> None:
    result = _run(str(make(tmp_path)), *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("kvpilot parse: ")
    assert re.search(message, result.stderr), result.stderr


def test_oversized_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import collector.scrape

    monkeypatch.setattr(collector.scrape, "DEFAULT_MAX_BYTES", 64)
    page = _write(tmp_path / "big.txt", "llamacpp:requests_processing 1\n" * 10)
    result = _run(str(page))
    assert (result.exit_code, "larger than 64 bytes" in result.stderr) == (2, True)


def test_oversized_file_names_the_flag_and_the_flag_reads_it(metrics_fixtures: Path) -> None:
    # parse reads no settings: the refusal names its --max-body-bytes, the flag that reads the page (21 KiB)
    page = metrics_fixtures / "vllm__DataDog__integrations-core__vllm_metrics.txt"
    refused = _run(str(page), "--max-body-bytes", "4096", "--json")
    assert refused.exit_code == 2
    said = f"kvpilot parse: {page}: larger than 4096 bytes, the page cap; raise --max-body-bytes to read it\n"
    assert refused.stderr == said
    read = _run(str(page), "--max-body-bytes", "65536", "--json")
    assert read.exit_code == 0, read.output
    assert json.loads(read.stdout)["replicas"][0]["engine"] == "vllm"
    assert (
        _run(str(page), "--max-body-bytes", "1000").stderr
        == "error: --max-body-bytes must be an integer >= 1024, got 1000\n"
    )


def test_unknown_engine_choice_is_a_usage_error(metrics_fixtures: Path) -> None:
    result = _run(str(metrics_fixtures / "vllm-v1-dp2__handwritten.txt"), "--engine", "nope")
    assert result.exit_code == 2
    assert "nope" in result.stderr


def test_render_non_finite_values_as_strict_json() -> None:
    h = Histogram((1.0, math.inf), (1.0, 2.0), math.nan, 2.0)
    r = ReplicaSample("ns", "d", "r", "n", "vllm", None, 0.0, requests_waiting=math.inf, ttft=h)
    doc = _strict_json(samples_json([r], []))
    assert doc["replicas"][0]["requests_waiting"] == "+Inf"
    assert doc["replicas"][0]["ttft"] == {"bounds": [1.0, "+Inf"], "counts": [1.0, 2.0], "sum": None, "count": 2.0}
    assert list(sample_to_dict(r)) == REPLICA_KEYS


def test_installed_console_script(metrics_fixtures: Path, tmp_path: Path) -> None:
    """Once through the real entry point: exit codes and streams as a shell sees them."""
    ok = subprocess.run(
        [
            str(KVPILOT),
            "parse",
            str(metrics_fixtures / "sglang__DataDog__integrations-core__sglang_metrics.txt"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert _strict_json(ok.stdout)["replicas"][0]["kv_usage"] == 0.25
    bad = subprocess.run(
        [str(KVPILOT), "parse", str(tmp_path / "absent.txt")], capture_output=True, text=True, timeout=60, check=False
    )
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.startswith("kvpilot parse: cannot read")
    assert "Traceback" not in bad.stderr


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_engine_choices_are_the_registered_adapters() -> None:
    from collector.engines import ENGINES
    from kvpilot.commands.parse import EngineChoice

    assert {c.value for c in EngineChoice} == {*ENGINES, "auto", "dcgm"}


def test_a_page_read_in_part_says_what_it_left_out(tmp_path: Path) -> None:
    page = _write(
        tmp_path / "dcgm.txt",
        '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1"} 88\n'
        '# TYPE DCGM_FI_DEV_POWER_USAGE gauge\nDCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n1"} ERROR - x\n',
    )
    result = _run(str(page), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["gpus"][0]["utilisation"] == 0.88
    assert "read in part: line 4:" in result.stderr
    assert "families left out: DCGM_FI_DEV_POWER_USAGE" in result.stderr


def test_a_page_read_in_part_names_every_family_that_lost_lines(tmp_path: Path) -> None:
    # a counter typed as X_total whose later lines, after another family, read as an untyped family X_total (Envoy's
    # layout): a bad line sets aside every line of its name, so both families are left out, and both are said
    page = _write(
        tmp_path / "vllm.txt",
        "# TYPE vllm:request_success_total counter\n"
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} ERROR\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 2\n'
        'vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 3\n',
    )
    result = _run(str(page), "--json")
    assert result.exit_code == 0, result.stderr
    assert [r["requests_running"] for r in json.loads(result.stdout)["replicas"]] == [2.0]
    assert "families left out: vllm:request_success, vllm:request_success_total" in result.stderr


def test_a_gpu_only_page_behind_a_prefix_says_so_plainly(tmp_path: Path) -> None:
    """No engine: the note names a GPU exporter's names, not "its names are GPUs only's"."""
    page = _write(
        tmp_path / "p.txt",
        '# TYPE foo_DCGM_FI_DEV_GPU_UTIL gauge\nfoo_DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1"} 88\n',
    )
    result = _run(str(page), "--json", "--prefix", "foo_")
    assert result.exit_code == 0, result.stderr
    assert [g["utilisation"] for g in _strict_json(result.stdout)["gpus"]] == [0.88]
    assert "read as GPUs only: no engine's names, a GPU exporter's behind the prefix `foo_`" in result.stderr
    assert "GPUs only's" not in result.stderr
