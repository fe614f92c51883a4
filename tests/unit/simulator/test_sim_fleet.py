"""The fleet: determinism, cold starts, scaling, routing and prefix hit rates, faults, both fidelity levels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator import Fleet, FleetConfig, load_trace, parse_fault
from simulator.trace import Trace


@pytest.fixture(scope="module")
def conv(traces_dir: Path) -> Trace:
    return load_trace(traces_dir / "azure2023_conv.csv", duration_s=900)


def _hit_rate(fleet: Fleet) -> float:
    snap = fleet.snapshot()
    return sum(r.prefix_hits_total for r in snap.replicas) / sum(r.prefix_queries_total for r in snap.replicas)


def test_same_seed_same_results(conv: Trace) -> None:
    runs = []
    for _ in range(2):
        f = Fleet(FleetConfig(replicas=3, routing="least_loaded"), conv)
        f.advance_to(300)
        f.set_replicas(5)
        f.advance_to(900)
        runs.append([(x.arrival_s, x.ttft_s, x.e2e_s, x.replica) for x in f.finished()])
    assert runs[0] == runs[1]
    assert len(runs[0]) > 1000


def test_every_request_finishes_once(conv: Trace) -> None:
    f = Fleet(FleetConfig(replicas=4), conv)
    f.advance_to(conv.duration_s + 300)
    assert len(f.finished()) == len(conv.requests) == f.snapshot().arrivals_total
    assert all(x.ttft_s > 0 and x.e2e_s >= x.ttft_s for x in f.finished())


def test_new_replicas_cold_start_and_requests_wait_at_the_gateway(conv: Trace) -> None:
    f = Fleet(FleetConfig(replicas=0, cold_start_s=60, start_ready=False), conv)
    f.set_replicas(2)
    f.advance_to(30)
    snap = f.snapshot()
    assert [r.state for r in snap.replicas] == ["loading", "loading"]
    assert snap.unrouted_waiting > 0
    assert not f.finished()
    f.advance_to(120)
    assert f.snapshot().unrouted_waiting == 0
    first = min(f.finished(), key=lambda x: x.arrival_s)
    assert first.ttft_s >= 60 - first.arrival_s  # it waited for the weights to load


def test_scale_down_drains_and_removes(conv: Trace) -> None:
    f = Fleet(FleetConfig(replicas=4), conv)
    f.advance_to(100)
    f.set_replicas(2)
    f.advance_to(160)
    assert len(f.snapshot().replicas) == 2
    f.set_replicas(3)  # a new one loads; the old ones keep serving
    assert [r.state for r in f.snapshot().replicas].count("loading") == 1


def test_prefix_hit_rate_falls_when_traffic_is_spread_without_affinity(conv: Trace) -> None:
    rates = {}
    for routing in ("round_robin", "prefix_affinity"):
        f = Fleet(FleetConfig(replicas=8, routing=routing), conv)
        f.advance_to(conv.duration_s)
        rates[routing] = _hit_rate(f)
    assert rates["prefix_affinity"] > rates["round_robin"] * 1.15


def test_more_replicas_without_affinity_lower_the_hit_rate(conv: Trace) -> None:
    rates = []
    for n in (1, 8):
        f = Fleet(FleetConfig(replicas=n, routing="round_robin"), conv)
        f.advance_to(conv.duration_s)
        rates.append(_hit_rate(f))
    assert rates[1] < rates[0]


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        # XID 79: the GPU falls off the bus: gone from its exporter, its replica hung.
        ({"type": "xid", "node": "node-0", "gpu": 0, "xid": 79},
         lambda s: s.gpus[0].vanished and s.gpus[0].last_xid == 79 and s.replicas[0].state == "hung"),
        # An application XID only records the code.
        ({"type": "xid", "node": "node-0", "gpu": 1, "xid": 13},
         lambda s: s.gpus[1].last_xid == 13 and not s.gpus[1].vanished and s.replicas[1].state == "ready"),
        # A hung GPU reads busy while its replica makes no progress.
        ({"type": "hung_gpu", "node": "node-0", "gpu": 0},
         lambda s: s.gpus[0].utilisation > 0.9 and s.replicas[0].state == "hung"),
        ({"type": "vanish_gpu", "node": "node-0", "gpu": 1}, lambda s: s.gpus[1].vanished),
        # A crash restarts the engine: loading again, counters from zero.
        ({"type": "crash", "replica": "llama-0000"},
         lambda s: s.replicas[0].state == "loading" and s.replicas[0].prompt_tokens_total == 0),
        # A burst of long prompts fills the KV pool.
        ({"type": "kv_pressure", "count": 200, "prompt_tokens": 20000, "duration_s": 5},
         lambda s: max(r.kv_usage for r in s.replicas) > 0.5),
        ({"type": "routing", "routing": "least_loaded"}, lambda s: s.routing == "least_loaded"),
    ],
)  # fmt: skip
def test_faults_show_in_the_snapshot(conv: Trace, fault: dict, check) -> None:  # type: ignore[no-untyped-def]
    f = Fleet(FleetConfig(replicas=2), conv)
    f.advance_to(60)
    f.inject(parse_fault(fault))
    f.advance_to(90)
    assert check(f.snapshot())


def test_recover_clears_a_hung_gpu(conv: Trace) -> None:
    f = Fleet(FleetConfig(replicas=2), conv)
    f.inject(parse_fault({"type": "hung_gpu", "node": "node-0", "gpu": 0}))
    f.advance_to(60)
    stuck = f.snapshot().replicas[0].requests_waiting + f.snapshot().replicas[0].requests_running
    f.inject(parse_fault({"type": "recover", "node": "node-0", "gpu": 0}))
    f.advance_to(120)
    assert stuck > 0
    assert f.snapshot().replicas[0].state == "ready"


def test_fault_on_unknown_gpu_names_it(conv: Trace) -> None:
    f = Fleet(FleetConfig(replicas=1), conv)
    with pytest.raises(KeyError, match="node-9"):
        f.inject(parse_fault({"type": "hung_gpu", "node": "node-9", "gpu": 0}))


def test_gpu_placement_packs_nodes() -> None:
    trace = load_trace("synthetic:duration_s=60,rate=1")
    f = Fleet(FleetConfig(replicas=10), trace)
    nodes = [r.node for r in f.snapshot().replicas]
    assert nodes == ["node-0"] * 8 + ["node-1"] * 2


@pytest.mark.parametrize("fidelity", ["request", "fluid"])
def test_slo_attainment_and_quantiles_agree(conv: Trace, fidelity: str) -> None:
    f = Fleet(FleetConfig(replicas=4, fidelity=fidelity), conv)
    f.advance_to(conv.duration_s)
    q = f.ttft_quantiles((0.5, 0.99))
    assert 0 < q[0.5] <= q[0.99]
    assert f.slo_attainment(q[0.99] * 1.0001) >= 0.99
    assert f.slo_attainment(q[0.5] * 0.5) < 0.5


def test_fluid_tracks_request_level_queueing_under_overload(traces_dir: Path) -> None:
    trace = load_trace(traces_dir / "mooncake_synthetic_trace.jsonl")
    result = {}
    for fidelity in ("request", "fluid"):
        f = Fleet(FleetConfig(replicas=1, fidelity=fidelity), trace)
        f.advance_to(trace.duration_s)
        snap = f.snapshot()
        result[fidelity] = sum(r.requests_waiting for r in snap.replicas) + snap.unrouted_waiting
    # One calibrated H100 replica cannot keep up with the Mooncake trace: both levels must show a large backlog.
    assert result["request"] > 100
    assert result["fluid"] > 100


def test_fluid_cold_start_delays_service() -> None:
    trace = load_trace("synthetic:duration_s=600,rate=5,bursts=0")
    f = Fleet(FleetConfig(replicas=0, fidelity="fluid", cold_start_s=120), trace)
    f.set_replicas(2)
    f.advance_to(100)
    assert f.snapshot().unrouted_waiting > 0
    f.advance_to(300)
    assert f.snapshot().unrouted_waiting == 0
    assert f.ttft_quantiles((0.99,))[0.99] > 20


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replicas": -1}, "replicas"),  # negative count
        ({"routing": "random"}, "routing"),  # unknown policy
        ({"fidelity": "exact"}, "fidelity"),  # unknown level
        ({"cold_start_s": -5}, "cold_start_s"),  # negative time
    ],
)
def test_bad_config_fails_fast(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FleetConfig(**kwargs)


def test_advance_backwards_is_refused(conv: Trace) -> None:
    f = Fleet(FleetConfig(replicas=1), conv)
    f.advance_to(10)
    with pytest.raises(ValueError, match="backwards"):
        f.advance_to(5)


@pytest.mark.parametrize("routing", ["round_robin", "prefix_affinity"])
def test_fluid_hit_rate_tracks_the_request_level(conv: Trace, routing: str) -> None:
    rates = {}
    for fidelity in ("request", "fluid"):
        f = Fleet(FleetConfig(replicas=8, routing=routing, fidelity=fidelity), conv)
        f.advance_to(conv.duration_s)
        rates[fidelity] = _hit_rate(f)
    assert rates["fluid"] == pytest.approx(rates["request"], abs=0.05)


@pytest.mark.parametrize("fidelity", ["request", "fluid"])
def test_loop_replays_the_trace(fidelity: str) -> None:
    trace = load_trace("synthetic:duration_s=100,rate=2,bursts=0", seed=5)
    looped = Fleet(FleetConfig(replicas=2, fidelity=fidelity, loop=True), trace)
    once = Fleet(FleetConfig(replicas=2, fidelity=fidelity), trace)
    for f in (looped, once):
        f.advance_to(250)
    n = once.snapshot().arrivals_total
    assert n == pytest.approx(len(trace.requests), rel=0.05)
    # Two and a half passes of the trace: the looped fleet keeps arriving.
    assert looped.snapshot().arrivals_total == pytest.approx(2.5 * n, rel=0.15)


def test_derived_traces_through_public_constructors(traces_dir: Path) -> None:
    from simulator.trace import RequestColumns
    from simulator.trace.model import Trace as TraceCls

    sg = load_trace(traces_dir / "servegen_m-large_days1-10", rate_scale=0.01)
    cols = sg.sample_columns(600, 900)  # a lazy trace samples only that span
    assert len(cols) > 0
    assert cols.arrival_s.min() >= 0
    assert cols.arrival_s.max() < 300
    mine = TraceCls.from_columns("mix", 300, RequestColumns(cols.arrival_s[::-1].copy(), cols.prompt_tokens,
                                                            cols.output_tokens, cols.prefix_blocks))  # fmt: skip
    assert np.all(np.diff([r.arrival_s for r in mine.requests]) >= 0)  # sorted on the way in


@pytest.mark.parametrize("fidelity", ["request", "fluid"])
def test_snapshot_can_be_limited_to_some_replicas(conv: Trace, fidelity: str) -> None:
    f = Fleet(FleetConfig(replicas=3, fidelity=fidelity), conv)
    f.advance_to(60)
    full = f.snapshot()
    one = f.snapshot(replicas={"llama-0001"})
    assert [r.name for r in one.replicas] == ["llama-0001"]
    assert one.replicas[0] == full.replicas[1]
    assert len(one.gpus) == len(full.gpus)


@pytest.mark.parametrize("fidelity", ["request", "fluid"])
def test_replica_counters_never_fall_as_the_fleet_changes(fidelity: str) -> None:
    """An engine's counters only grow while its process lives: growing the fleet, shrinking it or hanging a
    replica's GPU must not lower another replica's counter (a fall reads as a reset to every rate it feeds)."""
    trace = load_trace("synthetic:duration_s=900,rate=8,bursts=0", seed=3)
    f = Fleet(FleetConfig(replicas=2, fidelity=fidelity, cold_start_s=30, start_ready=True), trace)
    last: dict[str, tuple[int, ...]] = {}

    def check() -> None:
        for r in f.snapshot().replicas:
            now = (r.requests_finished_total, r.generation_tokens_total, r.prompt_tokens_total, r.ttft.count)
            before = last.get(r.name)
            assert before is None or all(a >= b for a, b in zip(now, before, strict=True)), (r.name, before, now)
            last[r.name] = now

    t = 0.0
    for target, until in ((2, 120), (5, 300), (3, 500), (6, 700)):
        f.set_replicas(target)
        while t < until:
            t += 10
            f.advance_to(t)
            check()
    assert sum(v[0] for v in last.values()) > 0  # the replicas served something
    gpu = f.snapshot().gpus[0]
    f.inject(parse_fault({"type": "hung_gpu", "node": gpu.node, "gpu": gpu.index}))
    for _ in range(10):
        t += 10
        f.advance_to(t)
        check()


@pytest.mark.parametrize("fidelity", ["request", "fluid"])
def test_replica_count_is_what_the_snapshot_lists(conv: Trace, fidelity: str) -> None:
    # The frontier's replays count replicas this way instead of building a snapshot each tick: loading and
    # draining replicas count as the snapshot lists them.
    f = Fleet(FleetConfig(replicas=4, cold_start_s=60, fidelity=fidelity), conv)
    seen = []
    for t, n in [(30, 4), (100, 2), (105, 6), (130, 1), (400, 3)]:
        f.set_replicas(n)
        f.advance_to(t)
        seen.append((f.replica_count(), len(f.snapshot().replicas)))
    assert all(a == b for a, b in seen), seen
    assert len({a for a, _ in seen}) > 2  # the counts moved
