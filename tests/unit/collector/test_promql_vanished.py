"""A GPU that left an exporter still up, in PromQL ``aggregates`` mode: Prometheus selects it (listed within the
lookback, not now, ``up == 1``; the real engine's answers in tests/integration/test_promql_aggregates_real.py), the
reader hands it as a `GoneGpuSample` with its exporter's result, and ``FleetState`` tracks it absent, so the
stuck-GPU detector raises ``vanished`` as for a scraped page that stopped listing it."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource, from_settings
from collector.promql import expressions
from collector.promql.series import gone_gpus, read_answers, with_gpus
from collector.samples import GoneGpuSample, GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from collector.state import FleetState
from detectors import stuck_gpu
from detectors.thresholds import Thresholds
from kvpilot.settings import SettingsError, load_settings
from kvpilot.settings.discovery import DiscoverySettings
from tests.services.promapi import T0, FakeFleet, serve

_DCGM = {"job": "dcgm", "instance": "10.0.0.5:9400", "Hostname": "gpu-node-1"}
_TYPES = {"DCGM_FI_DEV_GPU_UTIL": "gauge", "DCGM_FI_DEV_XID_ERRORS": "gauge"}


def _answer(*series: tuple[str, dict[str, str], float, str | None]) -> bytes:
    result: list[dict[str, Any]] = []
    for name, labels, value, part in series:
        tag = {expressions.PART_LABEL: part} if part else {}
        result.append({"metric": {"__name__": name, **labels, **tag}, "value": [1.0, str(value)]})
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def test_a_vanished_part_is_read_as_gone_gpus_of_its_exporter() -> None:
    # GPU 0 has an XID (selected, present); GPU 1 left the same exporter (the tagged part): one result for the
    # exporter, GPU 1 a GoneGpuSample; another exporter with only a gone GPU gets a result of its own
    other = {"job": "dcgm", "instance": "10.0.0.6:9400", "Hostname": "gpu-node-2"}
    answer = _answer(
        ("DCGM_FI_DEV_XID_ERRORS", {**_DCGM, "gpu": "0", "UUID": "GPU-0"}, 79, None),
        ("DCGM_FI_DEV_GPU_UTIL", {**_DCGM, "gpu": "1", "UUID": "GPU-1"}, 40, expressions.VANISHED_PART),
        ("DCGM_FI_DEV_GPU_UTIL", {**other, "gpu": "3", "UUID": "GPU-3"}, 0, expressions.VANISHED_PART),
    )
    results = read_answers([("part", answer)], (), _TYPES, 1.0, frozenset(), 0.0)
    read = {r.target.url: [(g.node, g.index, type(g).__name__) for g in r.gpus] for r in results}
    assert read == {
        "promql://dcgm/10.0.0.5:9400": [("gpu-node-1", "0", "GpuSample"), ("gpu-node-1", "1", "GoneGpuSample")],
        "promql://dcgm/10.0.0.6:9400": [("gpu-node-2", "3", "GoneGpuSample")],
    }
    assert all(r.ok and r.target.kind == "gpu" for r in results)
    gone = next(g for r in results for g in r.gpus if g.index == "1")
    assert (gone.uuid, gone.utilisation, gone.model_name) == ("GPU-1", 0.4, None)  # its last values, as read


def _gpu(index: str, t: float, *, node: str = "n0", gone: bool = False) -> GpuSample:
    sample = GpuSample(node=node, index=index, uuid=f"GPU-{index}", model_name="H100", timestamp=t)
    return GoneGpuSample.of(sample) if gone else sample


def _vanished(state: FleetState, now: float) -> list[str]:
    findings = stuck_gpu.detect(state, thresholds=Thresholds(), now=now)
    return sorted(f.subject.gpu for f in findings if f.evidence["condition"] == "vanished")


def test_fleet_state_tracks_a_reported_gpu_absent_until_listed_again() -> None:
    state = FleetState(stale_after_s=30)  # forget_after_s 300
    # never seen before (healthy GPUs are not read in aggregates mode): absent from its first report
    state.observe([], [_gpu("1", 0, gone=True)], now=0, gpu_nodes_scraped=())
    assert [(g.sample.index, g.present) for g in state.gpus()] == [("1", False)]
    assert _vanished(state, 0) == ["GPU-1"]
    # a GPU read present (selected: an XID) and then reported gone turns absent
    state.observe([], [_gpu("0", 5)], now=5, gpu_nodes_scraped=())
    state.observe([], [_gpu("0", 10, gone=True), _gpu("1", 10, gone=True)], now=10, gpu_nodes_scraped=())
    assert _vanished(state, 10) == ["GPU-0", "GPU-1"]
    # kept past forget_after_s for as long as it is reported (its exporter still up, the GPU still gone)
    state.observe([], [_gpu("0", 900, gone=True), _gpu("1", 900, gone=True)], now=900, gpu_nodes_scraped=())
    assert _vanished(state, 900) == ["GPU-0", "GPU-1"]
    # listed again (a report of it in the same tick loses): present; GPU 1 no longer reported is forgotten once
    # forget_after_s has passed since it was last seen, as a GPU whose exporter stopped answering
    state.observe([], [_gpu("0", 905), _gpu("0", 905, gone=True)], now=905, gpu_nodes_scraped=())
    assert [(g.sample.index, g.present) for g in state.gpus()] == [("0", True)]
    assert _vanished(state, 905) == []


def test_a_gone_gpu_is_no_listed_gpu_for_the_direct_path_rules() -> None:
    # a report never stands for a listing: its node does not count as answered, so no other GPU of the node turns
    # absent by it (aggregates mode reads no healthy GPU)
    state = FleetState()
    state.observe([], [_gpu("0", 0), _gpu("1", 0)], now=0, gpu_nodes_scraped=())
    state.observe([], [_gpu("1", 5, gone=True)], now=5, gpu_nodes_scraped=())
    assert sorted((g.sample.index, g.present) for g in state.gpus()) == [("0", True), ("1", False)]


def test_a_node_less_gone_gpu_keeps_its_kind_and_its_page() -> None:
    # CollectResult.gpus names a node-less GPU by its page (replace() keeps the class): the same key as when listed
    target = ScrapeResult(
        target=_target(), ok=True, timestamp=0.0, duration_s=0.0, gpus=(_gpu("0", 0, node="", gone=True),)
    )
    (gpu,) = CollectResult(timestamp=0.0, results=(target,)).gpus
    assert (type(gpu), gpu.page) == (GoneGpuSample, "promql://dcgm/10.0.0.5:9400")


def _target() -> TargetInfo:
    return TargetInfo(url="promql://dcgm/10.0.0.5:9400", kind="gpu")


async def test_the_aggregates_round_asks_for_the_vanished_gpus_over_the_lookback() -> None:
    f = FakeFleet(100, per_deployment=50)
    server = serve(f)
    source = PromQLSource(
        f"http://127.0.0.1:{server.server_address[1]}",
        mode="aggregates",
        clock=VirtualClock(T0),
        reader="thread",
        vanished_lookback_s=900,
    )
    try:
        await source.collect_once()
    finally:
        await source.aclose()
        server.shutdown()
    asked = [query for kind, query, _ in f.log if kind == "vanished"]
    assert all("[900s]" in query for query in asked)
    assert all("and on (job, instance) (up == 1)" in query for query in asked)
    assert len(asked) == 3  # dcgm-exporter's, AMD device-metrics-exporter's and amd_smi_exporter's


async def test_vanished_gpus_are_asked_for_every_vanished_every_s_and_handed_again_in_between() -> None:
    f = FakeFleet(100, per_deployment=50)
    server = serve(f)
    clock = VirtualClock(T0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    source = PromQLSource(url, mode="aggregates", clock=clock, reader="thread", vanished_every_s=60)
    gone = ScrapeResult(target=_target(), ok=True, timestamp=T0, duration_s=0.0, gpus=(_gpu("1", T0, gone=True),))
    asked = []
    try:
        for step in (0, 5, 30, 60, 65):
            clock.set(T0 + step)
            f.log.clear()
            result = await source.collect_once()
            asked.append(sum(1 for kind, _, _ in f.log if kind == "vanished") > 0)
            if step == 0:
                source._gone = [gone]  # as if the first answer had read one: the next ticks hand it again
            if step == 30:
                assert [g.key for g in result.gpus if isinstance(g, GoneGpuSample)] == ["n0/GPU-1"]
    finally:
        await source.aclose()
        server.shutdown()
    assert asked == [True, False, False, True, False]
    assert not any(isinstance(g, GoneGpuSample) for g in result.gpus)  # none read at 60 s: none handed at 65 s


def test_gone_gpus_are_handed_again_with_their_exporters_result() -> None:
    present = ScrapeResult(target=_target(), ok=True, timestamp=5.0, duration_s=0.0, gpus=(_gpu("0", 5),))
    kept = gone_gpus([replace(present, gpus=(_gpu("0", 0), _gpu("1", 0, gone=True)))])
    assert [(r.target.url, [g.index for g in r.gpus]) for r in kept] == [("promql://dcgm/10.0.0.5:9400", ["1"])]
    (merged,) = with_gpus([present], kept)
    assert [(g.index, type(g).__name__) for g in merged.gpus] == [("0", "GpuSample"), ("1", "GoneGpuSample")]
    down = replace(present, ok=False, gpus=())
    assert with_gpus([down], kept) == [down]  # an exporter down has no gone GPU: target_down


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"PROMQL_VANISHED_LOOKBACK_S": "0"}, "greater than 0"),
        ({"PROMQL_VANISHED_EVERY_S": "-1"}, "greater than 0"),
        ({"PROMQL_VANISHED_LOOKBACK_S": "inf"}, "finite"),
        ({"PROMQL_VANISHED_EVERY_S": "nan"}, "finite"),
        ({"PROMQL_VANISHED_LOOKBACK_S": "60", "PROMQL_VANISHED_EVERY_S": "60"}, "must be greater than"),
        ({"PROMQL_VANISHED_LOOKBACK_S": "30"}, "must be greater than"),  # under the 60 s default interval
    ],
)
def test_the_vanished_lookback_and_interval_settings_are_checked(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    for name, text in variables.items():
        monkeypatch.setenv(f"KVPILOT_COLLECTOR__DISCOVERY__{name}", text)
    with pytest.raises(SettingsError, match=message):
        load_settings()


def test_the_vanished_settings_reach_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__KIND", "promql")
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_URL", "http://prom:9090")
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_VANISHED_LOOKBACK_S", "1800")
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_VANISHED_EVERY_S", "120")
    settings = load_settings()
    source = from_settings(settings.collector.discovery, settings.collector)
    assert (source.lookback, source.vanished_every_s) == ("1800s", 120.0)
    default = from_settings(DiscoverySettings(kind="promql", promql_url="http://p"))
    assert (default.lookback, default.vanished_every_s) == ("900s", 60.0)
    for bad in ({"vanished_lookback_s": math.inf}, {"vanished_every_s": math.nan}, {"vanished_lookback_s": 60.0}):
        with pytest.raises(ValueError, match="vanished"):
            PromQLSource("http://p", **bad)  # type: ignore[arg-type]


class _CheckFails(FakeFleet):
    """Answers every query as FakeFleet does but the check of gone GPUs' exporters (`_still_gone`'s raw selector):
    a 400 ``bad_data``, or an answer not laid out as the API's."""

    def __init__(self, failure: str) -> None:
        super().__init__(100, per_deployment=50, sick_every=10)  # 10 sick replicas, 1 faulty GPU
        self.failure, self.checks = failure, 0

    def render(self, query: str, t: float) -> bytes:
        if self.kind(query) == "raw":
            self.checks += 1
            if self.failure == "error":
                raise ValueError("query processing would load too many samples \x1b[31m" + "x" * 2000)
            return b'{"status":"success","data":{"resultType":"vector","result":[{"metric":7,"value":[1,"1"]}]}}'
        return super().render(query, t)


@pytest.mark.parametrize("failure", ["error", "layout"])
async def test_a_failing_check_of_gone_gpus_keeps_them_and_costs_the_round_nothing(
    failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    # the check is optional: its failure once cost the whole tick's samples (review G round 5). The round's replicas
    # and other GPUs are read as on a tick without it, the gone GPU kept vanished until a check answers
    f = _CheckFails(failure)
    server = serve(f)
    clock = VirtualClock(T0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    source = PromQLSource(url, mode="aggregates", clock=clock, reader="thread", vanished_every_s=60)
    gone = ScrapeResult(target=_target(), ok=True, timestamp=T0, duration_s=0.0, gpus=(_gpu("1", T0, gone=True),))
    try:
        first = await source.collect_once()
        source._gone = [gone]  # as if the first answer had read one
        clock.set(T0 + 60)
        caplog.clear()
        result = await source.collect_once()
        after = await source.collect_once()  # handed again in between checks
    finally:
        await source.aclose()
        server.shutdown()
    assert f.checks == 1  # the check was asked (and failed)
    assert {r.target.url for r in result.results if r.target.kind != "gpu"} == {
        r.target.url for r in first.results if r.target.kind != "gpu"
    }
    assert len(result.replicas) == len(first.replicas) == 10
    assert [g.key for g in result.gpus if not isinstance(g, GoneGpuSample)] == [g.key for g in first.gpus] != []
    for r in (result, after):
        assert [g.key for g in r.gpus if isinstance(g, GoneGpuSample)] == ["n0/GPU-1"]
    (line,) = [r.getMessage() for r in caplog.records if "kept vanished" in r.getMessage()]
    assert "1 GPU(s)" in line
    assert "\x1b" not in line
    assert len(line) < 600
