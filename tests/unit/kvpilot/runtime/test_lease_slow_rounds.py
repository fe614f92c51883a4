"""A holder whose every Lease round succeeds, but slowly (an API server answering each call in ~2 s, within the
call timeout of a third of the lease), leads without a break: its rounds start every ``ha.renew_every_s``, so the
renewal each one writes lands before the renew deadline of the one before.

9d579df made a holder count on its Lease only up to a renew deadline (12.5 s of a 15 s lease renewed every 5 s), but
rounds were ``renew_every_s`` apart from one round's end to the next one's start: the renewal of round k+1 was
accepted (the round's own time) + 5 s + (the next round's time) after round k began. With each call taking 1.9 s or
more (the elector reads and writes its Lease: rounds of 3.8 s), that passed 12.5 s, and a holder whose every renewal
succeeded stopped leading for part of every round (2.2 s a call: out 11 % of the time, measured on the virtual clock
below); a coordinator holding shards dropped them the same way. On 80010be (the whole lease counted on) it held
through calls of 2.4 s."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.lease import LeaseElector, Leases
from kvpilot.runtime.shards import ShardCoordinator
from tests.fakekube import FakeKube

STEP_S = 0.01
EVERY_S = 5.0
LEASE_S = 15.0
ROUNDS = 12


class _Watch:
    """The virtual clock, advanced in steps; the time ``holds()`` is false counted from ``begin()`` on."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.holds: Callable[[], bool] | None = None
        self.out_s = 0.0

    def advance(self, seconds: float) -> None:
        for _ in range(round(seconds / STEP_S)):
            self.clock.advance(STEP_S)
            if self.holds is not None and not self.holds():
                self.out_s += STEP_S


class _SlowLeases:
    """``Leases`` whose every call takes ``call_s`` on the virtual clock (a loaded API server)."""

    def __init__(self, api: Leases, watch: _Watch, call_s: float) -> None:
        self._api, self._watch, self._call_s = api, watch, call_s

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            answer = method(*args, **kwargs)
            self._watch.advance(self._call_s)
            return answer

        return call


async def _campaign(run: Callable[..., Any], watch: _Watch, first: Callable[[], bool]) -> None:
    """``run`` with a virtual sleep for ``ROUNDS`` waits; the watch counts from the first round that won to the
    stop."""
    stop = asyncio.Event()
    waits = 0

    async def sleep(seconds: float) -> None:
        nonlocal waits
        if watch.holds is None:
            assert first(), "the first round did not win"
            watch.holds = first
        watch.advance(seconds)
        waits += 1
        if waits >= ROUNDS:
            stop.set()
            watch.holds = None  # the release at the stop is not counted

    await asyncio.wait_for(run(stop, every_s=EVERY_S, sleep=sleep), 60)


@pytest.mark.parametrize("call_s", [0.5, 1.9, 2.2, 2.4])
async def test_a_holder_whose_slow_rounds_all_succeed_leads_throughout(
    kube: FakeKube, clock: VirtualClock, call_s: float
) -> None:
    watch = _Watch(clock)
    api = cast(Leases, _SlowLeases(Leases(kube.api_client()), watch, call_s))
    elector = LeaseElector(
        api, name="kvpilot-leader", namespace="kv", identity="h", clock=clock, lease_duration_s=LEASE_S
    )
    await _campaign(elector.run, watch, lambda: elector.leader)
    assert watch.out_s == 0.0, f"a holder renewing every round stopped leading for {watch.out_s:.2f} s"


@pytest.mark.parametrize("call_s", [0.5, 1.6, 1.9])
async def test_a_coordinator_whose_slow_rounds_all_succeed_keeps_its_shards_throughout(
    kube: FakeKube, clock: VirtualClock, call_s: float
) -> None:
    watch = _Watch(clock)
    api = cast(Leases, _SlowLeases(Leases(kube.api_client()), watch, call_s))
    coordinator = ShardCoordinator(
        api,
        lease_name="kvpilot",
        namespace="kv",
        identity="a",
        address="a.kvpilot:9090",
        shards=4,
        clock=clock,
        lease_duration_s=LEASE_S,
    )
    held: list[frozenset[int]] = []

    def keeps() -> bool:
        if not held and coordinator.owned:
            held.append(coordinator.owned)
        return bool(held) and coordinator.owned == held[0]

    await _campaign(coordinator.run, watch, lambda: keeps() or not held)
    assert held == [frozenset({0, 1, 2, 3})]
    assert watch.out_s == 0.0, f"shards renewed every round were dropped for {watch.out_s:.2f} s"
