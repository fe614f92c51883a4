"""Each peer reproduces a worked example from its own project's docs or tests, and none exceeds the ceiling."""

from __future__ import annotations

import math

import pytest

from scaler.backtest.hpa import HpaBehaviour, ScalingPolicy, ScalingRules, average_value_replicas
from scaler.backtest.observe import History, Observation, ReplicaObs
from scaler.backtest.policies import POLICIES, Context
from scaler.backtest.policies.dynamo import agg_easy_decision
from scaler.backtest.policies.dynamo_sla import ArimaLoadPredictor
from scaler.backtest.policies.kpa import Kpa, target_replicas
from scaler.backtest.policies.wva import Wva, saturation_target

CTX = Context(
    cold_start_s=120.0,
    slo_ttft_s=2.0,
    capacity_rps=2.0,
    mean_prompt_tokens=1000.0,
    mean_output_tokens=200.0,
    future_rate=(tuple(float(t) for t in range(0, 3600, 10)), tuple([50.0] * 360)),
    bin_s=10.0,
)


def _rep(kv: float = 0.2, waiting: float = 0.0, state: str = "ready", capacity: float = 10_000.0) -> ReplicaObs:
    return ReplicaObs(state, waiting, 1.0, kv, 0.5, capacity)


def _history(*obs: Observation) -> History:
    h = History()
    for o in obs:
        h.add(o)
    return h


# -- Kubernetes HPA -------------------------------------------------------------------------------------------


def test_hpa_docs_scale_down_policy_example() -> None:
    # kubernetes.io "Horizontal Pod Autoscaling", scaling policies: Pods 4 / 60 s and Percent 10 / 60 s (Max); from
    # 80 replicas the first step removes 8, the next (at 72) 8 again (int(72 x 0.9) = 64); below 40 pods the Pods
    # policy allows more (30 → 26).
    rules = ScalingRules(0.0, (ScalingPolicy("Pods", 4, 60.0), ScalingPolicy("Percent", 10, 60.0)))
    hpa = HpaBehaviour(scale_down=rules)
    assert hpa.apply(0.0, 80, 10) == 72
    assert hpa.apply(30.0, 72, 10) == 72  # the same period: 8 already removed
    assert hpa.apply(60.0, 72, 10) == 64
    assert HpaBehaviour(scale_down=rules).apply(0.0, 30, 10) == 26


def test_hpa_scale_up_stabilisation_keeps_the_lowest_recommendation() -> None:
    # A 240 s up-window (the WVA chart's): a rise only applies once every recommendation in the window is higher.
    rules = ScalingRules(240.0, (ScalingPolicy("Pods", 10, 150.0),))
    hpa = HpaBehaviour(scale_up=rules, scale_down=rules)
    hpa.seed(0.0, 2)
    assert hpa.apply(15.0, 2, 3) == 2
    assert hpa.apply(239.0, 2, 3) == 2
    assert hpa.apply(241.0, 2, 3) == 3


def test_hpa_pods_policy_counts_its_own_scale_events_over_the_period() -> None:
    rules = ScalingRules(0.0, (ScalingPolicy("Pods", 10, 150.0),))
    hpa = HpaBehaviour(scale_up=rules)
    assert hpa.apply(0.0, 1, 50) == 11
    assert hpa.apply(60.0, 11, 50) == 11  # 10 pods already added within 150 s
    assert hpa.apply(151.0, 11, 50) == 21


# -- llm-d workload-variant-autoscaler ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kv", "queue", "current", "ready", "last", "expected"),
    [
        # docs/saturation-analyzer.md's five replicas: spare KV 0.15, spare queue 3.2 → no scale-up; load over four
        # replicas leaves KV spare −0.01 → scale-down unsafe: hold at 5.
        ([0.70, 0.75, 0.60, 0.65, 0.55], [2, 3, 1, 2, 1], 5, 5, 0, 5),
        ([0.75, 0.75], [0, 0], 2, 2, 0, 3),  # spare KV 0.05 < 0.10: ready + 1
        ([0.1, 0.1], [4, 4], 2, 2, 0, 3),  # spare queue 1 < 3: ready + 1
        ([0.1] * 4, [0] * 4, 4, 4, 0, 3),  # the load over three keeps both spares above the triggers: ready − 1
        ([0.75, 0.75], [0, 0], 2, 2, 3, 3),  # last desired 3 ≠ current 2: in transition, hold the desired
        ([0.75, 0.75], [0, 0], 3, 2, 0, 3),  # a replica not reporting yet: in transition, hold the current
        ([0.1], [0], 1, 1, 0, 1),  # one replica: never below 1
    ],
)
def test_wva_saturation_targets(
    kv: list[float], queue: list[float], current: int, ready: int, last: int, expected: int
) -> None:
    assert saturation_target(kv, queue, current, ready, last) == expected


def test_wva_engine_every_30_s_behind_the_charts_hpa() -> None:
    wva = Wva(CTX)
    wva.start(2, 0.0)
    hot = Observation(0.0, (_rep(kv=0.78), _rep(kv=0.78)), 0.0, 0.0, 0.0, 0.0)
    h = History()
    got = []
    for t in range(60, 331, 15):
        h.add(Observation(float(t), hot.replicas, 0.0, 0.0, 0.0, 0.0))
        got.append(wva.decide(h, float(t)))
    assert wva.desired == 3  # the engine asked for one more at t = 60 and holds it while in transition
    # The HPA raises only once the last lower recommendation (the running 2, at t = 0) leaves its 240 s window.
    assert got == [2] * ((240 - 60) // 15) + [3] * ((330 - 240) // 15 + 1)


def test_wva_plus_one_is_inside_the_hpa_tolerance_above_ten_replicas() -> None:
    # The chart's HPA reads wva_desired_replicas as an AverageValue of 1: 21 wanted on 20 is a ratio of 1.05, inside
    # the HPA's default 10 % tolerance, so the engine's +1 never reaches the deployment (11 on 10 just passes).
    assert average_value_replicas(21.0, 1.0, 20) == 20
    assert average_value_replicas(11.0, 1.0, 10) == 11


# -- NVIDIA Dynamo planner ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("utils", "workers", "expected"),
    [
        ([1.2, 0.3], 2, 3),  # any engine above 100 % (KV incl. queued prefill): one more
        ([0.5, 0.55], 2, 1),  # every engine below 60 %: one fewer
        ([0.5, 0.7], 2, None),  # one engine between: no change
        ([0.1], 1, None),  # never below min_endpoint
    ],
)
def test_dynamo_agg_easy_decision(utils: list[float], workers: int, expected: int | None) -> None:
    assert agg_easy_decision(utils, workers) == expected


def test_dynamo_counts_queued_prefill_tokens_and_waits_for_workers() -> None:
    # 0.9 of 10k KV tokens held plus 10 queued requests x 1000 prompt tokens: util 1.9 > 1.0 → one more.
    busy = Observation(60.0, (_rep(kv=0.9, waiting=10.0), _rep(kv=0.5)), 0.0, 0.0, 0.0, 0.0)
    assert POLICIES["dynamo"](CTX).decide(_history(busy), 60.0) == 3
    loading = Observation(60.0, (*busy.replicas, _rep(state="loading", kv=0.0)), 0.0, 0.0, 0.0, 0.0)
    assert POLICIES["dynamo"](CTX).decide(_history(loading), 60.0) == 3  # scaling in progress: observe only


def test_dynamo_sla_arima_predictor_as_predictors_py() -> None:
    p = ArimaLoadPredictor(180.0)
    for v in (0.0, 0.0, math.nan, 10.0, 12.0):  # leading zeros (and a NaN read as 0) are skipped
        p.add(v)
    assert p.raw == [10.0, 12.0]
    assert p.predict_next() == 12.0  # fewer than 5 points: the last value
    flat = ArimaLoadPredictor(180.0)
    for _ in range(6):
        flat.add(7.0)
    assert flat.predict_next() == 7.0  # constant data: its value
    level = ArimaLoadPredictor(180.0)  # fitted once at 5 points, as Dynamo predicts every interval, then updated
    for i in range(12):
        level.add(1000.0 + (15.0 if i % 2 else -15.0))
        level.predict_next()
    assert level.predict_next() == pytest.approx(1000.0, rel=0.05)


# -- AIBrix KPA -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stable", "panic", "ready", "in_panic", "expected"),
    [
        # pkg/controller/podautoscaler/algorithm/kpa_test.go, target 10, rates 2/2 (their values are fleet totals;
        # here per-pod averages of the same load):
        (10.0, 10.0, 2, False, 2),  # stable_mode_basic_scaling: 20 / 10 → 2
        (15.0, 20.0, 2, True, 4),  # panic_mode_scaling_up: panic 40 / 10 → 4
        (1.25, 1.25, 4, False, 2),  # max_scale_down_rate_limit: 5 / 10 → 1, floored at 4 / 2 → 2
    ],
)
def test_kpa_target_replicas_as_aibrix_tests(
    stable: float, panic: float, ready: int, in_panic: bool, expected: int
) -> None:
    got, _ = target_replicas(stable, panic, ready, target=10.0, in_panic=in_panic)
    assert got == expected


def test_kpa_enters_panic_above_twice_the_stable_value() -> None:
    assert target_replicas(0.2, 0.5, 4)[1] is True
    assert target_replicas(0.4, 0.5, 4)[1] is False


def test_kpa_scale_down_takes_the_minimum_of_its_window() -> None:
    kpa = Kpa(CTX)
    assert kpa._stabilise(0.0, 5, 5) == 5
    assert kpa._stabilise(10.0, 3, 5) == 3
    assert kpa._stabilise(20.0, 4, 5) == 3  # the lowest recommendation of the last 300 s wins a fall
    assert kpa._stabilise(30.0, 7, 5) == 7  # a rise applies at once (0 s up-cooldown)


# -- one ceiling for all --------------------------------------------------------------------------------------

PEERS = ["reactive", "hpa-util", "kpa", "kpa-knative", "wva", "dynamo", "dynamo-sla"]


@pytest.mark.parametrize("name", PEERS)
def test_every_peer_respects_max_replicas(name: str) -> None:
    ctx = Context(**{**CTX.__dict__, "max_replicas": 3})
    policy = POLICIES[name](ctx)
    policy.start(3, 0.0)
    h = History()
    got, next_decision = [], 60.0
    for i in range(1, 200):  # overloaded for half an hour, each policy asked on its own interval as the runner does
        t = 10.0 * i
        reps = tuple(_rep(kv=1.0, waiting=500.0) for _ in range(3))
        h.add(Observation(t, reps, 2000.0 * i, 100.0 * i, 1e5 * i, 2e4 * i))
        if t >= next_decision:
            got.append(policy.decide(h, t))
            next_decision = t + policy.interval_s
    assert len(got) >= 10
    assert max(got) <= 3
