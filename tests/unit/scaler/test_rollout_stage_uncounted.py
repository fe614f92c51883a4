"""The rollout stage where nobody counts the replicas asked for (no scale source: ``RolloutStage.apply(counted=
False)``). The planner's count is then the replicas the collector sees, which falls with a drain itself; the count
asked for is what the stage published last, so a drain while it held is a rollout's first wave, and a replica that
leaves after kvpilot lowered its count is a scale-down."""

from __future__ import annotations

from collector.samples import ReplicaSample
from collector.state import FleetState
from scaler.decision import Decision
from scaler.rollout_stage import RolloutStage

KEY = "llm/chat"
TICK = 5.0


class SeenFleet:
    """Replicas on one version; the planner's decision carries the replicas seen as its count (as
    ``scaler.planner.replica_count`` does without a scale source) and asks for ``wanted``."""

    def __init__(self, *, counted: bool) -> None:
        self.state = FleetState(stale_after_s=3 * TICK, forget_after_s=3600)
        self.stage = RolloutStage()
        self.counted = counted
        self.serving = {f"chat-{i}": "v1" for i in range(4)}
        self.t = 0.0

    def tick(self, *, wanted: int = 4, departed: tuple[str, ...] = ()) -> int:
        self.t += TICK
        samples = [
            ReplicaSample("llm", "chat", pod, "n0", "vllm", model, self.t, requests_running=4, kv_usage=0.4)
            for pod, model in self.serving.items()
        ]
        self.state.observe(samples, [], now=self.t, departed={f"llm/{p}" for p in departed})
        seen = len(self.state.deployments()[KEY].replicas)
        planned = Decision(KEY, self.t, seen, seen, wanted, 0, "predictive", "steady demand")
        (decision,) = self.stage.apply(self.state, [planned], self.t, counted=self.counted)
        return decision.desired_replicas


def test_a_drain_is_read_against_the_count_published_not_the_replicas_seen() -> None:
    for counted, first in ((False, 6), (True, 4)):
        fleet = SeenFleet(counted=counted)
        assert {fleet.tick() for _ in range(30)} == {4}
        del fleet.serving["chat-0"]  # wave 1 drains chat-0; the count published holds at 4
        # uncounted: desired 4 + the drained wave loading + the next; read as counted, the replicas seen fell with
        # the drain, which looked like a scale-down: the first wave went unseen
        assert fleet.tick(departed=("chat-0",)) == first


def test_a_replica_leaving_after_kvpilot_lowered_its_count_is_no_rollout() -> None:
    fleet = SeenFleet(counted=False)
    assert {fleet.tick() for _ in range(30)} == {4}
    assert fleet.tick(wanted=3) == 3  # kvpilot asks for one fewer ...
    del fleet.serving["chat-3"]
    assert [fleet.tick(wanted=3, departed=("chat-3",) if i == 0 else ()) for i in range(24)] == [3] * 24
