"""What every backtest policy is: a decision interval and `decide(history, now) -> desired replicas`."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from scaler.backtest.gateway import DEFAULT_SCRAPE_INTERVAL_S
from scaler.backtest.observe import History

# What kvpilot's planner reads as arrivals in a backtest: "engines" (as `kvpilot run` without a gateway rate source),
# "gateway" (the router's request counter as Prometheus scrapes it, read as `kvpilot run` reads a gateway's)
ARRIVALS = ("engines", "gateway")


@dataclass(frozen=True)
class Context:
    """Facts shared by every policy of one backtest, so they compete on the same replica and workload.

    ``capacity_rps``: requests/s one replica serves within the TTFT SLO at the trace's mean token mix, measured
    once on the simulator (the profiling step Dynamo's planner also needs). ``future_rate``: the oracle's
    perfect foresight, (bin start times, requests/s); nobody else reads it.
    """

    cold_start_s: float
    slo_ttft_s: float
    capacity_rps: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    min_replicas: int = 1
    max_replicas: int | None = None
    future_rate: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    bin_s: float = 30.0
    tick_s: float = 5.0  # kvpilot's control-loop interval (settings `collector.interval_s`)
    planner: Any = None  # kvpilot's `PlannerConfig`, built from settings as `kvpilot run` builds it
    arrivals: str = "engines"  # what kvpilot's planner reads as arrivals (`ARRIVALS`)
    gateway_scrape_s: float = DEFAULT_SCRAPE_INTERVAL_S  # with "gateway": how often Prometheus scrapes the router

    def clamp(self, n: int) -> int:
        n = max(n, self.min_replicas)
        return n if self.max_replicas is None else min(n, self.max_replicas)


@dataclass
class ForecastPoint:
    t: float  # when the forecast was made
    horizon_s: float
    point: float
    upper: float


class Policy(ABC):
    name: str = "policy"
    interval_s: float = 15.0

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.forecasts: list[ForecastPoint] = []  # what the policy predicted, for plots
        self.reasons: list[str] = []  # why it decided what it did, where it says (kvpilot)

    def start(self, replicas: int, now: float) -> None:  # noqa: B027 - optional hook
        """The fleet starts at ``replicas`` (already running): policies with a memory of past  # noqa: B027
        recommendations seed it, as if they had just scaled there."""

    @abstractmethod
    def decide(self, history: History, now: float) -> int:
        """Desired replica count given what the policy could observe up to ``now``."""


def ceil_div(a: float, b: float) -> int:
    return max(0, math.ceil(a / b - 1e-9))
