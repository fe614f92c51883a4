"""A GPU that vanished from its exporter stays known gone across a restart (review G1, session 20): the new process
never saw it present, so before the restored finding's GPU was seeded absent (``FleetState.seed_absent``,
``restore.vanished_gpus``) the finding closed a few ticks after the restart, the GPU still off the bus, and its drain
was withdrawn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from collector.clock import VirtualClock
from collector.samples import GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from collector.state import FleetState
from detectors.finding import Finding
from detectors.registry import Detection
from detectors.thresholds import DEFAULT
from kvpilot.runtime.restore import vanished_gpus
from kvpilot.runtime.service import Service
from store import repo
from store.db import transaction
from tests.helpers.poll import until
from tests.unit.detectors.detector_fleet import TICK_S, drive, gpu, replica
from tests.unit.kvpilot.fleet_double import (
    ENGINE,
    START,
    ScriptedFleet,
    actuator_caught_up,
    make_service,
    run_ticks,
    serving_sample,
)


def _tick(vanished_from: int, gone: Sequence[GpuSample] = (), stay: Sequence[GpuSample] = ()):
    """r0 on node-r0 making progress; ``stay`` always listed, ``gone`` listed until tick ``vanished_from``."""

    def tick(i: int, t: float):
        r = replica("r0", t, generation_tokens=100.0 * i, requests_running=4)
        listed = [replace(g, timestamp=t) for g in stay]
        if i < vanished_from:
            listed += [replace(g, timestamp=t) for g in gone]
        return [r], listed

    return tick


def _before_restart(gone: Sequence[GpuSample], stay: Sequence[GpuSample]) -> list[Finding]:
    det = Detection(DEFAULT, only=["stuck_gpu"])
    drive(_tick(3, gone, stay), 8, each=lambda s, t: det.tick(s, now=t))
    found = det.active()
    assert found
    assert all(f.evidence["condition"] == "vanished" for f in found)
    return found


def _after_restart(
    restored: list[Finding], listed: Sequence[GpuSample], *, ticks: int = 20, seed: bool = True
) -> tuple[Detection, FleetState]:
    """A fresh FleetState (seeded as `kvpilot.runtime.wiring` does) and a Detection restored from ``restored``, fed
    ``ticks`` ticks whose GPU page lists ``listed``."""
    again = Detection(DEFAULT, only=["stuck_gpu"], restore=restored)
    state = FleetState()
    if seed:
        state.seed_absent(vanished_gpus(restored))
    for i in range(ticks):
        t = (100 + i) * TICK_S
        gpus = [replace(g, timestamp=t) for g in listed]
        state.observe([replica("r0", t, generation_tokens=1e4 + 100.0 * i)], gpus, now=t)
        again.tick(state, now=t)
    return again, state


def test_a_vanished_gpu_finding_stays_open_across_a_restart() -> None:
    stay, gone = gpu("node-r0", index="1"), gpu("node-r0", index="0")
    restored = _before_restart([gone], [stay])
    assert [g.key for g in vanished_gpus(restored)] == [gone.key]
    again, state = _after_restart(restored, [stay])
    assert [f.id for f in again.active()] == [f.id for f in restored]
    assert again.active()[0].action == "drain_node"
    assert {g.key: g.present for g in state.gpus()} == {stay.key: True, gone.key: False}
    # without the seed (before the fix) the restored finding closed while the GPU was still off the bus
    unseeded, _ = _after_restart(restored, [stay], seed=False)
    assert unseeded.active() == []


def test_it_closes_once_the_gpu_is_listed_again() -> None:
    stay, gone = gpu("node-r0", index="1"), gpu("node-r0", index="0")
    restored = _before_restart([gone], [stay])
    again, state = _after_restart(restored, [stay, gone])
    assert again.active() == []
    assert all(g.present for g in state.gpus())


def test_it_is_forgotten_with_its_node() -> None:
    """Its node's exporter no longer answering (the node gone): forgotten once last seen ``forget_after_s`` ago, as
    any absent GPU is; the finding then closes."""
    stay, gone = gpu("node-r0", index="1"), gpu("node-r0", index="0")
    restored = _before_restart([gone], [stay])
    again, state = _after_restart(restored, [], ticks=5)
    assert state.gpus() == []
    assert again.active() == []


def test_a_gpu_known_by_index_only() -> None:
    stay, gone = gpu("node-r0", index="1", uuid=None), gpu("node-r0", index="0", uuid=None)
    restored = _before_restart([gone], [stay])
    assert [(g.key, g.uuid) for g in vanished_gpus(restored)] == [("node-r0/0", None)]
    again, _ = _after_restart(restored, [stay])
    assert [f.id for f in again.active()] == [f.id for f in restored]


def _mig(index: str, instance: str, *, uuid: str | None = "GPU-m") -> GpuSample:
    return gpu("node-r0", index=f"{index}/{instance}", uuid=uuid, mig_instance=instance, mig_profile="3g.40gb")


def test_one_mig_instance_gone_keeps_its_finding() -> None:
    """An instance known by index alone (with a UUID, its sibling listing the UUID makes it a re-cut, no finding)."""
    stay, gone = _mig("0", "1", uuid=None), _mig("0", "2", uuid=None)
    restored = _before_restart([gone], [stay])
    assert [g.key for g in vanished_gpus(restored)] == [gone.key]
    again, _ = _after_restart(restored, [stay])
    assert [f.id for f in again.active()] == [f.id for f in restored]
    back, _ = _after_restart(restored, [stay, gone])
    assert back.active() == []


def test_a_mig_instance_finding_by_uuid_is_keyed_as_its_exporter_lists_it() -> None:
    (found,) = _before_restart([gpu("node-r0", index="0")], [gpu("node-r0", index="1")])
    instance = replace(
        found,
        subject=replace(found.subject, gpu="GPU-m/mig2"),
        evidence={**found.evidence, "physical_gpu": "GPU-m"},
    )
    assert [g.key for g in vanished_gpus([instance])] == [_mig("0", "2").key]


@pytest.mark.parametrize("uuid", ["GPU-m", None])
def test_a_whole_mig_gpu_gone_keeps_its_finding(uuid: str | None) -> None:
    stay = gpu("node-r0", index="1")
    gone = [_mig("0", "1", uuid=uuid), _mig("0", "2", uuid=uuid)]
    restored = _before_restart(gone, [stay])
    assert sorted(g.key for g in vanished_gpus(restored)) == sorted(g.key for g in gone)
    again, _ = _after_restart(restored, [stay])
    assert [f.id for f in again.active()] == [f.id for f in restored]


def test_a_gpu_back_re_cut_under_its_uuid_closes_it() -> None:
    """Back as MIG instances of the same UUID: a re-cut (``_recut_keys``), the whole GPU's old key forgotten."""
    stay, gone = gpu("node-r0", index="1"), gpu("node-r0", index="0")
    restored = _before_restart([gone], [stay])
    recut = replace(gone, index="0/1", mig_instance="1", mig_profile="7g.80gb")
    again, state = _after_restart(restored, [stay, recut])
    assert again.active() == []
    assert gone.key not in {g.key for g in state.gpus()}


def test_other_findings_seed_nothing() -> None:
    stay, gone = gpu("node-r0", index="1"), gpu("node-r0", index="0")
    (found,) = _before_restart([gone], [stay])
    others = [
        replace(found, kind="kv_exhaustion"),
        replace(found, evidence={**found.evidence, "condition": "xid", "conditions": "xid"}),
        replace(found, subject=replace(found.subject, node="")),
    ]
    assert vanished_gpus(others) == []


# -- through a restart of the service, on its SQLite store ----------------------------------------------------------

GPU_PAGE = TargetInfo(url="http://10.0.0.1:9400/metrics", kind="gpu", node="n0")


@dataclass
class VanishingFleet(ScriptedFleet):
    """llm/chat on n0 and n1; n0's GPU exporter lists GPU-0 always and GPU-1 while ``listed`` is true."""

    listed: bool = True

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        gpus = [GpuSample(node="n0", index="0", uuid="GPU-0", model_name="H100", timestamp=t, utilisation=0.5)]
        if self.listed:
            gpus.append(GpuSample(node="n0", index="1", uuid="GPU-1", model_name="H100", timestamp=t, utilisation=0.5))
        samples = tuple(serving_sample(pod, node, t) for pod, node in (("chat-0", "n0"), ("chat-1", "n1")))
        self.collected += 1
        return CollectResult(
            timestamp=t,
            results=(
                ScrapeResult(ENGINE, True, t, 0.01, replicas=samples, engine="vllm"),
                ScrapeResult(GPU_PAGE, True, t, 0.01, gpus=tuple(gpus)),
            ),
        )


class Follower:
    leader = False


def _vanished(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.kind == "stuck_gpu" and f.evidence.get("condition") == "vanished"]


def _drains(service: Service) -> list[tuple[str, str]]:
    with transaction(service.sessions) as s:
        return [(d.node, d.state) for d in repo.list_drains(session=s).items]


async def _vanish_then_stop(url: str, clock: VirtualClock, fleet: VanishingFleet) -> Finding:
    """A first run sees GPU-1 vanish, opens the finding and requests n0's drain (dry run), and stops."""
    first, restored, timer = make_service(url, clock, fleet)
    await first.start(restored)
    await run_ticks(first, timer, 3)
    fleet.listed = False
    await run_ticks(first, timer, 6)
    (finding,) = _vanished(first.snapshot().findings)
    assert finding.subject.gpu == "GPU-1"
    assert finding.action == "drain_node"
    await until(lambda: _drains(first) == [("n0", "requested")], what="n0's drain requested")
    await until(lambda: first.writer.pending == 0, what="flushed")
    first.stop.set()
    await first.wait()
    return finding


async def test_the_service_keeps_the_finding_and_its_drain_after_a_restart(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    clock = VirtualClock(START)
    fleet = VanishingFleet(clock)
    finding = await _vanish_then_stop(url, clock, fleet)

    clock.advance(20)
    second, restored, timer = make_service(url, clock, fleet)
    await second.start(restored)
    await run_ticks(second, timer, 30)  # well past the ticks a finding takes to close
    assert [f.id for f in _vanished(second.snapshot().findings)] == [finding.id]
    gpus = {g.key: g.present for g in second.snapshot().gpus}
    assert gpus == {"n0/GPU-0": True, "n0/GPU-1": False}
    await actuator_caught_up(second)
    assert _drains(second) == [("n0", "requested")]  # not withdrawn by the restart

    fleet.listed = True  # the GPU back on its exporter's page: the finding closes, the drain is withdrawn
    await run_ticks(second, timer, 30)
    assert _vanished(second.snapshot().findings) == []
    await until(lambda: _drains(second) == [("n0", "cancelled")], what="n0's drain withdrawn")
    second.stop.set()
    await second.wait()


async def test_an_ha_replica_started_after_the_gpu_vanished_knows_it_gone(tmp_path) -> None:
    """A replica that starts (or restarts) as a follower restores the same way; when it takes the Lease it holds
    the finding open, and so its drain, as the leader did."""
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    clock = VirtualClock(START)
    fleet = VanishingFleet(clock)
    finding = await _vanish_then_stop(url, clock, fleet)

    clock.advance(20)
    follower, restored, timer = make_service(url, clock, fleet, leadership=Follower())
    await follower.start(restored)
    await run_ticks(follower, timer, 30)
    assert [f.id for f in _vanished(follower.snapshot().findings)] == [finding.id]
    follower.stop.set()
    await follower.wait()
