"""``promql_mode: aggregates`` against a REAL Prometheus scraping fixture pages: the ad-hoc expressions, the
server-side selection of replicas and the down targets parse and answer on the real engine, and a replica read
one by one equals the same page scraped directly."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.adapt import WANTED_FAMILIES
from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.gpus import amd
from collector.promql import expressions
from collector.promql.series import names_regex
from collector.samples import GoneGpuSample, TargetInfo
from collector.scrape import Collector, CollectResult
from collector.state import FleetState
from detectors import stuck_gpu
from detectors.thresholds import Thresholds
from tests.conftest import FIXTURES
from tests.services.pages import serve_pages
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration

_DCGM = frozenset(n for n in WANTED_FAMILIES if n.startswith("DCGM_"))
PAGE = FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt"


@pytest.fixture
def pages() -> Iterator[str]:
    with serve_pages({"/chat-0": PAGE, "/chat-1": PAGE}) as (host, port):
        yield f"{host}:{port}"


def _job(pages: str, pod: str) -> dict[str, object]:
    labels = {"namespace": "prod", "deployment": "chat", "pod": pod}
    return {"job_name": pod, "metrics_path": f"/{pod}", "static_configs": [{"targets": [pages], "labels": labels}]}


def _canonical(sample: object) -> dict[str, object]:
    drop = {"namespace", "deployment", "replica", "node", "timestamp", "pod", "container"}
    return {k: v for k, v in dataclasses.asdict(sample).items() if k not in drop}  # type: ignore[call-overload]


async def test_aggregates_mode_on_a_real_prometheus(tmp_path: Path, pages: str) -> None:
    jobs = [_job(pages, "chat-0"), _job(pages, "chat-1"), _job(pages, "chat-2")]  # chat-2's page is a 404: down
    with run_prometheus(tmp_path, scrape_configs=jobs) as prom:
        # two samples of every series (rates need them) and the 404 target seen down
        prom.wait_for('count(count_over_time(vllm:num_requests_running{deployment="chat"}[1m]) >= 2) == 2')
        prom.wait_for('up{pod="chat-2"} == 0')
        source = PromQLSource(prom.url, mode="aggregates", kv_from=0.0, max_replicas=10, timeout_s=10.0)
        try:
            result = await source.collect_once()
        finally:
            await source.aclose()

    assert source.rules_in_use is False  # no recording rules loaded: the same expressions ran ad hoc
    (agg,) = source.last_aggregates
    assert (agg.key, agg.replicas, agg.ready_replicas) == ("prod/chat", 3, 2)
    assert (agg.requests_running, agg.requests_waiting, agg.kv_usage_mean, agg.kv_usage_max) == (0, 0, 0, 0)
    assert agg.requests_finished_rate == 0  # a fixed page: counters do not move
    assert agg.ttft_window is not None
    assert agg.ttft_window.bounds[-1] == float("inf")
    # kv_from 0: every live replica is selected and read series by series, as a scrape would read its page
    engine = TargetInfo(url=f"http://{pages}/chat-0", namespace="prod", pod="chat-0", deployment="chat")
    async with Collector(clock=VirtualClock(0.0)) as collector:
        direct = await collector.collect_once([engine])
    assert sorted(r.replica for r in result.replicas) == ["chat-0", "chat-1"]
    assert all(_canonical(r) == _canonical(direct.replicas[0]) for r in result.replicas)
    assert [(t.pod, t.deployment_key) for t in result.down_targets] == [("chat-2", "prod/chat")]
    state = FleetState()
    state.observe(result.replicas, result.gpus, now=source.clock.now(), down_targets=result.down_targets)
    state.observe_deployments(source.last_aggregates, now=source.clock.now())
    view = state.deployments()["prod/chat"]
    assert (view.replica_count, view.ready_replicas, len(view.replicas)) == (3, 2, 2)


AMD_PAGE = FIXTURES / "metrics" / "amd-dme-mi300x-amd-prefix-ecc-health__handwritten.txt"
AMD_IDLE_PAGE = FIXTURES / "metrics" / "amd-dme-mi300x-gfx-grep__ROCm__device-metrics-exporter__pull_236__excerpt.txt"


def _stuck_page() -> bytes:
    """PAGE with 3 requests running: its counters do not move, so the replica is stuck."""
    stuck = PAGE.read_bytes().replace(
        b'vllm:num_requests_running{model_name="facebook/opt-125m"} 0.0',
        b'vllm:num_requests_running{model_name="facebook/opt-125m"} 3.0',
    )
    assert stuck != PAGE.read_bytes()
    return stuck


async def _two_ticks(url: str) -> tuple[CollectResult, FleetState, float]:
    """Two aggregates rounds a second apart into a FleetState (a replica's progress is known from its second
    sample): the last round's result, the state and its time."""
    source = PromQLSource(url, mode="aggregates", max_replicas=10, timeout_s=10.0, reader="thread")
    state = FleetState()
    try:
        for n in range(2):
            if n:
                await asyncio.sleep(1.0)
            result = await source.collect_once()
            now = source.clock.now()
            state.observe(result.replicas, result.gpus, now=now, gpu_nodes_scraped=result.gpu_nodes_scraped)
    finally:
        await source.aclose()
    return result, state, now


def _gpu_fields(gpu: object) -> dict[str, object]:
    # Prometheus stamps its own time; the rest is the page's
    return {k: v for k, v in dataclasses.asdict(gpu).items() if k not in ("timestamp", "page")}  # type: ignore[call-overload]


async def test_aggregates_mode_reads_the_amd_gpus_a_detector_needs(tmp_path: Path) -> None:
    # AMD_PAGE: GPU 0 serves llm/vllm-llama-0 (gfx activity 97), GPU 1 is unallocated with 2 uncorrectable ECC
    # errors; AMD_IDLE_PAGE (no prefix): one healthy unallocated GPU. vllm-llama-0 holds 3 running requests and its
    # counters do not move: stuck.
    pages = {"/vllm-llama-0": _stuck_page(), "/amd": AMD_PAGE, "/amd-idle": AMD_IDLE_PAGE}
    with serve_pages(pages) as (host, port):
        where = f"{host}:{port}"
        engine = {"namespace": "llm", "deployment": "llama", "pod": "vllm-llama-0", "node": "mi300x-node-1"}
        jobs: list[dict[str, object]] = [
            {
                "job_name": "vllm",
                "metrics_path": "/vllm-llama-0",
                "static_configs": [{"targets": [where], "labels": engine}],
            },
            # honor_labels, as the exporter's chart's ServiceMonitor: a GPU keeps the workload's namespace and pod
            {"job_name": "amd", "metrics_path": "/amd", "honor_labels": True, "static_configs": [{"targets": [where]}]},
            {
                "job_name": "amd-idle",
                "metrics_path": "/amd-idle",
                "honor_labels": True,
                "static_configs": [{"targets": [where]}],
            },
        ]
        with run_prometheus(tmp_path, scrape_configs=jobs) as prom:
            prom.wait_for('amd_gpu_health{pod="vllm-llama-0"}')
            prom.wait_for('gpu_gfx_activity{job="amd-idle"}')
            prom.wait_for('vllm:num_requests_running{pod="vllm-llama-0"} == 3')
            result, state, now = await _two_ticks(prom.url)
        async with Collector(clock=VirtualClock(0.0)) as collector:
            direct = await collector.collect_once([TargetInfo(url=f"http://{where}/amd", kind="gpu")])

    assert [r.replica for r in result.replicas] == ["vllm-llama-0"]
    # Both GPUs of AMD_PAGE (one serving the stuck replica, one with ECC errors), none of AMD_IDLE_PAGE's
    assert sorted((g.node, g.index) for g in result.gpus) == [("mi300x-node-1", "0"), ("mi300x-node-1", "1")]
    assert [r.target.kind for r in result.results if r.gpus] == ["gpu"]
    # The same GpuSample fields as the page scraped directly: utilisation, ECC, health, temperatures, power, VRAM
    read = {g.index: _gpu_fields(g) for g in result.gpus}
    scraped = {g.index: _gpu_fields(g) for g in direct.gpus}
    assert read == scraped
    assert read["0"]["utilisation"] == 0.97
    assert read["1"]["ecc_dbe_volatile"] == 2
    assert read["0"]["extra"]["amd_health"] == 1
    assert read["0"]["last_xid"] is None  # no XID made up
    # GPU 0 keeps its workload's pod (its replica is read with it): the stuck-GPU detector joins it to the stuck
    # replica and finds it pinned busy without progress; GPU 1 (unallocated, ECC errors) joins no replica, though
    # it is on the replica's node, and raises nothing (ECC is shown, not acted on)
    assert (read["0"]["namespace"], read["0"]["pod"], read["1"]["pod"]) == ("llm", "vllm-llama-0", None)
    findings = stuck_gpu.detect(state, thresholds=Thresholds(), now=now)
    assert [(f.subject.gpu, f.evidence["condition"]) for f in findings] == [("0", "hang")]
    # a GPU the selection no longer names has not vanished from its exporter
    assert result.gpu_nodes_scraped == frozenset()


def _dcgm_page(node: str, gpus: list[tuple[str, str, str | None]]) -> bytes:
    """A dcgm-exporter page of ``gpus`` (index, UUID, MIG instance or None) on ``node``, healthy (no XID)."""
    lines = []
    for name, value in (("DCGM_FI_DEV_GPU_UTIL", 40), ("DCGM_FI_DEV_GPU_TEMP", 50), ("DCGM_FI_DEV_XID_ERRORS", 0)):
        lines.append(f"# TYPE {name} gauge")
        for gpu, uuid, mig in gpus:
            instance = f',GPU_I_ID="{mig}",GPU_I_PROFILE="3g.40gb"' if mig is not None else ""
            labels = f'gpu="{gpu}",UUID="{uuid}",modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"{instance}'
            lines.append(f"{name}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


def _dme_page(node: str, gpus: list[tuple[str, str, str]]) -> bytes:
    """A device-metrics-exporter page of ``gpus`` (gpu_id, gpu_uuid, compute partition mode) on ``node``; a
    partitioned GPU's partition id is its gpu_id's."""
    lines = []
    for name, value in (("gpu_gfx_activity", 30), ("gpu_junction_temperature", 45)):
        lines.append(f"# TYPE {name} gauge")
        for gpu, uuid, mode in gpus:
            memory, partition = ("nps1", "0") if mode == "spx" else ("nps4", gpu)
            labels = (
                f'gpu_id="{gpu}",gpu_uuid="{uuid}",gpu_partition_id="{partition}",gpu_compute_partition_type="{mode}",'
                f'gpu_memory_partition_type="{memory}",card_series="AMD Instinct MI300X OAM",hostname="{node}"'
            )
            lines.append(f"{name}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


def _smi_page(gpus: list[tuple[str, int]]) -> bytes:
    """An amd_smi_exporter page of ``gpus`` (index, utilisation %): each metric names its GPU label after itself."""
    lines = []
    for name, label in (("amd_gpu_use_percent", "gpu_use_percent"), ("amd_gpu_power", "gpu_power")):
        lines.append(f"# TYPE {name} gauge")
        lines += [f'{name}{{{label}="{gpu}",productname="AMD Instinct MI210"}} {use}' for gpu, use in gpus]
    return ("\n".join(lines) + "\n").encode()


async def test_aggregates_mode_finds_the_gpus_that_left_an_exporter_still_up(tmp_path: Path) -> None:
    # Each exporter starts with its GPUs listed, then: node-a's GPU 1 falls off the bus (its exporter answers
    # without it); node-b's exporter goes down (target_down, not vanished); node-c's GPU is re-cut into MIG
    # instances (same UUID); on AMD, node-d's GPU 1 goes while GPU 0 stays in its mode (lost), and node-e is re-cut
    # from SPX to CPX (new gpu_ids and UUIDs, no GPU left in SPX): only node-a's GPU 1 and node-d's GPU 1 vanished.
    pages: dict[str, Path | bytes] = {
        "/dcgm-a": _dcgm_page("node-a", [("0", "GPU-a0", None), ("1", "GPU-a1", None)]),
        "/dcgm-b": _dcgm_page("node-b", [("0", "GPU-b0", None), ("1", "GPU-b1", None)]),
        "/dcgm-c": _dcgm_page("node-c", [("0", "GPU-c0", None)]),
        "/dme-d": _dme_page("node-d", [("0", "amd-d0", "spx"), ("1", "amd-d1", "spx")]),
        "/dme-e": _dme_page("node-e", [("0", "amd-e0", "spx")]),
        "/smi-f": _smi_page([("0", 10), ("1", 20)]),
    }
    with serve_pages(pages) as (host, port):
        where = f"{host}:{port}"
        jobs = [
            {
                "job_name": path[1:],
                "metrics_path": path,
                "honor_labels": True,
                "static_configs": [{"targets": [where], "labels": {"node": "node-f"} if path == "/smi-f" else {}}],
            }
            for path in pages
        ]
        with run_prometheus(tmp_path, scrape_configs=jobs) as prom:
            prom.wait_for('count(up{job=~"dcgm-.|dme-.|smi-f"} == 1) == 6')
            source = PromQLSource(
                prom.url,
                mode="aggregates",
                timeout_s=10.0,
                reader="thread",
                vanished_lookback_s=120,
                vanished_every_s=1,
            )
            state = FleetState()
            try:
                before = await source.collect_once()
                state.observe(before.replicas, before.gpus, now=source.clock.now(), gpu_nodes_scraped=())
                pages["/dcgm-a"] = _dcgm_page("node-a", [("0", "GPU-a0", None)])
                del pages["/dcgm-b"]  # a 404 from now on: up == 0
                pages["/dcgm-c"] = _dcgm_page("node-c", [("0", "GPU-c0", "1"), ("0", "GPU-c0", "2")])
                pages["/dme-d"] = _dme_page("node-d", [("0", "amd-d0", "spx")])
                pages["/dme-e"] = _dme_page("node-e", [("8", "amd-e8", "cpx"), ("9", "amd-e9", "cpx")])
                pages["/smi-f"] = _smi_page([("0", 10)])
                prom.wait_for('up{job="dcgm-b"} == 0')
                prom.wait_for('count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-a"}) == 1')
                prom.wait_for('count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-c"}) == 2')
                prom.wait_for('count(gpu_gfx_activity{job="dme-d"}) == 1')
                prom.wait_for('count(gpu_gfx_activity{job="dme-e"}) == 2')
                prom.wait_for('count(amd_gpu_use_percent{job="smi-f"}) == 1')
                dcgm = expressions.vanished_dcgm(names_regex(_DCGM), "2m")
                dme = expressions.vanished_amd(names_regex(amd.DME_FAMILIES), "2m")
                # the expressions alone, on the real engine: the lost GPUs' last series, each family's, nothing else
                assert {
                    (s["metric"]["job"], s["metric"]["gpu"], s["metric"]["__name__"]) for s in prom.query(dcgm)
                } == {
                    ("dcgm-a", "1", name)
                    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS")
                }
                assert {(s["metric"]["job"], s["metric"]["gpu_id"]) for s in prom.query(dme)} == {("dme-d", "1")}
                smi = [
                    (s["metric"]["gpu_use_percent"], s["value"][1]) for s in prom.query(expressions.vanished_smi("2m"))
                ]
                assert smi == [("1", "20")]
                # The source asks for vanished GPUs once every vanished_every_s (1 s here) and hands the last answer
                # in between: a round within 1 s of `before` (the waits above can all be that quick) hands before's
                # none. Later rounds ask; a hang guard of 15 s, not a speed assertion (failed once under xdist load).
                deadline = asyncio.get_running_loop().time() + 15.0
                while True:
                    after = await source.collect_once()
                    if after.gpus or asyncio.get_running_loop().time() > deadline:
                        break
                    await asyncio.sleep(0.25)
                now = source.clock.now()
                state.observe(after.replicas, after.gpus, now=now, gpu_nodes_scraped=after.gpu_nodes_scraped)
            finally:
                await source.aclose()

    assert [g.key for g in before.gpus] == []  # healthy GPUs are not read
    gone = sorted((g.node, g.index, type(g).__name__) for g in after.gpus)
    assert gone == [
        ("node-a", "1", "GoneGpuSample"),
        ("node-d", "1", "GoneGpuSample"),
        ("node-f", "1", "GoneGpuSample"),
    ]
    findings = stuck_gpu.detect(state, thresholds=Thresholds(), now=now)
    assert sorted((f.subject.node, f.subject.gpu, f.evidence["condition"]) for f in findings) == [
        ("node-a", "GPU-a1", "vanished"),
        ("node-d", "amd-d1", "vanished"),
        ("node-f", "1", "vanished"),
    ]


async def test_aggregates_mode_reads_amd_smi_gpus_on_a_stuck_replicas_node(tmp_path: Path) -> None:
    # amd_smi_exporter names no pod: its GPUs join the replicas of their node (Prometheus' `node` label on both
    # targets). smi-node-1 runs a stuck replica (3 running, no tokens): both its GPUs are read; smi-node-2's
    # exporter, with no stuck replica, is not read.
    pages = {"/vllm-0": _stuck_page(), "/smi-1": _smi_page([("0", 0), ("1", 95)]), "/smi-2": _smi_page([("0", 95)])}
    with serve_pages(pages) as (host, port):
        where = f"{host}:{port}"
        replica = {"namespace": "llm", "deployment": "llama", "pod": "vllm-0", "node": "smi-node-1"}
        jobs = [
            {
                "job_name": "vllm",
                "metrics_path": "/vllm-0",
                "static_configs": [{"targets": [where], "labels": replica}],
            },
            *(
                {
                    "job_name": f"smi-{n}",
                    "metrics_path": f"/smi-{n}",
                    "static_configs": [{"targets": [where], "labels": {"node": f"smi-node-{n}"}}],
                }
                for n in (1, 2)
            ),
        ]
        with run_prometheus(tmp_path, scrape_configs=jobs) as prom:
            prom.wait_for('vllm:num_requests_running{pod="vllm-0"} == 3')
            prom.wait_for('count(amd_gpu_use_percent{job=~"smi-."}) == 3')
            result, state, now = await _two_ticks(prom.url)

    assert sorted((g.node, g.index, g.utilisation) for g in result.gpus) == [
        ("smi-node-1", "0", 0.0),
        ("smi-node-1", "1", 0.95),
    ]
    findings = stuck_gpu.detect(state, thresholds=Thresholds(), now=now)
    # both GPUs join the replica by node, as when scraped: the busy one pinned (hang), the other idle while it runs
    assert sorted((f.subject.gpu, f.evidence["condition"]) for f in findings) == [
        ("0", "idle_while_running"),
        ("1", "hang"),
    ]


async def test_a_vanished_gpu_stays_reported_past_the_lookback_while_gone(tmp_path: Path) -> None:
    # GPU 1 of two exporters falls off the bus; past the lookback (10 s) Prometheus' selection no longer names it,
    # and kvpilot still reports it while its exporter answers without it. Then p's exporter goes down and q's GPU 1
    # comes back: neither is reported any more.
    two = [("0", "GPU-0", None), ("1", "GPU-1", None)]
    pages: dict[str, Path | bytes] = {"/dcgm-p": _dcgm_page("node-p", two), "/dcgm-q": _dcgm_page("node-q", two)}
    with serve_pages(pages) as (host, port):
        where = f"{host}:{port}"
        jobs = [
            {"job_name": path[1:], "metrics_path": path, "honor_labels": True, "static_configs": [{"targets": [where]}]}
            for path in pages
        ]
        with run_prometheus(tmp_path, scrape_configs=jobs) as prom:
            prom.wait_for("count(DCGM_FI_DEV_GPU_UTIL) == 4")
            source = PromQLSource(
                prom.url, mode="aggregates", timeout_s=10.0, reader="thread", vanished_lookback_s=10, vanished_every_s=1
            )
            loop = asyncio.get_running_loop()

            async def gone() -> list[str]:
                result = await source.collect_once()
                return sorted(f"{g.node}/{g.index}" for g in result.gpus if isinstance(g, GoneGpuSample))

            try:
                assert await gone() == []
                for node in ("p", "q"):
                    pages[f"/dcgm-{node}"] = _dcgm_page(f"node-{node}", two[:1])
                prom.wait_for("count(DCGM_FI_DEV_GPU_UTIL) == 2")
                # polled, not one read: under load (review G, round 5) one read could come within vanished_every_s
                # of the last ask, or (with a 3 s lookback) past it
                deadline = loop.time() + 8.0
                first = await gone()
                while first == [] and loop.time() < deadline:
                    await asyncio.sleep(0.5)
                    first = await gone()
                for _ in range(30):  # past the lookback: the selection names neither
                    if not prom.query(expressions.vanished_dcgm(names_regex(_DCGM), "10s")):
                        break
                    await asyncio.sleep(1.0)
                assert prom.query(expressions.vanished_dcgm(names_regex(_DCGM), "10s")) == []
                await asyncio.sleep(1.0)  # the next read asks again (vanished_every_s)
                carried = await gone()
                del pages["/dcgm-p"]
                pages["/dcgm-q"] = _dcgm_page("node-q", two)
                prom.wait_for('up{job="dcgm-p"} == 0')
                prom.wait_for('count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-q"}) == 2')
                await asyncio.sleep(1.0)
                after = await gone()
            finally:
                await source.aclose()

    assert first == carried == ["node-p/1", "node-q/1"]
    assert after == []
