"""FleetState: windowed rates per replica, deployment aggregation, staleness, the GPU join, bounded memory."""

from __future__ import annotations

import gc
import itertools
import math
import tracemalloc
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.rates import histogram_add, histogram_increase
from collector.samples import GpuSample, Histogram, ReplicaSample, TargetInfo
from collector.state import FleetState, ReplicaView

INF = math.inf


def rs(
    replica: str = "r0", t: float = 0.0, deployment: str = "llama", node: str = "n0", **values: object
) -> ReplicaSample:
    base = ReplicaSample(
        namespace="prod", deployment=deployment, replica=replica, node=node, engine="vllm", model="m", timestamp=t
    )
    return replace(base, **values)  # type: ignore[arg-type]


def gs(index: str = "0", t: float = 0.0, node: str = "n0", **values: object) -> GpuSample:
    base = GpuSample(node=node, index=index, uuid=f"GPU-{node}-{index}", model_name="H100", timestamp=t)
    return replace(base, **values)  # type: ignore[arg-type]


def feed(state: FleetState, ticks: list[list[ReplicaSample]], *, step: float = 5.0) -> None:
    for i, samples in enumerate(ticks):
        state.observe(samples, [], now=i * step)


def test_every_rate_of_a_replica_view_lands_in_its_own_field() -> None:
    # FleetState builds its views by position (a thousand a tick): each counter moves at its own pace here, so a
    # field added, moved or swapped there reads another counter's rate and fails.
    paces = {
        "prefix_hits": 1.0,
        "prefix_queries": 4.0,
        "preemptions": 0.5,
        "prompt_tokens": 100.0,
        "generation_tokens": 20.0,
        "requests_finished": 2.0,
    }
    ticks = [
        [rs(t=t, requests_waiting=1.0, requests_running=2.0 + t / 5, **{k: v * t for k, v in paces.items()})]
        for t in (0.0, 5.0, 10.0)
    ]
    state = FleetState(rate_window_s=60, stale_after_s=30)
    feed(state, ticks)
    (view,) = state.replicas()
    assert [f.name for f in fields(ReplicaView)] == [
        "sample",
        "ready",
        "target_up",
        "last_seen",
        "age_s",
        "prefix_hit_ratio",
        "prefix_hits_increase",
        "prefix_queries_increase",
        "prefix_queries_rate",
        "preemptions_rate",
        "prompt_tokens_rate",
        "generation_tokens_rate",
        "requests_finished_rate",
        "arrival_rate",
        "ttft_window",
        "gpus",
        "itl_window",
        "node_gpus",
    ]
    assert (view.sample, view.ready, view.target_up, view.last_seen, view.age_s) == (
        ticks[-1][0],
        True,
        True,
        10.0,
        0.0,
    )
    assert (view.prefix_hits_increase, view.prefix_queries_increase) == (10.0, 40.0)
    assert view.prefix_hit_ratio == 0.25
    assert view.prefix_queries_rate == 4.0
    assert view.preemptions_rate == 0.5
    assert view.prompt_tokens_rate == 100.0
    assert view.generation_tokens_rate == 20.0
    assert view.requests_finished_rate == 2.0
    assert view.arrival_rate == 2.2  # finished 2/s plus in flight growing 0.2/s
    assert (view.ttft_window, view.gpus, view.itl_window, view.node_gpus) == (None, (), None, ())


REPLICA_RATE_CASES = [
    # steady counters: rate is Δ/Δt over the window
    ("prompt_tokens_rate", [{"prompt_tokens": 0}, {"prompt_tokens": 50}, {"prompt_tokens": 100}], 10.0),
    # a restart within the window: the post-reset value is the increase, never negative
    ("prompt_tokens_rate", [{"prompt_tokens": 900}, {"prompt_tokens": 950}, {"prompt_tokens": 50}], 10.0),
    # an engine that does not export the counter: unknown, not 0
    ("generation_tokens_rate", [{}, {}, {}], None),
    # a counter missing at one scrape is skipped, not taken as 0 (which would look like a restart)
    ("preemptions_rate", [{"preemptions": 10}, {"preemptions": None}, {"preemptions": 20}], 1.0),
    # hit ratio is Δhits/Δqueries, not the lifetime ratio (lifetime would be 500/1000 = 0.5)
    (
        "prefix_hit_ratio",
        [{"prefix_hits": 400, "prefix_queries": 500}, {"prefix_hits": 500, "prefix_queries": 1000}],
        0.2,
    ),
    # no new queries in the window: no hit ratio (not 0)
    ("prefix_hit_ratio", [{"prefix_hits": 5, "prefix_queries": 10}, {"prefix_hits": 5, "prefix_queries": 10}], None),
    # arrivals = finished rate + growth of the queue: 1 finished/s while waiting+running grows 1/s
    (
        "arrival_rate",
        [
            {"requests_finished": 0, "requests_waiting": 0, "requests_running": 2},
            {"requests_finished": 5, "requests_waiting": 3, "requests_running": 4},
        ],
        2.0,
    ),
    # arrivals unknown when finished requests are unknown
    ("arrival_rate", [{"requests_waiting": 0}, {"requests_waiting": 5}], None),
]


@pytest.mark.parametrize(("field", "ticks", "expected"), REPLICA_RATE_CASES)
def test_replica_rates(field: str, ticks: list[dict[str, object]], expected: float | None) -> None:
    state = FleetState(rate_window_s=60)
    feed(state, [[rs(t=i * 5.0, **values)] for i, values in enumerate(ticks)])
    (view,) = state.replicas()
    got = getattr(view, field)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_rate_window_only_uses_recent_samples() -> None:
    # 0..60 s at 1 token/s, then 10 tokens/s: a 20 s window sees only the new rate
    state = FleetState(rate_window_s=20)
    ticks = [[rs(t=float(t), prompt_tokens=float(t))] for t in range(0, 61, 5)]
    ticks += [[rs(t=60.0 + t, prompt_tokens=60.0 + 10 * t)] for t in range(5, 41, 5)]
    for samples in ticks:
        state.observe(samples, [], now=samples[0].timestamp)
    assert state.replicas()[0].prompt_tokens_rate == pytest.approx(10.0)


def test_ttft_window_is_histogram_delta() -> None:
    bounds = (0.1, 1.0, INF)
    h1 = Histogram(bounds, (1, 2, 3), 1.0, 3)
    h2 = Histogram(bounds, (2, 6, 8), 4.0, 8)
    state = FleetState()
    feed(state, [[rs(t=0, ttft=h1)], [rs(t=5, ttft=h2)]])
    assert state.replicas()[0].ttft_window == Histogram(bounds, (1, 4, 5), 3.0, 5)


def test_stale_replica_is_not_ready_and_leaves_aggregates() -> None:
    state = FleetState(stale_after_s=30, forget_after_s=600)
    state.observe([rs("a", t=0, requests_waiting=3), rs("b", t=0, requests_waiting=4)], [], now=0)
    # b stops answering; 40 s later only a is fresh
    state.observe(
        [rs("a", t=40, requests_waiting=1)], [], now=40, down_targets=[TargetInfo(url="x", namespace="prod", pod="b")]
    )
    views = {v.sample.replica: v for v in state.replicas()}
    assert views["a"].ready
    assert views["a"].target_up
    assert not views["b"].ready
    assert not views["b"].target_up
    dep = state.deployments()["prod/llama"]
    assert dep.ready_replicas == 1
    assert len(dep.replicas) == 2
    assert dep.requests_waiting == 1  # b's last value (4) must not count


def test_down_target_alone_does_not_make_fresh_replica_unready() -> None:
    # one failed scrape: target_up goes False at once, ready only once the sample is stale
    state = FleetState(stale_after_s=30)
    state.observe([rs("a", t=0)], [], now=0)
    state.observe([], [], now=5, down_targets=[TargetInfo(url="x", namespace="prod", pod="a")])
    (view,) = state.replicas()
    assert view.ready
    assert not view.target_up


def test_forgotten_replica_disappears() -> None:
    state = FleetState(stale_after_s=10, forget_after_s=100)
    state.observe([rs("a", t=0)], [], now=0)
    state.observe([], [], now=101)
    assert state.replicas() == []
    assert state.replica_history("prod/a") == ()


def test_deployment_aggregation() -> None:
    state = FleetState()
    t0 = [
        rs(
            "a",
            t=0,
            kv_usage=0.2,
            requests_waiting=1,
            requests_running=4,
            prefix_hits=0,
            prefix_queries=0,
            prompt_tokens=0,
        ),
        rs(
            "b",
            t=0,
            kv_usage=0.8,
            requests_waiting=None,
            requests_running=6,
            prefix_hits=0,
            prefix_queries=0,
            prompt_tokens=0,
        ),
        rs("c", t=0, deployment="other", kv_usage=1.0),
    ]
    t1 = [
        rs(
            "a",
            t=10,
            kv_usage=0.2,
            requests_waiting=1,
            requests_running=4,
            prefix_hits=90,
            prefix_queries=100,
            prompt_tokens=100,
        ),
        rs(
            "b",
            t=10,
            kv_usage=0.8,
            requests_waiting=None,
            requests_running=6,
            prefix_hits=10,
            prefix_queries=900,
            prompt_tokens=300,
        ),
        rs("c", t=10, deployment="other", kv_usage=1.0),
    ]
    state.observe(t0, [], now=0)
    state.observe(t1, [], now=10)
    deps = state.deployments()
    assert set(deps) == {"prod/llama", "prod/other"}
    dep = deps["prod/llama"]
    assert dep.ready_replicas == 2
    assert dep.requests_waiting == 1  # b does not export it: it adds nothing rather than 0-or-None
    assert dep.requests_running == 10
    assert dep.kv_usage_mean == pytest.approx(0.5)
    assert dep.kv_usage_max == pytest.approx(0.8)
    assert dep.prompt_tokens_rate == pytest.approx(40.0)
    # summed deltas, not a mean of ratios (0.9 and ~0.011 would average to ~0.46)
    assert dep.prefix_hit_ratio == pytest.approx(100 / 1000)
    assert deps["prod/other"].requests_waiting is None  # nobody exports it: unknown
    history = state.deployment_history("prod/llama")
    assert [p.t for p in history] == [0, 10]
    assert history[-1].requests_running == 10
    assert history[0].prompt_tokens_rate is None


def test_a_replica_history_is_built_once_per_sample() -> None:
    # After an hour a history is ~85 samples: the same tuple serves every ask until the next sample (a tick's readers
    # ask for windows of it instead: replica_history_since, tests/unit/collector/test_state_windows.py).
    state = FleetState(history_s=3600, stale_after_s=30)
    for i in range(40):
        state.observe([rs(t=i * 5.0, requests_running=float(i))], [], now=i * 5.0)
    first = state.replica_history("prod/r0")
    assert state.replica_history("prod/r0") is first
    state.observe([rs(t=200.0, requests_running=40.0)], [], now=200.0)
    after = state.replica_history("prod/r0")
    assert after is not first  # a new sample: the history is built again, with it
    assert [s.timestamp for s in after[-2:]] == [195.0, 200.0]
    assert after[-1].requests_running == 40.0
    assert state.replica_history("prod/r0") is after
    state.observe([rs(t=200.0, requests_running=99.0)], [], now=200.0)  # a repeated time is dropped
    assert state.replica_history("prod/r0") is after


def test_histories_are_bounded_by_time_and_count() -> None:
    state = FleetState(history_s=100, max_points=8, stale_after_s=30)
    for i in range(50):
        state.observe([rs(t=i * 5.0, requests_running=float(i))], [], now=i * 5.0)
    hist = state.replica_history("prod/r0")
    assert len(hist) <= 8
    assert hist[-1].timestamp == 245
    dep_hist = state.deployment_history("prod/llama")
    assert len(dep_hist) <= 8
    assert all(p.t >= 245 - 100 for p in dep_hist)


def test_an_hour_of_history_is_tiered() -> None:
    # complete for the 60 s rate window, every sample (TTFT histogram packed aside) for 120 s, then one per 60 s
    state = FleetState(rate_window_s=60, history_s=3600, stale_after_s=30)
    for i in range(3600 // 5 + 1):
        h = Histogram((0.1, 1.0, INF), (i, 2 * i, 3 * i), 1.0 * i, 3 * i)
        state.observe([rs(t=i * 5.0, ttft=h, itl=h, e2e=h, queue_time=h, kv_usage=i / 1000)], [], now=i * 5.0)
    hist = state.replica_history("prod/r0")
    recent = [s for s in hist if s.timestamp >= 3600 - 120]
    older = [s for s in hist if s.timestamp < 3600 - 120]
    assert len(recent) == 25
    assert all(s.itl is not None and s.ttft is not None for s in recent if s.timestamp >= 3600 - 60)
    assert all(s.itl is None and s.ttft is None for s in recent if s.timestamp < 3600 - 60)
    assert 55 <= len(older) <= 59
    assert all(s.ttft is None and s.itl is None and s.e2e is None and s.queue_time is None for s in older)
    assert all(s.kv_usage == s.timestamp / 5 / 1000 for s in hist)  # the scalar values stay
    assert all(b.timestamp - a.timestamp >= 60 for a, b in itertools.pairwise(older))
    assert hist[0].timestamp >= 0
    # the TTFT histograms of the same samples, each with its own values
    ttft = state.ttft_history("prod/r0")
    assert [t for t, _ in ttft] == [s.timestamp for s in hist]
    assert all(h == Histogram((0.1, 1.0, INF), (t / 5, 2 * t / 5, 3 * t / 5), t / 5, 3 * t / 5) for t, h in ttft)


def test_the_ttft_history_is_kept_packed() -> None:
    # Outside the rate window a TTFT histogram is one array of doubles (~0.24 kB at 20 buckets), not a tuple and a
    # float object per bucket (~0.82 kB): an hour at 1,000 vLLM targets, ~50 MB less. Measured as the live memory an
    # hour of one replica's histograms adds over the same hour without them, every value its own float as a parsed
    # page's are.
    bounds = (*(0.01 * 2**k for k in range(19)), INF)

    def grown(with_ttft: bool) -> tuple[int, int]:
        state = FleetState(rate_window_s=60, history_s=3600, stale_after_s=30)

        def observe(i: int) -> None:
            t = i * 5.0
            counts = tuple(float(i * 100 + k) for k in range(len(bounds)))
            ttft = Histogram(bounds, counts, t * 0.5, counts[-1]) if with_ttft else None
            state.observe([rs(t=t, ttft=ttft, kv_usage=float(i))], [], now=t)

        for i in range(13):
            observe(i)  # the rate window full: what grows after is the other tiers
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(13, 3600 // 5 + 1):
                observe(i)
            gc.collect()  # the views' garbage of every tick
            size = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        return size, len(state.replica_history("prod/r0")) - 12

    with_ttft, kept = grown(True)
    without, _ = grown(False)
    assert 70 <= kept <= 90  # the middle and thinned tiers: 24 + ~58 samples
    assert (with_ttft - without) / kept < 400, (with_ttft, without, kept)


def test_equal_bucket_bounds_are_stored_once() -> None:
    # every scrape parses its own bounds tuple; the state keeps one per layout (half a histogram's memory)
    def hist() -> Histogram:
        return Histogram(tuple(float(b) for b in ("0.1", "1.0", "inf")), (1, 2, 3), 1.0, 3)

    state = FleetState()
    state.observe([rs("a", ttft=hist(), itl=hist()), rs("b", ttft=hist())], [], now=0)
    state.observe([rs("a", t=5, ttft=hist())], [], now=5)
    stored = [s.ttft for key in ("prod/a", "prod/b") for s in state.replica_history(key)]
    stored.append(state.replica_history("prod/a")[0].itl)
    assert all(h is not None for h in stored)
    assert len({id(h.bounds) for h in stored if h is not None}) == 1
    assert state.replica_history("prod/a")[-1].ttft == hist()  # values unchanged


def test_a_layouts_bounds_tuple_met_again_is_shared_and_its_samples_kept_as_they_are() -> None:
    # A target's first page is parsed (its own bounds tuple); later pages are read off the layout, whose adapter plan
    # hands out one tuple every tick. Met a second time, that tuple becomes the shared one: its samples are stored as
    # they come (not copied to point at the first page's tuple, 900 copies a tick at 1,000 targets before).
    first_page = (0.1, 1.0, INF)
    plan = tuple([0.1, 1.0, INF])
    assert plan == first_page
    assert plan is not first_page
    state = FleetState()
    state.observe([rs("a", ttft=Histogram(first_page, (1, 2, 3), 1.0, 3))], [], now=0)
    given = [rs("a", t=5.0 * i, ttft=Histogram(plan, (i, 2 * i, 3 * i), 1.0, 3 * i)) for i in range(1, 5)]
    for sample in given:
        state.observe([sample], [], now=sample.timestamp)
    stored = state.replica_history("prod/a")
    assert stored[2:] == tuple(given[1:])
    assert all(s is g for s, g in zip(stored[2:], given[1:], strict=True))
    assert stored[1] == given[0]
    assert stored[1] is not given[0]
    assert [s.ttft.bounds for s in stored] == [first_page] * 5  # every value unchanged
    state.observe([rs("b", t=30, ttft=Histogram(tuple([0.1, 1.0, INF]), (1, 1, 1), 1.0, 1))], [], now=30)
    assert state.replica_history("prod/b")[0].ttft.bounds is plan  # another page's own tuple: the shared one


def test_out_of_order_sample_is_ignored() -> None:
    state = FleetState()
    state.observe([rs(t=10, prompt_tokens=100)], [], now=10)
    state.observe([rs(t=5, prompt_tokens=0)], [], now=11)  # late duplicate from a slow scrape
    assert [s.timestamp for s in state.replica_history("prod/r0")] == [10]


GPU_JOIN_CASES = [
    # dcgm attributes the GPU to a pod (with namespace): joined by pod even if on another node name
    ({"pod": "a", "namespace": "prod", "node": "nX"}, "prod/a"),
    # attributed to a pod without namespace: matched by pod name
    ({"pod": "b", "namespace": None, "node": "nX"}, "prod/b"),
    # no attribution: joined by node, when exactly one replica runs there
    ({"node": "n1"}, "prod/b"),
    # no attribution, two replicas on the node: ambiguous, not guessed
    ({"node": "n0"}, None),
    # a GPU on a node without replicas serves nobody
    ({"node": "n9"}, None),
]


@pytest.mark.parametrize(("gpu", "expected"), GPU_JOIN_CASES)
def test_gpu_join(gpu: dict[str, object], expected: str | None) -> None:
    state = FleetState()
    replicas = [rs("a", node="n0"), rs("b", node="n1"), rs("c", node="n0")]
    state.observe(replicas, [gs(**gpu)], now=0)
    (view,) = state.gpus()
    assert view.replica == expected
    if expected is not None:
        (rv,) = [r for r in state.replicas() if r.key == expected]
        assert view.sample in rv.gpus


def test_replica_gets_node_gpus_when_unattributed() -> None:
    state = FleetState()
    state.observe([rs("a", node="n0")], [gs("0"), gs("1"), gs("0", node="n1")], now=0)
    assert [g.index for g in state.replicas()[0].gpus] == ["0", "1"]


def test_a_nodes_gpus_are_sorted_once_for_every_replica_on_it() -> None:
    state = FleetState()
    replicas = [rs("a", node="n0"), rs("b", node="n1"), rs("c", node="n0"), rs("d", node="")]
    gpus = [gs("1"), gs("0"), gs("0", node="n1"), gs("2", node="n1", pod="b", namespace="prod")]
    state.observe(replicas, gpus, now=0)
    state.observe([replace(r, timestamp=5.0) for r in replicas], [replace(g, timestamp=5.0) for g in gpus], now=5.0)
    a, b, c, d = state.replicas()
    # the replicas of one node share one tuple (sorted by key), not a copy each; two replicas on a node without pod
    # attribution: its GPUs are neither's own (which are whose is unknown), only shared (node_gpus)
    assert [g.index for g in a.node_gpus] == ["0", "1"]
    assert a.node_gpus is c.node_gpus
    assert a.gpus == c.gpus == ()
    # a pod's own GPUs win over its node's; a replica with no node and no pod GPUs has none
    assert [g.index for g in b.gpus] == ["2"]
    assert d.gpus == ()


def test_vanished_gpu_stays_while_its_exporter_answers_then_is_forgotten_with_the_node() -> None:
    state = FleetState(stale_after_s=10, forget_after_s=60)
    state.observe([], [gs("0", t=0), gs("1", t=0)], now=0)
    state.observe([], [gs("0", t=5)], now=5)  # exporter on n0 answered without GPU 1
    views = {g.sample.index: g for g in state.gpus()}
    assert views["0"].present
    assert not views["1"].present
    assert views["1"].last_seen == 0
    # Long after forget_after_s the GPU is still missing from a live exporter: a fault, kept (its finding stays open).
    state.observe([], [gs("0", t=600)], now=600)
    assert {g.sample.index: g.present for g in state.gpus()} == {"0": True, "1": False}
    # The node itself goes (its exporter no longer answers): both GPUs age out.
    state.observe([], [], now=700, gpu_nodes_scraped=())
    assert state.gpus() == []


def test_unattributed_gpu_on_an_attributing_node_is_unallocated() -> None:
    # dcgm-exporter labels GPUs held by pods; a GPU without a pod on such a node is free, not the node's replica.
    state = FleetState()
    state.observe([rs("a", node="n0")], [gs("0", pod="a"), gs("1")], now=0)
    views = {g.sample.index: g.replica for g in state.gpus()}
    assert views["1"] is None
    assert views["0"] is not None


def test_gpu_on_unanswered_exporter_keeps_its_presence() -> None:
    # n1's exporter did not answer this tick: its GPU is unknown, not vanished
    state = FleetState()
    state.observe([], [gs("0", node="n0"), gs("0", node="n1")], now=0)
    state.observe([], [gs("0", t=5, node="n0")], now=5)
    assert all(g.present for g in state.gpus())


def test_exporter_answering_with_empty_page_marks_gpus_missing() -> None:
    state = FleetState()
    state.observe([], [gs("0"), gs("1")], now=0)
    state.observe([], [], now=5, gpu_nodes_scraped={"n0"})
    assert [g.present for g in state.gpus()] == [False, False]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate_window_s": 0},  # a zero window can never hold two samples
        {"history_s": -1},  # negative history is meaningless
        {"stale_after_s": 30, "forget_after_s": 10},  # forgetting before turning stale would skip "not ready"
        {"max_points": 1},  # one point cannot give a rate
        {"rate_window_s": 60, "full_resolution_s": 30},  # rates need every sample of their window
        {"history_step_s": 0},  # thinning needs a positive step
    ],
)
def test_bad_configuration_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="FleetState"):
        FleetState(**kwargs)  # type: ignore[arg-type]


COUNTER_VALUES = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1e9))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.1, 30), COUNTER_VALUES, COUNTER_VALUES, COUNTER_VALUES, st.booleans()),
        min_size=1,
        max_size=60,
    )
)
def test_any_sequence_of_samples_keeps_rates_sane_and_memory_bounded(
    steps: list[tuple[float, float | None, float | None, float | None, bool]],
) -> None:
    # whatever adapters hand over (unknown, NaN, inf, resets, gaps), rates are None or finite and >= 0,
    # ratios stay within [0, 1] when hits never exceed queries, and histories respect their caps
    state = FleetState(rate_window_s=30, history_s=120, stale_after_s=20, max_points=16)
    t = 0.0
    hits = queries = 0.0
    for gap, prompt, finished, waiting, reset in steps:
        t += gap
        if reset:
            hits = queries = 0.0
        queries += 10
        hits += 3
        sample = rs(
            t=t,
            prompt_tokens=prompt,
            requests_finished=finished,
            requests_waiting=waiting,
            prefix_hits=hits,
            prefix_queries=queries,
        )
        state.observe([sample], [], now=t)
    (view,) = state.replicas()
    for rate in (view.prompt_tokens_rate, view.requests_finished_rate, view.preemptions_rate):
        assert rate is None or (math.isfinite(rate) and rate >= 0)
    assert view.arrival_rate is None or view.arrival_rate >= 0
    assert view.prefix_hit_ratio is None or 0 <= view.prefix_hit_ratio <= 1
    assert len(state.replica_history("prod/r0")) <= 3 * 16
    assert len(state.deployment_history("prod/llama")) <= 16


@st.composite
def _ttft(draw: st.DrawFn) -> Histogram | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    bounds = (0.5, INF) if draw(st.integers(0, 15)) == 0 else (0.1, 1.0, INF)
    counts = tuple(
        float(c)
        for c in itertools.accumulate(draw(st.lists(st.integers(0, 50), min_size=len(bounds), max_size=len(bounds))))
    )
    return Histogram(bounds=bounds, counts=counts, sum=float(draw(st.integers(0, 10**4))), count=counts[-1])


@settings(max_examples=60, deadline=None)
@given(hists=st.lists(_ttft(), min_size=1, max_size=60), window_s=st.sampled_from([30.0, 100.0, 300.0, 1000.0]))
def test_ttft_increase_is_the_increase_over_every_sample_from_the_oldest_kept_one_in_the_window(
    hists: list[Histogram | None], window_s: float
) -> None:
    # a short history and coarse steps, so that all three tiers (recent, middle, thinned older) are crossed
    state = FleetState(rate_window_s=20, full_resolution_s=40, history_step_s=15, history_s=600, stale_after_s=30)
    added: list[tuple[float, Histogram]] = []
    for i, h in enumerate(hists):
        now = 5.0 * i
        state.observe([rs(t=now, ttft=h)], [], now=now)
        if h is not None:
            added.append((now, h))
        key = state.replicas()[0].key
        # the window starts at `since` or where the bounds last changed, at the oldest sample still kept there
        changed = max(
            (t for (t, h1), (_, h0) in zip(added[1:], added, strict=False) if h1.bounds != h0.bounds), default=-1.0
        )
        kept = [t for t, _ in state.ttft_history(key)]
        start = [t for t in kept if t >= max(now - window_s, changed)]
        expected = histogram_increase([h1 for t, h1 in added if start and t >= start[0]])
        got = state.ttft_increase(key, now - window_s)
        assert (got is None) == (expected is None)
        if got is not None and expected is not None:
            assert got.bounds == expected.bounds
            assert got.counts == pytest.approx(expected.counts)
            assert (got.sum, got.count) == pytest.approx((expected.sum, expected.count))
    assert state.ttft_increase("nobody/none", 0.0) is None


def test_a_restart_between_two_thinned_samples_counts_in_the_ttft_increase() -> None:
    # An hour's window crosses the thinned tier (one sample kept a minute, at 1,980 s and 2,040 s here): the engine
    # restarted at 2,010 s. Comparing the kept samples alone sees the restart but takes the old process' count at
    # 1,980 s, losing what it counted up to 2,005 s; every sample as it arrived tells the value before the restart.
    state = FleetState(rate_window_s=60, history_s=3600, history_step_s=60.0, stale_after_s=30)
    bounds = (1.0, INF)

    def ttft(fast: float, total: float) -> Histogram:
        return Histogram(bounds=bounds, counts=(fast, total), sum=total, count=total)

    t = 0.0
    fast = total = 0.0
    while t <= 3000.0:
        if t == 2010.0:  # the restart
            fast = total = 0.0
        fast, total = fast + 5.0, total + 10.0
        state.observe([rs(t=t, ttft=ttft(fast, total))], [], now=t)
        t += 5.0
    key = state.replicas()[0].key
    got = state.ttft_increase(key, 0.0)
    assert got is not None
    assert got.count == pytest.approx(10.0 * 600)  # every observation after the first sample (601 samples)
    assert got.counts[0] == pytest.approx(5.0 * 600)


@settings(max_examples=60, deadline=None)
@given(
    per_replica=st.lists(st.lists(_ttft(), min_size=1, max_size=40), min_size=1, max_size=4),
    window_s=st.sampled_from([10.0, 30.0, 100.0, 300.0, 1000.0]),
)
def test_ttft_increase_sum_is_histogram_add_of_each_replicas_ttft_increase(
    per_replica: list[list[Histogram | None]], window_s: float
) -> None:
    # The deployment's window the SLO burn detector reads: the same histogram, float for float, as adding each
    # replica's increase (replicas whose bounds differ from the first's left out, unknown ones skipped).
    state = FleetState(rate_window_s=20, full_resolution_s=40, history_step_s=15, history_s=600, stale_after_s=30)
    keys = [f"prod/r{i}" for i in range(len(per_replica))] + ["nobody/none"]
    for tick in range(max(map(len, per_replica))):
        now = 5.0 * tick
        samples = [rs(replica=f"r{i}", t=now, ttft=hs[tick]) for i, hs in enumerate(per_replica) if tick < len(hs)]
        state.observe(samples, [], now=now)
        for order in (keys, keys[::-1]):
            expected = histogram_add(state.ttft_increase(key, now - window_s) for key in order)
            assert state.ttft_increase_sum(iter(order), now - window_s) == expected


def test_a_node_re_cut_into_partitions_forgets_the_old_keys_without_calling_them_vanished() -> None:
    # AMD's device-metrics-exporter after SPX -> CPX (review G, session 17): the node's whole GPUs are listed no more,
    # its partitions are, each with a UUID of its own. Before, each old key stayed absent ("fell off the bus",
    # a critical drain finding) for as long as the node was there.
    state = FleetState()
    state.observe([], [gs("0"), gs("1")], now=0)
    cpx = [gs(str(i), t=5, uuid=f"P-{i}", mig_profile="cpx/nps4", mig_instance=str(i % 4)) for i in range(8)]
    state.observe([], cpx, now=5)
    views = state.gpus()
    assert sorted(g.sample.uuid or "" for g in views) == sorted(f"P-{i}" for i in range(8))
    assert all(g.present for g in views)
    # and back to whole GPUs
    state.observe([], [gs("0", t=10), gs("1", t=10)], now=10)
    assert sorted((g.sample.index, g.present) for g in state.gpus()) == [("0", True), ("1", True)]


def test_mig_turned_on_or_an_instance_destroyed_is_a_re_cut_but_a_gpu_gone_from_a_mixed_node_is_vanished() -> None:
    state = FleetState()
    state.observe([], [gs("0"), gs("1")], now=0)
    # GPU 0 turns MIG on: its UUID comes back under two instance keys
    mig = [gs("0", t=5, mig_profile="3g.40gb", mig_instance=str(i)) for i in (1, 2)]
    state.observe([], [*mig, gs("1", t=5)], now=5)
    assert sorted((g.sample.key, g.present) for g in state.gpus()) == [
        ("n0/GPU-n0-0/mig1", True),
        ("n0/GPU-n0-0/mig2", True),
        ("n0/GPU-n0-1", True),
    ]
    # GPU 0's MIG instances go, GPU 1 (whole) stays: the node kept the modes it had beside them, so GPU 0 is lost
    state.observe([], [gs("1", t=10)], now=10)
    assert sorted((g.sample.key, g.present) for g in state.gpus()) == [
        ("n0/GPU-n0-0/mig1", False),
        ("n0/GPU-n0-0/mig2", False),
        ("n0/GPU-n0-1", True),
    ]
