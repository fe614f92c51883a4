"""Each baseline reacts to the signal its source says it watches, and only to that."""

from __future__ import annotations

import pytest

from scaler.backtest.observe import History, Observation, ReplicaObs
from scaler.backtest.policies import POLICIES, Context

CTX = Context(
    cold_start_s=120.0,
    slo_ttft_s=2.0,
    capacity_rps=2.0,
    mean_prompt_tokens=1000.0,
    mean_output_tokens=200.0,
    future_rate=(tuple(float(t) for t in range(0, 3600, 10)), tuple([1.0] * 180 + [9.0] * 180)),
    bin_s=10.0,
)


def _obs(t: float, n: int, *, waiting: float = 0.0, kv: float = 0.2, util: float = 0.5) -> Observation:
    rep = ReplicaObs("ready", waiting / n, 1.0, kv, util)
    return Observation(t, (rep,) * n, 0.0, 0.0, 0.0, 0.0)


def _history(*obs: Observation) -> History:
    h = History()
    for o in obs:
        h.add(o)
    return h


@pytest.mark.parametrize(
    ("name", "obs", "expected"),
    [
        ("reactive", _obs(60, 2, waiting=40.0), 6),  # 40 waiting / 5 = 8, capped by the HPA at max(2·2, 2+4)
        ("reactive", _obs(60, 2, waiting=0.0), 2),  # empty queue, but the seeded 2 holds for 300 s
        ("hpa-util", _obs(60, 2, util=1.0), 3),  # 100 % over 80 %: ceil(1.25·2)
        ("kpa-knative", _obs(60, 2, kv=0.7), 2),  # exactly at the 70 % KV target: hold
        ("kpa-knative", _obs(60, 2, kv=0.95), 3),  # 1.9 total KV / 0.7 = 2.7 → 3
        ("kpa", _obs(60, 2, kv=0.95), 3),  # per-pod 0.95 over 0.7 on 2 pods: ceil(2.7) → 3 (rises apply at once)
        ("wva", _obs(60, 2, kv=0.75), 2),  # the engine wants 3, the chart's HPA holds it for 240 s
    ],
)
def test_baseline_decision(name: str, obs: Observation, expected: int) -> None:
    policy = POLICIES[name](CTX)
    policy.start(obs.current, 0.0)
    assert policy.decide(_history(obs), obs.t) == expected


def test_wva_waits_for_pending_replicas() -> None:
    loading = ReplicaObs("loading", 0.0, 0.0, 0.0, None)
    hot = ReplicaObs("ready", 0.0, 1.0, 0.79, 0.9)
    obs = Observation(60.0, (hot, hot, loading), 0.0, 0.0, 0.0, 0.0)
    assert POLICIES["wva"](CTX).decide(_history(obs), 60.0) == 3


def test_dynamo_sla_sizes_for_its_predicted_rate() -> None:
    # 180 s intervals of 360 arrivals (2 req/s), then 1080 (6 req/s), at the reference mix whose capacity is
    # 2 req/s per engine: the predictor follows the new level and asks for 3.
    dynamo = POLICIES["dynamo-sla"](CTX)
    h = History()
    arrivals = 0.0
    for i, per_interval in enumerate([360.0] * 3 + [1080.0] * 6):
        arrivals += per_interval
        rep = (ReplicaObs("ready", 0, 1, 0.2, 0.5),)
        h.add(Observation(180.0 * (i + 1), rep, arrivals, arrivals, 1000.0 * arrivals, 200.0 * arrivals))
        got = dynamo.decide(h, 180.0 * (i + 1))
    assert got == 3
