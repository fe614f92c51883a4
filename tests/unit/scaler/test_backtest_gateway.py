"""`kvpilot backtest --arrivals gateway` reads the simulated router's request counter as `kvpilot run` reads a
gateway's (`collector.arrivals`; issue 10: "no code path exists only for backtests"): the counter as Prometheus scrapes
it (every 10 s by default, an instant query answering the last scrape) through the live loop's reader, handed over as
the loop hands it. What the planner is given each tick equals what `kvpilot run`'s `GatewayArrivals` and
`ControlLoop._decide` give it from the same samples, a router restart included."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.runtime.arrivals import GatewayArrivals, LabelMapping
from kvpilot.runtime.loop import ControlLoop
from kvpilot.runtime.scale_view import ScaleView
from scaler.backtest import sim
from scaler.backtest.gateway import ScrapedCounter
from scaler.backtest.observe import History
from scaler.backtest.policies.kvpilot import DEPLOYMENT, NAME, NAMESPACE, Kvpilot
from scaler.backtest.run import BacktestConfig, backtest, context_for, run_policy
from scaler.planner import Planner

# Five minutes of 2 to 6 requests/s (a wave of 2 minutes) and one burst: rates and counts move.
TRACE = "synthetic:duration_s=300,rate=4,amplitude=0.5,period_s=120,bursts=1,burst_s=30"
DEFAULT_SCRAPE_S = 10.0  # the Gateway API Inference Extension chart's ServiceMonitor interval

Inputs = tuple[float, Mapping[str, float] | None, Mapping[str, float] | None]  # (now, arrival_rates, arrivals_totals)


def _record(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Inputs], dict[float, float]]:
    """Spies: every planner call's (now, arrival_rates, arrivals_totals), and the router's count at every tick."""
    calls: list[Inputs] = []
    router: dict[float, float] = {}
    decide, add = Planner.decide, History.add

    def spy_decide(self: Planner, state: Any, now: float, **kwargs: Any) -> Any:
        calls.append((now, kwargs.get("arrival_rates"), kwargs.get("arrivals_totals")))
        return decide(self, state, now, **kwargs)

    def spy_add(self: History, obs: Any) -> None:
        router[obs.t] = obs.arrivals_total
        add(self, obs)

    monkeypatch.setattr(Planner, "decide", spy_decide)
    monkeypatch.setattr(History, "add", spy_add)
    return calls, router


def _scraped(router: Mapping[float, float], now: float, every_s: float, restart_s: float | None = None) -> float:
    """What an instant query at ``now`` answers: the router's count at the last scrape (the ticks fall on every
    multiple of the interval), counted from zero again after a restart."""
    at = math.floor(now / every_s + 1e-9) * every_s
    since = router[restart_s] if restart_s is not None and at >= restart_s else 0.0
    return router[at] - since


def _live(samples: Sequence[tuple[float, float]]) -> list[Inputs]:
    """What `kvpilot run` hands the planner from these (time, counter) samples: `GatewayArrivals` reads each tick's
    answer, and `ControlLoop._decide` passes the result on, as the loop's scale-source path does."""
    answers = iter(samples)
    labels = {"__name__": "router_requests_total", "namespace": NAMESPACE, "deployment": NAME}

    async def prometheus(query: str, now: float) -> list[dict[str, Any]]:
        _, value = next(answers)
        return [{"metric": labels, "value": [now, str(value)]}]

    gateway = GatewayArrivals(prometheus, "router_requests_total", LabelMapping(), window_s=60.0)
    seen: list[Inputs] = []
    planner = SimpleNamespace(
        decide=lambda state, now, **kw: seen.append((now, kw.get("arrival_rates"), kw.get("arrivals_totals"))) or []
    )
    loop = SimpleNamespace(planner=planner, state=None, _takes_totals=True)

    async def read_all() -> None:
        for now, _ in samples:
            arrivals = await gateway.read(now, now)
            rates = {**ScaleView().arrival_rates, **arrivals.rates}
            ControlLoop._decide(  # type: ignore[arg-type]
                loop, now, now, current_replicas={}, arrival_rates=rates or None, arrivals_totals=arrivals.totals
            )

    asyncio.run(read_all())
    return seen


@pytest.mark.parametrize("scrape_s", [DEFAULT_SCRAPE_S, 30.0])
def test_the_planner_gets_what_kvpilot_run_hands_it_from_the_scraped_counter(
    monkeypatch: pytest.MonkeyPatch, scrape_s: float
) -> None:
    calls, router = _record(monkeypatch)
    given = {} if scrape_s == DEFAULT_SCRAPE_S else {"gateway_scrape_s": scrape_s}
    report = backtest(TRACE, BacktestConfig(policies=("kvpilot",), frontier=False, arrivals="gateway", **given))
    samples = [(now, _scraped(router, now, scrape_s)) for now, _, _ in calls]
    assert calls == _live(samples)
    # the readings are the live loop's: no rate until they span half the 60 s window, then one every tick
    rated = [now for now, rates, _ in calls if rates]
    assert rated
    assert rated[0] == calls[0][0] + 30.0
    assert len(rated) == len(calls) - 6
    assert report.to_json()["gateway"]["scrape_interval_s"] == scrape_s


def test_a_router_restart_is_read_as_kvpilot_run_reads_a_gateways(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, router = _record(monkeypatch)
    cfg = BacktestConfig(policies=("kvpilot",), frontier=False, arrivals="gateway")
    trace = sim.load_trace(TRACE, rate_scale=cfg.rate_scale, seed=cfg.seed)
    ctx = context_for(trace, cfg)
    policy = Kvpilot(ctx)
    policy.gateway = ScrapedCounter(DEFAULT_SCRAPE_S, restarts_at_s=(150.0,))  # the router restarts mid-replay
    run_policy(trace, policy, ctx, cfg, "request")
    samples = [(now, _scraped(router, now, DEFAULT_SCRAPE_S, restart_s=150.0)) for now, _, _ in calls]
    assert any(b < a for (_, a), (_, b) in itertools.pairwise(samples))  # the counter fell: it restarted
    assert calls == _live(samples)
    # a restart is no fall in demand: the rate stays positive and the count handed to the burst floor never falls
    rates = [rates[DEPLOYMENT] for _, rates, _ in calls if rates]
    totals = [totals[DEPLOYMENT] for _, _, totals in calls if totals]
    assert min(rates) > 1.0
    assert totals == sorted(totals)


def test_the_json_says_how_the_gateway_was_read() -> None:
    runner = CliRunner()
    argv = ["backtest", "--trace", TRACE, "--policies", "kvpilot", "--no-frontier", "--json"]
    engines = runner.invoke(app, argv)
    assert engines.exit_code == 0, engines.output
    assert "gateway" not in json.loads(engines.output)
    gateway = runner.invoke(app, [*argv, "--arrivals", "gateway", "--scrape-interval", "30"])
    assert gateway.exit_code == 0, gateway.output
    out = json.loads(gateway.output)
    assert out["arrivals"] == "gateway"
    assert out["gateway"] == {
        "series": 1,
        "scrape_interval_s": 30.0,
        "rate_window_s": 60.0,
        "reader": "collector.counter_rates.CounterRates (kvpilot run's collector.arrivals)",
    }
    assert out["kvpilot_config"] == json.loads(engines.output)["kvpilot_config"]  # the same planner either way
    # a scrape interval without a gateway to scrape is refused, not ignored
    refused = runner.invoke(app, [*argv, "--scrape-interval", "30"])
    assert refused.exit_code == 2
    assert "--scrape-interval applies to --arrivals gateway only" in refused.output
    bad = runner.invoke(app, [*argv, "--arrivals", "gateway", "--scrape-interval", "0"])
    assert bad.exit_code == 2
    assert "--scrape-interval" in bad.output
