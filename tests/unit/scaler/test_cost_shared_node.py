"""Replicas sharing one GPU node (review G3, session 20): a node's pod-less GPUs used to join every replica on it, so
each replica was priced with all of them (2 replicas on an 8-GPU node: 8 GPUs each; 8 single-GPU replicas: 64 GPUs),
and an attributing node's unallocated GPUs were priced as each replica's. ``FleetState`` now joins them only as the
GPU side does (``_gpu_views``): a replica's own GPUs are its pod's, or its node's where it is alone there and the
node's exporter attributes none."""

from __future__ import annotations

from collector.samples import GpuSample, ReplicaSample
from collector.state import DeploymentView, FleetState
from detectors import stuck_gpu
from detectors.thresholds import DEFAULT
from scaler.cost import CostConfig, DeploymentCost, GpuAssignment, GpuPrice, deployment_cost

T0 = 1_000.0
H100 = "NVIDIA H100 80GB HBM3"
CONFIG = CostConfig(gpus={"H100": GpuPrice(price_per_hour_usd=2.69, power_w=700)})


def _replica(name: str, t: float, *, node: str = "node-0", progress: bool = True) -> ReplicaSample:
    done = 2.0 * (t - T0) if progress else 0.0
    return ReplicaSample(
        namespace="llm", deployment="chat", replica=name, node=node, engine="vllm", model="m", timestamp=t,
        requests_waiting=0, requests_running=4, requests_finished=done, generation_tokens=200 * done,
    )  # fmt: skip


def _gpu(index: int, t: float, *, pod: str | None = None, node: str = "node-0", **kw: object) -> GpuSample:
    return GpuSample(
        node=node, index=str(index), uuid=f"GPU-{node}-{index}", model_name=H100, timestamp=t, utilisation=0.5,
        pod=pod, namespace="llm" if pod else None, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _state(replicas: int, pods: dict[int, str], *, gpus: int = 8, **gpu_kw: object) -> FleetState:
    """``replicas`` replicas of llm/chat on node-0 (``gpus`` GPUs); ``pods``: GPU index -> the pod it is labelled
    with (the others carry no pod)."""
    state = FleetState(rate_window_s=60)
    for t in (T0, T0 + 30):
        state.observe(
            [_replica(f"chat-{i}", t) for i in range(replicas)],
            [_gpu(g, t, pod=pods.get(g), **gpu_kw) for g in range(gpus)],
            now=t,
        )
    return state


def _cost(state: FleetState, asked: GpuAssignment | None = None) -> DeploymentCost:
    view: DeploymentView = state.deployments()["llm/chat"]
    return deployment_cost(view, CONFIG, discovered=asked)


def test_two_replicas_on_one_node_without_pod_labels_are_not_priced_with_every_gpu() -> None:
    state = _state(2, {})
    assert all(r.gpus == () and len(r.node_gpus) == 8 for r in state.replicas())
    c = _cost(state)
    # the type still comes from the exporter (every GPU of the node is an H100); the count is not guessed
    assert (c.gpu_type, c.gpu_type_source) == ("H100", "gpu exporter")
    assert (c.gpus_per_replica, c.gpus_per_replica_source) == (1, "assumed")
    assert c.usd_per_hour == 2 * 2.69  # was 2 x 8 x 2.69
    assert c.problem is not None
    assert "share the GPUs of node-0" in c.problem
    assert "cost.deployments['llm/chat'].gpus_per_replica" in c.problem


def test_eight_single_gpu_replicas_on_an_eight_gpu_node_cost_eight_gpus() -> None:
    c = _cost(_state(8, {}))
    assert c.replicas * c.gpus_per_replica == 8  # was 64


def test_the_pod_spec_or_settings_give_the_count_and_nothing_is_said() -> None:
    c = _cost(_state(2, {}), GpuAssignment(None, 4))
    assert (c.gpus_per_replica, c.gpus_per_replica_source, c.problem) == (4, "pod spec", None)
    assert c.usd_per_hour == 2 * 4 * 2.69


def test_with_pod_labels_each_replica_gets_its_own_and_unallocated_gpus_are_nobodys() -> None:
    # 2 replicas x 2 GPUs labelled with their pods; GPUs 4-7 carry no pod: unallocated (G's walk priced them)
    state = _state(2, {0: "chat-0", 1: "chat-0", 2: "chat-1", 3: "chat-1"})
    assert {r.sample.replica: [g.index for g in r.gpus] for r in state.replicas()} == {
        "chat-0": ["0", "1"],
        "chat-1": ["2", "3"],
    }
    assert all(r.node_gpus == () for r in state.replicas())
    c = _cost(state)
    assert (c.gpus_per_replica, c.gpus_per_replica_source, c.problem) == (2, "gpu exporter", None)
    assert c.usd_per_hour == 2 * 2 * 2.69  # was 2 x 6 x 2.69 (each replica's 2 and the node's 4 free ones)


def test_a_lone_replica_on_an_attributing_node_whose_pod_has_no_gpu_gets_none() -> None:
    state = _state(1, {0: "other-pod"})
    (replica,) = state.replicas()
    assert replica.gpus == ()
    assert replica.node_gpus == ()


def test_a_lone_replica_on_a_node_without_pod_labels_still_gets_its_gpus() -> None:
    (replica,) = _state(1, {}).replicas()
    assert len(replica.gpus) == 8
    c = _cost(_state(1, {}))
    assert (c.gpus_per_replica, c.gpus_per_replica_source, c.problem) == (8, "gpu exporter", None)


def test_a_gpu_of_a_shared_node_names_no_replica_in_its_finding() -> None:
    """stuck_gpu joins through ``GpuView.replica`` (``_gpu_views``), which already named no replica on a shared
    node: an XID is found on the node's GPU alone (no replica, no stranded requests), not on every replica."""
    state = _state(2, {}, gpus=2, last_xid=79)
    found = stuck_gpu.detect(state, thresholds=DEFAULT, now=T0 + 30)
    assert {f.subject.gpu for f in found} == {"GPU-node-0-0", "GPU-node-0-1"}
    assert all(f.evidence["replica"] is None and f.evidence["stranded_requests"] is None for f in found)
    labelled = _state(2, {0: "chat-0", 1: "chat-1"}, gpus=2, last_xid=79)
    named = {f.subject.gpu: f.evidence["replica"] for f in stuck_gpu.detect(labelled, thresholds=DEFAULT, now=T0)}
    assert named == {"GPU-node-0-0": "chat-0", "GPU-node-0-1": "chat-1"}
