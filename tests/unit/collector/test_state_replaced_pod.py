"""A replica replaced on a node whose GPU exporter labels no pods (review G6, session 20): the old pod's track is kept,
stale, until ``forget_after_s`` (10 x stale_after_s) where nothing says it departed (a PromQL source),
and it counted as a second replica on the node, so its successor shared the node's GPUs (``node_gpus``) instead of
owning them: a TP-8 deployment priced at 1 GPU (assumed) for 305 s after every restart, rollout or reschedule, and its
GPUs named no replica. Only replicas that hold a node's GPUs count: sampled within stale_after_s, or listed but down."""

from __future__ import annotations

from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.state import FleetState, ReplicaView
from scaler.cost import CostConfig, GpuPrice, deployment_cost

TICK_S = 5.0
H100 = "NVIDIA H100 80GB HBM3"
CONFIG = CostConfig(gpus={"H100": GpuPrice(price_per_hour_usd=2.69, power_w=700)})


def _replica(name: str, t: float, *, node: str = "n0") -> ReplicaSample:
    done = 2.0 * t
    return ReplicaSample(
        namespace="ml", deployment="chat", replica=name, node=node, engine="vllm", model="m", timestamp=t,
        requests_waiting=0, requests_running=4, requests_finished=done, generation_tokens=200 * done,
    )  # fmt: skip


def _gpus(t: float, node: str = "n0") -> list[GpuSample]:
    return [
        GpuSample(node=node, index=str(i), uuid=f"GPU-{node}-{i}", model_name=H100, timestamp=t, utilisation=0.7)
        for i in range(8)
    ]


def _replaced(state: FleetState, *, ticks_after: int, down: bool = False) -> None:
    """Pod ``old`` alone on n0 for 6 ticks, then ``new`` in its place for ``ticks_after`` ticks (``down``: ``old``'s
    target still listed and failing, as a pod that is still there)."""
    for i in range(6):
        t = i * TICK_S
        state.observe([_replica("old", t)], _gpus(t), now=t)
    for i in range(6, 6 + ticks_after):
        t = i * TICK_S
        gone = [TargetInfo(url="http://old:8000/metrics", namespace="ml", pod="old")] if down else []
        state.observe([_replica("new", t)], _gpus(t), down_targets=gone, now=t)


def _view(state: FleetState, name: str) -> ReplicaView:
    return next(r for r in state.replicas() if r.sample.replica == name)


def test_a_replaced_pod_owns_its_node_gpus_from_its_first_tick() -> None:
    state = FleetState()  # stale 30 s, forget 300 s: the old track is kept for the whole test
    _replaced(state, ticks_after=1)
    old, new = _view(state, "old"), _view(state, "new")
    assert len(new.gpus) == 8
    assert new.node_gpus == ()
    assert old.gpus == ()  # the gone pod owns none (its node_gpus give a type, no count)
    assert {g.replica for g in state.gpus()} == {"ml/new"}  # on the parent: None (two replicas on n0)
    cost = deployment_cost(state.deployments()["ml/chat"], CONFIG)
    assert (cost.gpus_per_replica, cost.gpus_per_replica_source) != (1, "assumed")
    assert cost.gpus_per_replica == 8


def test_the_successor_keeps_them_while_the_old_track_ages_out() -> None:
    state = FleetState()
    _replaced(state, ticks_after=40)  # 200 s: past stale_after_s, before forget_after_s
    assert "old" in {r.sample.replica for r in state.replicas()}
    assert len(_view(state, "new").gpus) == 8


def test_a_pod_listed_but_down_still_holds_its_gpus() -> None:
    # its target still listed and failing: the pod is there and may hold GPUs, so which are whose is unknown
    state = FleetState()
    _replaced(state, ticks_after=10, down=True)
    old, new = _view(state, "old"), _view(state, "new")
    assert not old.target_up
    assert not old.ready
    assert new.gpus == ()
    assert len(new.node_gpus) == 8
    assert {g.replica for g in state.gpus()} == {None}


def test_two_live_replicas_still_share_and_a_lone_stale_one_keeps_its_own() -> None:
    state = FleetState()
    for i in range(3):
        t = i * TICK_S
        state.observe([_replica("a", t), _replica("b", t)], _gpus(t), now=t)
    assert all(r.gpus == () and len(r.node_gpus) == 8 for r in state.replicas())
    # a replica alone on its node whose scrape is late (stale, still tracked) keeps its node's GPUs, as before
    state = FleetState()
    state.observe([_replica("a", 0.0)], _gpus(0.0), now=0.0)
    for i in range(1, 10):
        state.observe([], _gpus(i * TICK_S), now=i * TICK_S)
    a = _view(state, "a")
    assert not a.ready
    assert len(a.gpus) == 8
    assert {g.replica for g in state.gpus()} == {"ml/a"}
