"""A replica lost in a backtest (`scaler.backtest.faults`): the same fault at the same time on the replica one rule
picks in every policy's replay, replaced by the cluster alike, observed as live, and costing what it should."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from scaler.backtest import faults, run, sim
from scaler.backtest.observe import from_snapshot
from scaler.backtest.policies import Context, Policy
from scaler.backtest.run import BacktestConfig, backtest, context_for, run_policy

# Ten minutes at a steady ~2-3 replicas' load: a lost replica matters, small enough for a unit test.
TRACE = "synthetic:duration_s=600,rate=12,amplitude=0,bursts=0,prompt_mean=3000,output_mean=150"


def _replica(name: str, state: str = "ready", running: int = 0, waiting: int = 0, started_s: float = 0.0) -> Any:
    return SimpleNamespace(
        name=name, state=state, requests_running=running, requests_waiting=waiting, started_s=started_s
    )


def test_specs_parse_and_refuse_in_words() -> None:
    assert faults.parse("xid79@600") == faults.FaultSpec("xid79", 600.0, faults.DEFAULT_REPLACE_S)
    assert faults.parse(" XID79@peak ") == faults.FaultSpec("xid79", None, faults.DEFAULT_REPLACE_S, peak=True)
    assert faults.parse("xid79@90.5,replace=30").replace_s == 30.0
    assert faults.parse("xid79@90,replace=never").replace_s is None
    for bad, words in (
        ("xid80@600", "unknown fault"),
        ("xid79", "unknown fault"),
        ("gpu@600", "unknown fault"),
        ("xid79@", "unknown fault"),
        ("xid79@0", "after 0 s"),
        ("xid79@-5", "after 0 s"),
        ("xid79@soon", "seconds or 'peak'"),
        ("xid79@nan", "seconds or 'peak'"),
        ("xid79@60,later=1", "unknown option"),
        ("xid79@60,replace=-1", ">= 0"),
        ("xid79@60,replace=soon", "seconds or 'never'"),
    ):
        with pytest.raises(ValueError, match=words):
            faults.parse(bad)


def test_a_fault_the_replay_ends_too_soon_after_to_price_says_so() -> None:
    # within the replay it is injected and recorded as asked, but its cost past the end is not priced: said in its
    # JSON record (and the table, from the same words), never silently read as a priced spare
    trace = sim.load_trace(TRACE)  # 600 s

    def resolved(spec: str) -> dict[str, Any]:
        (f,) = faults.resolve([faults.parse(spec)], trace, cold_start_s=120.0, warmup_s=60.0)
        return f.to_json()

    on_time = resolved("xid79@475")  # 125 s left: evicted at 480 s, its replacement serving at 600 s
    assert (on_time["replay_left_s"], on_time["cut_short"]) == (125.0, None)
    late = resolved("xid79@590")
    assert late["replay_left_s"] == 10.0
    assert late["cut_short"] == (
        "the replay ends 10 s after the fault, before its replacement could serve (evicted after 5 s, then a 120 s "
        "cold start): its cost is priced only up to the end"
    )
    assert resolved("xid79@476")["cut_short"] is not None
    assert resolved("xid79@480,replace=never")["cut_short"] is None  # a replica started at once serves by the end
    never = resolved("xid79@481,replace=never")["cut_short"]
    assert never is not None
    assert never.startswith("the replay ends 119 s after the fault, before a replica started after it could serve")


def test_a_fault_after_the_replay_or_at_zero_is_refused() -> None:
    trace = sim.load_trace(TRACE)
    with pytest.raises(ValueError, match="not within the replay"):
        faults.resolve([faults.parse("xid79@600")], trace, cold_start_s=120.0, warmup_s=60.0)
    with pytest.raises(ValueError, match="not within the replay"):
        faults.resolve([faults.FaultSpec("xid79", 900.0)], trace, cold_start_s=120.0, warmup_s=60.0)
    with pytest.raises(ValueError, match="after 0 s"):
        BacktestConfig(faults=(faults.FaultSpec("xid79", 0.0),), frontier=False)
    with pytest.raises(ValueError, match="without faults"):
        BacktestConfig(faults=(faults.parse("xid79@60"),), frontier=True)


def test_the_peak_is_the_busiest_cold_start_window_after_the_warm_up() -> None:
    times = [10.0 * i for i in range(60)]  # 600 s in 10 s bins
    rate = [1.0] * 60
    for i in range(0, 3):
        rate[i] = 50.0  # busiest, but inside the warm-up minute: nobody could have planned for it
    for i in range(30, 42):
        rate[i] = 5.0  # 300-420 s
    assert faults.peak_s(times, rate, window_s=120.0, duration_s=600.0, warmup_s=60.0) == 300.0
    # ties go to the earliest window
    assert faults.peak_s(times, [1.0] * 60, window_s=120.0, duration_s=600.0, warmup_s=60.0) == 60.0
    with pytest.raises(ValueError, match="give the fault a time"):
        faults.peak_s(times[:15], rate[:15], window_s=120.0, duration_s=150.0, warmup_s=60.0)


def test_the_replica_rule_most_requests_then_oldest_serving_only() -> None:
    reps = [
        _replica("llm-0000", running=5, waiting=1),
        _replica("llm-0001", running=6),
        _replica("llm-0002", running=2, waiting=4),
        _replica("llm-0003", state="loading"),
        _replica("llm-0004", state="draining", running=50),
        _replica("llm-0005", state="hung", running=40),
    ]
    assert faults.choose(reps, set()).name == "llm-0000"  # 6 each: the oldest
    assert faults.choose(reps, {"llm-0000"}).name == "llm-0001"
    assert faults.choose([_replica("a", state="loading")], set()) is None
    # the oldest by its start, not by its name as text: past serial 9999, "llm-10000" sorts before "llm-9999"
    late = [_replica("llm-10000", running=3, started_s=50.0), _replica("llm-9999", running=3, started_s=40.0)]
    assert faults.choose(late, set()).name == "llm-9999"


def test_a_stuck_pod_scaled_away_first_is_no_eviction() -> None:
    # The policy scaled the stuck pod away before the cluster replaced it: the rollout stage is told of no eviction,
    # the hit says so (not "never replaced"), and the replica is no longer counted stuck (session 23 review).
    told: list[str] = []

    class _Stage:
        def note_removed(self, key: str, t: float) -> None:
            told.append(key)

    class _Fleet:
        def evict(self, name: str) -> int:
            raise KeyError(name)

    hit = faults.FaultHit("xid79", 200.0, "llm-0001", 7, 3)
    pending = run._Faults([], [hit], _Stage())
    pending.evictions.append((205.0, hit))
    pending.apply(_Fleet(), 205.0)
    assert told == []
    assert hit.replaced_at_s is None
    assert hit.scaled_away_at_s == 205.0
    assert not hit.stuck
    assert hit.to_json()["scaled_away_at_s"] == 205.0


def test_a_stuck_replica_reads_ready_and_its_vanished_gpu_reports_nothing() -> None:
    fleet = sim.make_fleet(
        sim.load_trace(TRACE), replicas=2, cold_start_s=120.0, fidelity="request", seed=0, routing="least_loaded"
    )
    fleet.advance_to(100.0)
    snap = fleet.snapshot()
    victim = faults.choose(snap.replicas, set())
    fleet.inject(sim.xid_fault(snap, victim.name, 79))
    fleet.advance_to(110.0)
    snap = fleet.snapshot()
    assert {r.name: r.state for r in snap.replicas}[victim.name] == "hung"  # the simulator knows
    obs = from_snapshot(snap)
    assert [r.state for r in obs.replicas] == ["ready", "ready"]  # Kubernetes' readiness does not
    utils = {r.name: o.gpu_utilisation for r, o in zip(snap.replicas, obs.replicas, strict=True)}
    assert utils[victim.name] is None  # gone from dcgm-exporter
    assert all(u is not None for n, u in utils.items() if n != victim.name)


def test_every_policy_gets_the_same_fault_at_the_same_time_on_the_replica_the_rule_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[float, str, list[tuple[str, str, int]]]] = []
    real = sim.xid_fault

    def spy(snapshot: Any, replica: str, xid: int) -> Any:
        loads = [(r.name, r.state, r.requests_running + r.requests_waiting) for r in snapshot.replicas]
        seen.append((snapshot.time, replica, loads))
        return real(snapshot, replica, xid)

    monkeypatch.setattr(sim, "xid_fault", spy)
    policies = ("reactive", "hpa-util", "dynamo", "kvpilot")
    cfg = BacktestConfig(policies=policies, frontier=False, faults=(faults.parse("xid79@200"),))
    report = backtest(TRACE, cfg)
    assert len(seen) == len(policies)
    for t, replica, loads in seen:
        assert t == 200.0
        serving = [(-n, name) for name, state, n in loads if state == "ready"]
        assert (-min(serving)[0], min(serving)[1]) == (dict((a, c) for a, _, c in loads)[replica], replica)
    out = report.to_json()
    assert out["faults"][0]["at_s"] == 200.0
    assert out["faults"][0]["replace_after_s"] == faults.DEFAULT_REPLACE_S
    for name in policies:
        (hit,) = out["policies"][name]["faults"]
        assert hit["at_s"] == 200.0
        assert hit["replaced_at_s"] == 200.0 + faults.DEFAULT_REPLACE_S  # the cluster's, the same for all
        assert hit["replica"] in {replica for _, replica, _ in seen}


class _Fixed(Policy):
    """Holds its starting fleet whatever happens: it never asks for a replacement of a lost replica."""

    name = "fixed"

    def decide(self, history: Any, now: float) -> int:
        return self.n

    def start(self, replicas: int, now: float) -> None:
        self.n = replicas


def _fixed_run(spec: str | None) -> Any:
    trace = sim.load_trace(TRACE)
    cfg = BacktestConfig(policies=("reactive",), frontier=False)
    if spec is not None:
        cfg = dataclasses.replace(
            cfg, faults=tuple(faults.resolve([faults.parse(spec)], trace, cold_start_s=120.0, warmup_s=60.0))
        )
    ctx: Context = context_for(trace, cfg)
    return run_policy(trace, _Fixed(ctx), ctx, cfg, "request")


def test_a_fleet_that_never_replaces_the_stuck_replica_loses_its_requests() -> None:
    clean = _fixed_run(None)
    never = _fixed_run("xid79@200,replace=never")
    replaced = _fixed_run("xid79@200")
    (hit,) = never.faults
    assert hit.replaced_at_s is None
    assert hit.requests_held > 0
    # Every request the stuck replica held without a first token, and whatever was routed to it after, is lost;
    # a fault ignored would leave the clean run's numbers.
    lost = (clean.slo_attainment - never.slo_attainment) * clean.requests
    assert lost >= 1
    assert never.slo_attainment < replaced.slo_attainment <= clean.slo_attainment
    (fixed,) = replaced.faults
    assert fixed.replaced_at_s == 205.0
    assert fixed.requests_retried > 0
    # The same fleet size throughout: the stuck pod holds its GPU to the end, or its replacement takes its place.
    assert never.replica_hours == pytest.approx(clean.replica_hours)
    assert replaced.replica_hours == pytest.approx(clean.replica_hours)
