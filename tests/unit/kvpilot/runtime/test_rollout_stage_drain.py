"""The rollout stage from the replicas alone (static/PromQL modes, no Deployment status): a ready replica that
discovery stops listing while the count asked for holds is a drain, the first sign of a rolling update, and the
surge is published then, a cold start before the new version serves; a replica that crashed (still listed, its
target down), one removed by a scale-down, or one kvpilot's own drain evicted (``note_removed``) raises no surge."""

from __future__ import annotations

import pytest

from collector.samples import ReplicaSample
from collector.state import FleetState
from scaler.decision import Decision
from scaler.rollout_stage import OwnRemovals, RolloutStage

KEY = "llm/chat"
TICK = 5.0


class Fleet:
    """Four replicas on one version; each tick the test says which serve metrics and which discovery dropped."""

    def __init__(self, stage: RolloutStage | None = None) -> None:
        self.state = FleetState(stale_after_s=3 * TICK, forget_after_s=3600)
        self.stage = stage or RolloutStage()
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


def test_a_drained_wave_of_two_surges_that_wave_and_the_next() -> None:
    fleet = Fleet()
    warm(fleet)
    del fleet.serving["chat-0"]  # a wave of 2 drains two replicas at once (maxUnavailable 2)
    del fleet.serving["chat-1"]
    # desired 4 + the drained wave (2, loading) + the next wave (2, within a cold start): not +1
    assert fleet.tick(departed=("chat-0", "chat-1")) == 8
    assert min(fleet.tick() for _ in range(23)) == 8  # held while the wave loads


def test_a_wave_that_drains_every_replica_reads_as_that_wide() -> None:
    # A wave as wide as the fleet (maxUnavailable 100 %): no replica is listed, so the ready peak is the window's
    # history, not nothing. Read as a wave of 1 before, it surged +1 with "1 replicas left to replace in waves of 1"
    # (`kvpilot demo --rollout-wave 64 --replicas 64`).
    fleet = Fleet()
    warm(fleet)
    gone = tuple(fleet.serving)
    fleet.serving.clear()
    fleet.t += TICK
    fleet.state.observe([], [], now=fleet.t, departed={f"llm/{p}" for p in gone})
    planned = Decision(KEY, fleet.t, 4, 0, 4, 0, "predictive", "steady demand")
    (decision,) = fleet.stage.apply(fleet.state, [planned], fleet.t)
    assert decision.forecast["rollout_wave_size"] == 4
    assert decision.forecast["rollout_old_remaining"] == 4
    assert decision.desired_replicas == 8  # desired 4 + the wave loading (4)
    assert "4 replicas left to replace in waves of 4" in decision.message


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


MEMORY_S = 60.0


@pytest.mark.parametrize(
    ("noted", "ticks_before_it_goes", "surge"),
    [
        # kvpilot's drain evicted chat-0 (noted just before the eviction): its departure is no rollout wave
        ("llm/chat-0", 0, False),
        # the note came a while before the pod left discovery (a long termination grace), still within memory
        ("llm/chat-0", 11, False),
        # the same departure with no note: a rollout's wave drained it, the surge is published
        (None, 0, True),
        # kvpilot evicted another pod: chat-0's departure is still a wave's drain
        ("llm/chat-3", 0, True),
        # the note expired (MEMORY_S, 12 ticks) before chat-0 went: read as a rollout again
        ("llm/chat-0", 13, True),
    ],
)
def test_a_pod_kvpilot_removed_itself_is_no_rollout_drain(
    noted: str | None, ticks_before_it_goes: int, surge: bool
) -> None:
    fleet = Fleet(RolloutStage(own_removal_memory_s=MEMORY_S))
    warm(fleet)
    if noted is not None:
        fleet.stage.note_removed(noted, fleet.t)
    for _ in range(ticks_before_it_goes):
        assert fleet.tick() == 4
    del fleet.serving["chat-0"]  # gone from discovery; the count asked for holds at 4 (its replacement loads)
    published = [fleet.tick(departed=("chat-0",))] + [fleet.tick() for _ in range(23)]
    if surge:
        assert min(published) >= 5
    else:
        assert published == [4] * 24


def test_own_removals_match_a_pods_replicas_and_forget_after_their_memory() -> None:
    own = OwnRemovals(memory_s=MEMORY_S)
    own.note("llm/chat-0", 100.0)
    gone = {"llm/chat-0", "llm/chat-0#dp1", "llm/chat-1"}  # data-parallel groups of a pod are its replicas
    assert own.others(gone, 100.0 + MEMORY_S) == {"llm/chat-1"}
    own.note("llm/chat-0", 150.0)  # an eviction retried (a PDB's backoff) keeps the note fresh
    assert own.others(gone, 150.0 + MEMORY_S) == {"llm/chat-1"}
    assert own.others(gone, 150.0 + MEMORY_S + 1) == gone  # forgotten
    assert own.others(gone, 150.0) == gone  # and gone for good, not revived by an earlier time


@pytest.mark.parametrize("memory_s", [0.0, -1.0, float("inf"), float("nan")])
def test_own_removal_memory_must_be_a_finite_positive_number(memory_s: float) -> None:
    with pytest.raises(ValueError, match="memory_s"):
        RolloutStage(own_removal_memory_s=memory_s)
