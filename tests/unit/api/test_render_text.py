"""kvpilot's own /metrics writes the snapshot's gauges itself (``api.exposition.render_text``): byte for byte what
prometheus_client's ``generate_latest`` writes for the same families, without its per-sample label-name checks
(~80 % of a render at 2,000 GPUs went to its sample lines, review G F6)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api import series as S  # noqa: N812  (the catalogue reads best as S.NAME)
from api.exposition import render_snapshot, render_text, snapshot_families
from collector.health import initial
from collector.samples import GpuSample, ReplicaSample
from collector.state import FleetState
from detectors.finding import Finding, Severity, Subject
from kvpilot.runtime.snapshot import Snapshot


class _Families(Collector):
    def __init__(self, families: list[GaugeMetricFamily | CounterMetricFamily]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return list(self._families)


def _theirs(families: list[GaugeMetricFamily | CounterMetricFamily]) -> bytes:
    return generate_latest(_Families(families))


def test_the_catalogues_names_are_legacy_names_so_no_escaping_is_skipped() -> None:
    for s in S.ALL:
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s.name), s.name
        for label in s.labels:
            assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label), (s.name, label)


ODD = ['a"b', "back\\slash", "new\nline", "ünï☃", "", 'x=1,y="2"}', "\\n literal"]


def _snapshot() -> Snapshot:
    state = FleetState()
    for t in (0.0, 30.0):
        samples, gpus = [], []
        for i, odd in enumerate(ODD * 3):
            samples.append(
                ReplicaSample(
                    namespace="llm",
                    deployment=f"model-{i % 4}{odd}",
                    replica=f"r-{i}{odd}",
                    node=f"node-{i // 8}",
                    engine="vllm",
                    model="m",
                    timestamp=t,
                    requests_waiting=i % 5 if i % 3 else None,
                    requests_running=8,
                    kv_usage=(i % 100) / 100 if i % 2 else None,
                    prompt_tokens=1000.5 * t,
                    generation_tokens=200 * t,
                    requests_finished=4 * t,
                )
            )
            gpus.append(
                GpuSample(
                    node=f"node-{i // 8}",
                    index=str(i % 8),
                    uuid=f"GPU-{i}{odd}",
                    model_name="H100",
                    timestamp=t,
                    utilisation=0.7 if i % 2 else 1e-9,
                    last_xid=79 if i == 3 else 0,
                    memory_used_bytes=float(i * 2**30 + 1),
                    memory_free_bytes=None if i % 4 == 0 else 8e10 / 3,
                )
            )
        state.observe(samples, gpus, now=t)
    finding = Finding(
        "stuck_gpu", Severity.CRITICAL, Subject(node="node-0", gpu='GPU-"0"'), 0.0, "XID", {"replica": "r\\0"}
    )
    url = 'http://user:pw@10.0.0.1:8000/metrics?a="b"'
    health = {url: dataclasses.replace(initial(url), up=True, last_scrape_duration_s=0.125, partial_pages_total=2)}
    exhaustion = {("llm/model-0", "r-0"): math.inf, ("llm/model-1", "r\n1"): 42.0}
    fleet = Snapshot(tick=1, t=30.0, findings=[finding], node_drains={"node-0": "cordoned"}, target_health=health)
    return dataclasses.replace(
        fleet,
        gpus=state.gpus(),
        replicas=state.replicas(),
        deployments=state.deployments(),
        kv_time_to_exhaustion=exhaustion,
    )


def test_a_snapshot_renders_as_generate_latest_writes_it() -> None:
    snap = _snapshot()
    families = snapshot_families(snap)
    assert {f.type for f in families} == {"gauge", "counter"}
    page = render_snapshot(snap)
    assert page == _theirs(families)
    for part in (b"kvpilot_scrape_partial_pages", b"kvpilot_gpu_memory_used_bytes{", b'\\"', b"\\\\", b"\\n"):
        assert part in page, part  # the odd label values were escaped, not left out


@pytest.mark.parametrize(
    "value", [0.0, -0.0, 1.0, -2.5, 1e-300, 1e300, 123456789012345.0, 0.1 + 0.2, math.inf, -math.inf, math.nan]
)
def test_values_and_counters_render_as_generate_latest_writes_them(value: float) -> None:
    gauge = GaugeMetricFamily("kvpilot_x", 'help with \\ and\nnewline and "quotes"', labels=["b", "a"])
    gauge.add_metric(["z\\", 'q"'], value)
    gauge.add_metric(["", "\n"], value)
    bare = GaugeMetricFamily("kvpilot_y", "no labels")
    bare.add_metric([], value)
    counter = CounterMetricFamily("kvpilot_z", "a counter", labels=["url"])
    counter.add_metric(["http://a/"], 3.0)
    empty = GaugeMetricFamily("kvpilot_empty", "no samples", labels=["a"])
    families = [gauge, bare, counter, empty]
    assert render_text(families) == _theirs(families)
