"""rollout over the real FleetState: two versions among ready replicas is a rollout; too wide, or burning TTFT."""

from __future__ import annotations

from typing import Any

from collector.state import FleetState
from detectors import rollout
from detectors.registry import Detection
from detectors.thresholds import DEFAULT
from kvpilot.commands.detect import samples_from_snapshot
from simulator import Fleet, FleetConfig, load_trace, parse_fault
from tests.unit.detectors.detector_fleet import TICK_S, replica, ttft

TICKS = 12


def _fleet(models: list[str], *, gone: int = 0, slow: float = 0.0) -> tuple[FleetState, float]:
    """Replicas r0.. serving `models[i]`; the last `gone` stop answering after the first tick (drained for the
    wave, their successors loading); every replica serves 10 requests a tick, `slow` of them slower than 5 s."""
    state = FleetState(stale_after_s=3 * TICK_S)
    t = 0.0
    for i in range(TICKS):
        t = i * TICK_S
        reps: list[Any] = []
        for k, model in enumerate(models):
            if i > 0 and k >= len(models) - gone:
                continue
            reps.append(replica(f"r{k}", t, model=model, ttft=ttft(fast=10.0 * i * (1 - slow), slow=10.0 * i * slow)))
        state.observe(reps, [], now=t)
    return state, t


def _detect(models: list[str], **kw: Any) -> list[Any]:
    state, now = _fleet(models, **kw)
    return rollout.detect(state, thresholds=DEFAULT, now=now)


OLD, NEW = "llama-3.1-8b", "llama-3.3-8b"

CASES = [
    # one version everywhere, even with replicas gone: a scale-in or a crash, not a rollout
    ([OLD] * 8, {"gone": 3}, None),
    # two versions, one replica of eight loading (12 %): a careful rollout, silent
    ([NEW] * 2 + [OLD] * 6, {"gone": 1}, None),
    # two versions, three of eight loading at once (38 % > 25 %): too wide
    ([NEW] * 2 + [OLD] * 6, {"gone": 3}, "warning"),
    # two versions, careful width, but TTFT burning (half the requests slower than the 1 s target)
    ([NEW] * 2 + [OLD] * 6, {"gone": 1, "slow": 0.5}, "warning"),
    # too wide and burning: the rollout is hurting users now
    ([NEW] * 2 + [OLD] * 6, {"gone": 3, "slow": 0.5}, "critical"),
]


def test_cases():
    for models, kw, severity in CASES:
        found = _detect(models, **kw)
        assert [str(f.severity) for f in found] == ([severity] if severity else []), (models, kw)


def test_too_wide_says_how_many_and_which_versions():
    (f,) = _detect([NEW] * 2 + [OLD] * 6, gone=3)
    assert f.summary == (
        f"ml/chat: a rollout replaces 3 of 8 replicas at once (38%, above 25%); 6 on vllm:{OLD}, 2 on vllm:{NEW}"
    )
    assert f.subject.deployment == "ml/chat"
    assert f.evidence["replaced_share"] == 3 / 8


def test_burning_says_the_burn_rate():
    (f,) = _detect([NEW] * 2 + [OLD] * 6, gone=1, slow=0.5)
    assert "TTFT burns its error budget 50.0x" in f.summary
    assert "during a rollout" in f.summary


def test_opens_through_hysteresis_after_three_ticks():
    state, now = _fleet([NEW] * 2 + [OLD] * 6, gone=3)
    det = Detection(only=["rollout"])
    opened = [det.tick(state, now=now + k).opened for k in range(3)]
    assert [len(o) for o in opened] == [0, 0, 1]


def _simulated(wave_size: int) -> list[Any]:
    """A simulated fleet of 4 rolled to a new model in waves of `wave_size`, read as the collector would."""
    fleet = Fleet(
        FleetConfig(replicas=4, cold_start_s=60.0, routing="least_loaded", seed=5),
        load_trace("synthetic:duration_s=900,rate=4,amplitude=0,bursts=0,prompt_mean=400,output_mean=80", seed=5),
    )
    state, det = FleetState(stale_after_s=3 * TICK_S), Detection(only=["rollout"])
    opened: list[Any] = []
    t = 0.0
    while t < 600.0:
        t += TICK_S
        if t == 100.0:
            fleet.inject(parse_fault({"type": "rollout", "wave_size": wave_size, "model_name": "llama-next"}))
        fleet.advance_to(t)
        reps, gpus, nodes = samples_from_snapshot(fleet.snapshot(), now=t)
        state.observe(reps, gpus, now=t, gpu_nodes_scraped=nodes)
        opened.extend(det.tick(state, now=t).opened)
    return opened


def test_a_simulated_rollout_of_half_the_fleet_at_once_is_flagged():
    (f,) = _simulated(wave_size=2)
    assert str(f.severity) == "warning"
    assert "a rollout replaces 2 of 4 replicas at once (50%, above 25%)" in f.summary
    assert "llama-next" in f.summary


def test_a_simulated_rollout_one_replica_at_a_time_is_not():
    assert _simulated(wave_size=1) == []


def test_a_simulated_replica_reads_as_its_page_would_with_its_decode_step_histogram():
    # The rollout stage compares versions by inter-token latency: the simulator's samples carry it, as vLLM's page
    # does, for `kvpilot detect` and the benches alike (bench/rollout.py no longer patches it in).
    fleet = Fleet(
        FleetConfig(replicas=1, cold_start_s=0.0, seed=5),
        load_trace("synthetic:duration_s=120,rate=4,amplitude=0,bursts=0,prompt_mean=400,output_mean=80", seed=5),
    )
    fleet.advance_to(60.0)
    snap = fleet.snapshot()
    (rep,), _, _ = samples_from_snapshot(snap, now=60.0)
    assert rep.itl is not None
    assert rep.itl.count == snap.replicas[0].itl.count > 0
