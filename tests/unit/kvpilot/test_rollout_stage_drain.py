"""The rollout stage from the replicas alone (static/PromQL modes, no Deployment status): a ready replica that
discovery stops listing while the count asked for holds is a drain, the first sign of a rolling update, and the
surge is published then, a cold start before the new version serves; a replica that crashed (still listed, its
target down) or one removed by a scale-down raises no surge."""

from __future__ import annotations

from collector.samples import ReplicaSample
from collector.state import FleetState
from kvpilot.rollout_stage import RolloutStage
from scaler.decision import Decision

KEY = "llm/chat"
TICK = 5.0


class Fleet:
    """Four replicas on one version; each tick the test says which serve metrics and which discovery dropped."""

    def __init__(self) -> None:
        self.state = FleetState(stale_after_s=3 * TICK, forget_after_s=3600)
        self.stage = RolloutStage()
        self.serving: dict[str, str] = {f"chat-{i}": "v1" for i in range(4)}
        self.t = 0.0

    def tick(self, *, asked: int = 4, departed: tuple[str, ...] = ()) -> int:
        self.t += TICK
        samples = [
            ReplicaSample("llm", "chat", pod, "n0", "vllm", model, self.t, requests_running=4, kv_usage=0.4)
            for pod, model in self.serving.items()
        ]
        self.state.observe(samples, [], now=self.t, departed={f"llm/{p}" for p in departed})
        planned = Decision(KEY, self.t, asked, len(self.serving), 4, 0, "predictive", "steady demand")
        (decision,) = self.stage.apply(self.state, [planned], self.t)
        return decision.desired_replicas


def warm(fleet: Fleet) -> None:
    for _ in range(30):
        assert fleet.tick() == 4


def test_a_drained_replica_surges_a_cold_start_before_the_new_version_serves() -> None:
    fleet = Fleet()
    warm(fleet)
    del fleet.serving["chat-0"]  # wave 1 drains chat-0; its successor loads (the count asked for holds at 4)
    first = fleet.tick(departed=("chat-0",))
    assert first >= 5  # the wave loading, and the next one within a cold start
    published = [fleet.tick() for _ in range(23)]  # the successor loads for a cold start: the surge holds
    assert min(published) >= 5
    fleet.serving["chat-4"] = "v2"  # it serves the new version: the rollout is seen from its versions now
    assert fleet.tick() >= 5


def test_a_crashed_replica_is_no_rollout() -> None:
    fleet = Fleet()
    warm(fleet)
    del fleet.serving["chat-1"]  # crashed: it stops serving, but discovery still lists it (restarting in place)
    assert [fleet.tick() for _ in range(24)] == [4] * 24
    fleet.serving["chat-1"] = "v1"
    assert fleet.tick() == 4


def test_a_scale_down_is_no_rollout() -> None:
    fleet = Fleet()
    warm(fleet)
    assert fleet.tick(asked=3) == 4  # the count asked for falls first (KEDA applied a lower count) ...
    del fleet.serving["chat-3"]
    assert fleet.tick(asked=3, departed=("chat-3",)) == 4  # ... then the pod goes: no surge
    assert [fleet.tick(asked=3) for _ in range(5)] == [4] * 5


def test_an_eviction_that_comes_back_on_the_same_version_ends_its_surge() -> None:
    fleet = Fleet()
    warm(fleet)
    del fleet.serving["chat-2"]  # evicted (a node drain): it looks like a wave at first
    assert fleet.tick(departed=("chat-2",)) > 4
    for _ in range(23):
        fleet.tick(asked=6)
    fleet.serving["chat-4"] = "v1"  # its successor serves the old version; the surge replicas too
    fleet.serving["chat-5"] = "v1"
    fleet.serving["chat-6"] = "v1"
    published = [fleet.tick(asked=6) for _ in range(4)]
    assert published[-1] == 4  # every replica asked for serves, one version: no rollout, the surge is withdrawn
