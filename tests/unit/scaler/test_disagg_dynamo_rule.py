"""Dynamo's SLA planner rule as scaler.backtest.disagg replays it (issue 14's peer): every 180 s, prefill from the
interval's prompt tokens at one GPU's prefill throughput, decode from its output tokens at the throughput the ITL
target allows, at least one replica each; what BENCHMARKS.md's "Disaggregated pools" explains its attainment by."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from scaler.backtest.disagg import DYNAMO_INTERVAL_S, DynamoRule, PoolGpus, _serving

H100 = _serving(PoolGpus().prefill_profile)


class _Fleet:
    """What the rule reads of a disaggregated fleet: arrivals and prompt tokens on prefill, finished requests."""

    def __init__(self) -> None:
        self.arrivals = 0.0
        self.prompt = 0.0
        self.done: list[Any] = []

    def interval(self, requests: int, prompt: int, output: int) -> None:
        self.arrivals += requests
        self.prompt += requests * prompt
        self.done += [SimpleNamespace(output_tokens=output)] * requests

    def snapshots(self) -> dict[str, Any]:
        replica = SimpleNamespace(prompt_tokens_total=self.prompt)
        return {"prefill": SimpleNamespace(arrivals_total=self.arrivals, replicas=[replica])}

    def finished(self) -> list[Any]:
        return self.done


def _decide(intervals: list[tuple[int, int, int]], predictor: str = "constant") -> list[tuple[int, int] | None]:
    rule, fleet, out = DynamoRule(predictor), _Fleet(), []
    for i, (requests, prompt, output) in enumerate(intervals, start=1):
        fleet.interval(requests, prompt, output)
        out.append(rule.decide(fleet, i * DYNAMO_INTERVAL_S))  # type: ignore[arg-type]
    return out


def test_prefill_is_the_intervals_prompt_tokens_over_one_gpus_throughput() -> None:
    # Azure code x4's busiest interval: 3,392 requests x 2,048 tokens / 180 s = 38.6k tokens/s, under one H100
    (first,) = _decide([(3_392, 2_048, 28)])
    assert first is not None
    assert first[0] == 1
    # four times the prompt tokens at the same request rate: prefill grows, decode (same outputs) does not
    (busy,) = _decide([(3_392, 8_192, 28)])
    assert busy is not None
    assert busy[0] == math.ceil(3_392 * 8_192 / DYNAMO_INTERVAL_S / H100.prefill_tokens_per_s) > first[0]
    assert busy[1] == first[1]


def test_decode_grows_with_the_tokens_it_must_generate() -> None:
    (short,) = _decide([(3_000, 1_000, 50)])
    (long,) = _decide([(3_000, 1_000, 2_000)])
    assert short is not None
    assert long is not None
    assert long[1] > short[1]
    assert long[0] == short[0]


CASES = [
    # nothing arrived: the minimum endpoint of each pool
    ([(0, 0, 0)], (1, 1)),
    # a prompt whose prefill alone on one GPU exceeds the 0.5 s TTFT target has no throughput in the rule's lookup:
    # the minimum, however many arrive
    ([(2_000, int(H100.prefill_tokens_per_s * 0.6), 10)], (1, 1)),
]


@pytest.mark.parametrize(("intervals", "expected"), CASES)
def test_the_rules_floors(intervals: list[tuple[int, int, int]], expected: tuple[int, int]) -> None:
    assert _decide(intervals)[-1] == expected


def test_it_decides_once_an_interval_and_arima_starts_from_the_last_value() -> None:
    rule, fleet = DynamoRule("arima"), _Fleet()
    fleet.interval(3_392, 8_192, 28)
    assert rule.decide(fleet, DYNAMO_INTERVAL_S - 5) is None  # type: ignore[arg-type]
    decided = rule.decide(fleet, DYNAMO_INTERVAL_S)  # type: ignore[arg-type]
    assert rule.decide(fleet, DYNAMO_INTERVAL_S + 5) is None  # type: ignore[arg-type]
    # under five points ARIMA predicts the last value: the same sizing as the constant predictor
    assert decided == _decide([(3_392, 8_192, 28)])[0]
