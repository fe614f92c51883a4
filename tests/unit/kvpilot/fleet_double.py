"""A scripted fleet for driving the control loop in virtual time: the collect stage returns samples whose
counters advance with the clock, and a GPU whose XID the test sets. Everything else in the service is real."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from collector.clock import VirtualClock
from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult, VirtualTimer
from kvpilot.runtime.restore import Restored
from kvpilot.runtime.service import Service
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from kvpilot.settings import Settings, load_settings
from tests.helpers.poll import until

START = 1_700_000_000.0
ENGINE = TargetInfo(url="http://10.0.0.1:8000/metrics", namespace="llm", deployment="chat", pod="chat-0", node="n0")
GPU = TargetInfo(url="http://10.0.0.1:9400/metrics", kind="gpu", node="n0")


def serving_sample(
    pod: str, node: str, t: float, *, rate: float = 4.0, waiting: float = 0, model: str = "m"
) -> ReplicaSample:
    """A vLLM replica of llm/chat at time ``t`` finishing ``rate`` requests/s since START (500 prompt and 100 output
    tokens each), 4 running, KV 40 %: the sample every scripted fleet here serves."""
    elapsed = t - START
    return ReplicaSample(
        namespace="llm",
        deployment="chat",
        replica=pod,
        node=node,
        engine="vllm",
        model=model,
        timestamp=t,
        requests_waiting=waiting,
        requests_running=4,
        kv_usage=0.4,
        requests_finished=rate * elapsed,
        prompt_tokens=500 * rate * elapsed,
        generation_tokens=100 * rate * elapsed,
    )


@dataclass
class ScriptedFleet:
    clock: VirtualClock
    rate: float = 4.0  # requests finished per second
    xid: int | None = None
    gate: asyncio.Event | None = None  # when set, collection waits for it (a slow scrape)
    replicas: tuple[tuple[str, str], ...] = (("chat-0", "n0"),)  # (pod, node)
    collected: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        t = self.clock.now()
        samples = tuple(serving_sample(pod, node, t, rate=self.rate, waiting=1) for pod, node in self.replicas)
        gpu = GpuSample(
            node="n0", index="0", uuid="GPU-0", model_name="H100", timestamp=t, utilisation=0.5, last_xid=self.xid
        )
        self.collected += 1
        return CollectResult(
            timestamp=t,
            results=(
                ScrapeResult(ENGINE, True, t, 0.01, replicas=samples, engine="vllm"),
                ScrapeResult(GPU, True, t, 0.01, gpus=(gpu,)),
            ),
        )


def settings_for(url: str, **overrides: object) -> Settings:
    sections: dict[str, object] = {
        "store": {"database_url": url},
        "collector": {"interval_s": 5, "timeout_s": 1, "discovery": {"kind": "static"}},
    }
    for name, value in overrides.items():
        base = sections.get(name)
        sections[name] = {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
    return load_settings(**sections)


def make_service(
    url: str, clock: VirtualClock, fleet: ScriptedFleet, *, overrides: dict[str, object] | None = None, **kw: object
) -> tuple[Service, Restored, VirtualTimer]:
    timer = VirtualTimer(clock)
    static = StaticTargets([ENGINE, GPU])
    service, restored = build_service(
        settings_for(url, **(overrides or {})),
        Sources(static, static),
        clock=clock,
        collector=fleet,
        sleep=timer.sleep,
        **kw,
    )
    return service, restored, timer


async def actuator_caught_up(service: Service) -> None:
    """Wait until the actuator has made a whole pass that began after the last tick woke it (passes coalesce)."""
    await until(
        lambda: not service._wake_actuator.is_set() and service.actuator_passes_done == service.actuator_passes_started,
        what="the actuator caught up with the last tick",
    )


async def snapshot_after_a_fresh_actuator_pass(service: Service, timer: VirtualTimer) -> None:
    """One tick, a whole actuator pass begun after it, then one more tick: the snapshot then holds what that pass
    handed over (a pass already running when the tick came may have read the store before the change under test)."""
    begun = service.actuator_passes_started
    await run_ticks(service, timer, 1)
    await until(lambda: service.actuator_passes_done > begun, what="an actuator pass begun after the tick, done")
    await run_ticks(service, timer, 1)


async def run_ticks(service: Service, timer: VirtualTimer, n: int) -> None:
    """Let the loop complete ``n`` more ticks in virtual time; returns with the loop asleep between ticks."""
    target = service.loop.tick_count + n
    while True:
        # the loop's own sleep: any sleeper (a Lease task) would let time advance under a tick still running
        await until(lambda: timer.asleep("control-loop"), what="the loop asleep between ticks")
        if service.loop.tick_count >= target:
            return
        await timer.advance(service.interval_s)
