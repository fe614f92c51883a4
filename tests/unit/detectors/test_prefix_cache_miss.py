"""prefix_cache_miss: fires when routing spreads shared prefixes, silent when traffic stops sharing them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from collector.samples import GpuSample, ReplicaSample
from collector.state import FleetState
from detectors import prefix_cache_miss
from detectors.registry import Detection
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import TICK_S, drive, replica

QUERIES_PER_TICK = 5000.0  # tokens: 1000 tokens/s per replica, above min_queries_rate
BASELINE_TICKS = 120  # 10 minutes of baseline
AFTER_TICKS = 48  # 4 minutes after the change (60 s rate window + 120 s settle, with margin)

Ratios = Callable[[int], Sequence[float]]  # per-replica hit ratios at tick i after the change


def _series(
    before: Sequence[float],
    after: Ratios,
    after_ticks: int = AFTER_TICKS,
    *,
    preempting: Callable[[int], bool] = lambda i: False,
    background: Callable[[int], float] = lambda i: 0.0,
    state: FleetState | None = None,
    each: Callable[[FleetState, float], None] | None = None,
) -> tuple[FleetState, float]:
    """Per-replica hit ratios before a change at BASELINE_TICKS and ``after(i)`` at the i-th tick after it (a replica
    list that grows is a scale-out); the replicas preempt once a tick while ``preempting(i)``, and ``background(i)``
    times at every tick, before the change too (i negative there)."""
    hits: dict[str, float] = {}
    queries: dict[str, float] = {}
    preemptions: dict[str, float] = {}

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        after_i = i - BASELINE_TICKS
        ratios = before if after_i < 0 else after(after_i)
        out = []
        for k, r in enumerate(ratios):
            name = f"r{k}"
            queries[name] = queries.get(name, 0.0) + QUERIES_PER_TICK
            hits[name] = hits.get(name, 0.0) + QUERIES_PER_TICK * r
            new = background(after_i) + (after_i >= 0 and preempting(after_i))
            preemptions[name] = preemptions.get(name, 0.0) + new
            out.append(
                replica(name, t, prefix_queries=queries[name], prefix_hits=hits[name], preemptions=preemptions[name])
            )
        return out, []

    n = BASELINE_TICKS + after_ticks
    return drive(tick, n, state=state, each=each), (n - 1) * TICK_S


def _run(before: list[float], after: list[float], after_ticks: int = AFTER_TICKS) -> tuple[FleetState, float]:
    return _series(before, lambda i: after, after_ticks)


CASES = [
    # the router lost affinity: every replica's ratio fell together from 0.8 to 0.35 -> fire, pattern "spread"
    ([0.8, 0.8, 0.8], [0.35, 0.3, 0.4], "spread"),
    # a scale-out from 2 to 4 replicas spread the prefixes: fire, pattern "scale_out"
    ([0.8, 0.8], [0.4, 0.4, 0.45, 0.4], "scale_out"),
    # the traffic stopped sharing prefixes: the ratio fell to ~0 everywhere -> silent (routing cannot help)
    ([0.8, 0.8, 0.8], [0.01, 0.02, 0.0], None),
    # a small dip within the tolerated relative drop -> silent
    ([0.8, 0.8, 0.8], [0.6, 0.65, 0.6], None),
    # a deployment that never had a useful prefix cache -> silent whatever happens
    ([0.1, 0.1, 0.1], [0.03, 0.06, 0.06], None),
    # one replica's cache fell while the others held: not a routing pattern -> silent here
    ([0.8, 0.8, 0.8], [0.1, 0.8, 0.8], None),
]


@pytest.mark.parametrize(("before", "after", "pattern"), CASES)
def test_prefix_cases(before, after, pattern):
    state, now = _run(before, after)
    found = prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)
    assert [f.evidence["pattern"] for f in found] == ([pattern] if pattern else [])
    for f in found:
        assert f.action == "prefix_aware_routing"
        assert f.subject.deployment == "ml/chat"


def test_no_baseline_no_finding():
    # Without min_baseline_s of history older than the recent window there is no baseline to compare.
    state = drive(lambda i, t: ([replica("r0", t, prefix_queries=1e4 * i, prefix_hits=1e3 * i)], []), 10)
    assert prefix_cache_miss.detect(state, thresholds=DEFAULT, now=45) == []


def test_not_yet_settled_is_silent():
    # 95 s after a routing change the 60 s window has only just left the baseline: too early to call it,
    # while the same run 4 minutes on fires.
    before, after = [0.8, 0.8, 0.8], [0.35, 0.3, 0.4]
    state, now = _run(before, after, after_ticks=19)
    assert prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now) == []
    state, now = _run(before, after)
    assert prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now) != []


def test_the_finding_states_the_fall_and_the_bar():
    state, now = _run([0.8, 0.8, 0.8], [0.4, 0.4, 0.4])
    (f,) = prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)
    assert f.evidence["drop"] == pytest.approx(0.5, abs=0.01)
    assert f.evidence["drop_threshold"] == pytest.approx(0.4)
    assert "fell from 80% to 40% on all 3 replicas together (down 50%, warns from 40%)" in f.summary


def _noisy_routing(i: int) -> list[float]:
    # Lost affinity on 4 replicas: 0.2 against a 0.5 baseline (bar 0.30), with one 30 s swing back to 0.5 every
    # 150 s, which lifts the 60 s window above the bar for 11 of the settle window's 25 samples.
    r = 0.5 if i % 30 < 6 else 0.2
    return [r, r, r, r]


def test_a_fall_that_holds_for_most_of_the_window_fires_through_noise() -> None:
    # The median of the settle window is below the bar although some samples are above it: fire.
    state, now = _series([0.5] * 4, _noisy_routing)
    recent = [p.prefix_hit_ratio for p in state.deployment_history("ml/chat") if p.t >= now - 120]
    assert any(r is not None and r >= 0.3 for r in recent)  # the noise does cross the bar
    (f,) = prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)
    assert float(f.evidence["settled_hit_ratio"] or 1.0) < 0.3 <= max(r for r in recent if r is not None)


def _stop_sharing(i: int) -> list[float]:
    return [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "rate_window_s",
    [
        60.0,  # the default: settle_s (120 s) is twice the rate window
        150.0,  # a longer rate window: the transition lasts longer, the detector's settle window grows with it
    ],
)
def test_traffic_that_stops_sharing_is_silent_through_the_transition(rate_window_s: float) -> None:
    # The windowed ratio slides from 0.8 to 0 over one rate window, crossing the band on the way: silent at every
    # tick, not only once it reached zero.
    fired: list[float] = []

    def each(state: FleetState, t: float) -> None:
        if prefix_cache_miss.detect(state, thresholds=DEFAULT, now=t):
            fired.append(t)

    _series([0.8] * 3, _stop_sharing, after_ticks=80, state=FleetState(rate_window_s=rate_window_s), each=each)
    assert fired == []


@pytest.mark.parametrize(
    ("preempting", "fires"),
    [
        # the replicas preempt throughout: the misses are KV pressure's (kv_exhaustion says so) -> silent
        (lambda i: True, False),
        # one preemption a minute before now: still within the settle window -> silent
        (lambda i: i == 36, False),
        # preemptions stopped more than a settle window and a rate window ago: the fall is the routing's -> fire
        (lambda i: i < 10, True),
        # none at all -> fire
        (lambda i: False, True),
    ],
)
def test_silent_while_the_replicas_preempt(preempting: Callable[[int], bool], fires: bool) -> None:
    state, now = _series([0.8] * 3, lambda i: [0.35, 0.3, 0.4], preempting=preempting)
    assert bool(prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)) is fires


def _every_30_s(i: int) -> float:
    return float(i % 6 == 0)  # each replica preempts twice a minute, at every tick of the run


@pytest.mark.parametrize(
    ("background", "preempting", "fires"),
    [
        # a steady background through the baseline and the window, then the router lost affinity -> fire
        (_every_30_s, lambda i: False, True),
        # the same background and a burst in the window, once a tick (12 a minute) on every replica for 60 s -> silent
        (_every_30_s, lambda i: 30 <= i < 42, False),
        # no preemption in the baseline, preemptions that start in the window -> silent
        (lambda i: 0.0, lambda i: i >= 30, False),
    ],
)
def test_silent_only_on_preemption_the_baseline_did_not_have(
    background: Callable[[int], float], preempting: Callable[[int], bool], fires: bool
) -> None:
    state, now = _series([0.8] * 3, lambda i: [0.35, 0.3, 0.4], preempting=preempting, background=background)
    assert bool(prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)) is fires


def test_background_preemption_of_added_replicas_is_no_new_pressure() -> None:
    # A scale-out from 2 to 5 replicas, each preempting in the background as before: the deployment preempts 2.5
    # times as often, its replicas do not -> fire, pattern "scale_out".
    state, now = _series([0.8] * 2, lambda i: [0.4, 0.4, 0.45, 0.4, 0.4], background=_every_30_s)
    assert [f.evidence["pattern"] for f in prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)] == [
        "scale_out"
    ]


def test_settle_window_is_at_least_two_rate_windows() -> None:
    assert prefix_cache_miss.settle_window_s(DEFAULT.prefix, 60.0) == DEFAULT.prefix.settle_s
    assert prefix_cache_miss.settle_window_s(DEFAULT.prefix, 150.0) == 300.0


# Prefix affinity's skew: the replica holding the popular prefixes hits more than the one taking the spill
# (coefficient of variation 0.35 across the four replicas; their mean and the deployment's ratio 0.40).
SKEWED = [0.6, 0.4, 0.2, 0.4]
LOST_AFFINITY = replace(DEFAULT, prefix=replace(DEFAULT.prefix, lost_affinity_drop=0.2))  # the option, on

LOST_AFFINITY_CASES = [
    # the router stopped keeping prefixes together: ratios alike and 25 % lower -> fire, pattern "lost_affinity"
    (SKEWED, [0.3, 0.3, 0.3, 0.3], "lost_affinity"),
    # alike but for sampling noise (spread 0.02): still lost affinity
    (SKEWED, [0.31, 0.29, 0.3, 0.3], "lost_affinity"),
    # the same 25 % fall with the skew kept (traffic that shares less, routing unchanged) -> silent
    (SKEWED, [0.45, 0.3, 0.15, 0.3], None),
    # the ratios became alike without falling (the router evened out its load, the hits held) -> silent
    (SKEWED, [0.4, 0.4, 0.4, 0.4], None),
    # alike before as after (replicas that all cache the same prefixes): a 25 % fall is within the ratio's swing
    ([0.4, 0.4, 0.4, 0.4], [0.3, 0.3, 0.3, 0.3], None),
    # evened out but fell only 10 %, under lost_affinity_drop -> silent
    (SKEWED, [0.36, 0.36, 0.36, 0.36], None),
    # a fall past relative_drop with the ratios alike: the 40 % rule's pattern, whatever the spread did
    (SKEWED, [0.2, 0.2, 0.2, 0.2], "spread"),
]


@pytest.mark.parametrize(("before", "after", "pattern"), LOST_AFFINITY_CASES)
def test_lost_affinity_is_a_smaller_fall_with_the_replicas_alike(before, after, pattern) -> None:
    state, now = _run(before, after)
    found = prefix_cache_miss.detect(state, thresholds=LOST_AFFINITY, now=now)
    assert [f.evidence["pattern"] for f in found] == ([pattern] if pattern else [])


def test_lost_affinity_states_the_spread_and_its_bar() -> None:
    state, now = _run(SKEWED, [0.3, 0.3, 0.3, 0.3])
    (f,) = prefix_cache_miss.detect(state, thresholds=LOST_AFFINITY, now=now)
    assert f.evidence["drop"] == pytest.approx(0.25, abs=0.01)
    assert f.evidence["drop_threshold"] == pytest.approx(0.2)
    assert f.evidence["replica_ratio_spread"] == pytest.approx(0.0, abs=1e-9)
    assert f.evidence["baseline_replica_ratio_spread"] == pytest.approx(0.354, abs=0.001)
    assert "fell from 40% to 30% while its 4 replicas' ratios became alike (spread 0.00, 0.35 before)" in f.summary
    assert "(down 25%, warns from 20%)" in f.summary


def test_lost_affinity_is_on_by_default_and_null_turns_it_off() -> None:
    # The default since the demo's 17 seeds (docs/detectors.md); null reads the 40 % bar alone.
    assert DEFAULT.prefix.lost_affinity_drop == 0.2
    state, now = _run(SKEWED, [0.3, 0.3, 0.3, 0.3])
    assert [f.evidence["pattern"] for f in prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)] == [
        "lost_affinity"
    ]
    off = replace(DEFAULT, prefix=replace(DEFAULT.prefix, lost_affinity_drop=None))
    assert prefix_cache_miss.detect(state, thresholds=off, now=now) == []


def test_lost_affinity_waits_for_the_settle_window() -> None:
    # 95 s after the change the settle window still holds the skewed ratios: silent; 4 minutes on it fires.
    state, now = _run(SKEWED, [0.3, 0.3, 0.3, 0.3], after_ticks=19)
    assert prefix_cache_miss.detect(state, thresholds=LOST_AFFINITY, now=now) == []


# -- The lost-affinity option over time: one fault, one finding; a healthy affinity fleet, none -------------------


def _opened_and_closed(
    before: Sequence[float], after: Ratios, after_ticks: int, *, preempting: Callable[[int], bool] = lambda i: False
) -> tuple[list[int], list[int]]:
    """Ticks after the change at which the control loop's Detection (hysteresis included) opened and closed a
    prefix_cache_miss finding, the option on."""
    detection = Detection(LOST_AFFINITY, only=[prefix_cache_miss.KIND])
    opened: list[int] = []
    closed: list[int] = []

    def each(state: FleetState, t: float) -> None:
        i = round(t / TICK_S) - BASELINE_TICKS
        changed = detection.tick(state, now=t)
        opened.extend(i for _ in changed.opened)
        closed.extend(i for _ in changed.closed)

    _series(before, after, after_ticks, preempting=preempting, each=each)
    return opened, closed


BURST = range(60, 72)  # a minute of KV pressure, five minutes into the round-robin


def _round_robin_through_a_burst(i: int) -> list[float]:
    # Round-robin from the change on (the replicas alike): 25 % under the baseline, then a burst of long prompts
    # evicts the cached prefixes unevenly, then the round-robin goes on with a fall that the traffic makes 12 % for
    # three minutes and 25 % again after.
    if i in BURST:
        return [0.05, 0.12, 0.03, 0.09]
    if 72 <= i < 108:
        return [0.35, 0.35, 0.36, 0.35]
    return [0.3, 0.3, 0.31, 0.3]


def test_one_finding_for_a_round_robin_that_runs_through_a_kv_burst() -> None:
    # Before, the burst's preemptions silenced the detector for 12 ticks and closed the finding; after them the
    # 12 % fall was under the bar, and the same round-robin opened a second finding when the fall came back.
    opened, closed = _opened_and_closed(SKEWED, _round_robin_through_a_burst, 160, preempting=lambda i: i in BURST)
    assert len(opened) == 1
    assert opened[0] < BURST[0]
    assert closed == []


def test_the_held_finding_closes_once_the_router_keeps_prefixes_together_again() -> None:
    # The same fault and burst, then prefix affinity back at 108 ticks (the baseline's skew and ratio): closed 12
    # ticks after the last tick that held it, and nothing opens again.
    def restored(i: int) -> list[float]:
        return SKEWED if i >= 108 else _round_robin_through_a_burst(i)

    opened, closed = _opened_and_closed(SKEWED, restored, 200, preempting=lambda i: i in BURST)
    assert len(opened) == 1
    assert len(closed) == 1
    assert 108 < closed[0] <= 108 + 24 + 12


def _met_and_parted(i: int) -> list[float]:
    # Prefix affinity over 3 replicas: for two and a half minutes the traffic's mix left their ratios alike at the
    # baseline's level, then they part again while the traffic shares less (a 25 % fall with the skew back).
    return [0.3, 0.3, 0.3] if i < 30 else [0.33, 0.22, 0.12]


def test_an_affinity_fleet_whose_ratios_met_for_a_while_opens_nothing() -> None:
    # Over most of the spread's window the replicas were alike; now they are not: no lost affinity (the shipped
    # option read the window's median alone and opened here, as it did over 3 fixed affinity replicas in the
    # simulator, seed 0, at 2,105 s).
    opened, _ = _opened_and_closed([0.45, 0.3, 0.15], _met_and_parted, 60)
    assert opened == []


def test_two_replicas_never_read_as_alike() -> None:
    # Two replicas' ratios are one difference, which prefix affinity lets close whenever the traffic's mix moves both
    # together: the option leaves a 2-replica deployment to the 40 % rule.
    state, now = _run([0.5, 0.3], [0.32, 0.32])
    assert prefix_cache_miss.detect(state, thresholds=LOST_AFFINITY, now=now) == []
    state, now = _run([0.5, 0.3, 0.4], [0.32, 0.32, 0.32])
    assert [f.evidence["pattern"] for f in prefix_cache_miss.detect(state, thresholds=LOST_AFFINITY, now=now)] == [
        "lost_affinity"
    ]


def test_a_skew_seen_for_less_than_min_baseline_s_is_no_baseline() -> None:
    # Two replicas for 500 s, a third from then (the skew of three read for 100 s), then their ratios alike and
    # 25 % lower: the baseline's spread over the three replicas there now spans too little to trust -> silent.
    queries: dict[str, float] = {}
    hits: dict[str, float] = {}

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        ratios = [0.6, 0.2] if i < 100 else [0.6, 0.2, 0.4] if i < BASELINE_TICKS else [0.3, 0.3, 0.3]
        out = []
        for k, r in enumerate(ratios):
            name = f"r{k}"
            queries[name] = queries.get(name, 0.0) + QUERIES_PER_TICK
            hits[name] = hits.get(name, 0.0) + QUERIES_PER_TICK * r
            out.append(replica(name, t, prefix_queries=queries[name], prefix_hits=hits[name]))
        return out, []

    n = BASELINE_TICKS + AFTER_TICKS
    state = drive(tick, n)
    assert prefix_cache_miss.detect(state, thresholds=LOST_AFFINITY, now=(n - 1) * TICK_S) == []
