"""What the control loop sees and decides, as one digest per tick, to show that a change to the hot path changed no
output: the real wiring and Collector (as ``bench/history_profile.py`` without ``--service``) fed this bench's moving
pages for N ticks on a virtual clock, digesting after each tick the snapshot (deployments, replicas, GPUs, decisions,
findings, targets, drains, KV projections, costs; not the targets' health, which holds wall-clock durations), every
replica's history and TTFT history, its TTFT increase over 5 min and an hour, and every deployment's history.

Run it in two checkouts and compare the lines (each line: tick, bytes digested, md5, findings, decisions):

    cd /tmp/before && KVPILOT_PURE=1 PYTHONPATH=/tmp/before python bench/replay_digest.py --ticks 70 > /tmp/before.txt
    cd /work/main && KVPILOT_PURE=1 python bench/replay_digest.py --ticks 70 > /tmp/after.txt
    diff /tmp/before.txt /tmp/after.txt
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.history_profile import harness  # noqa: E402


async def run(args: argparse.Namespace) -> None:
    from kvpilot.runtime.service import freeze_startup_heap
    from kvpilot.runtime.sources import build as build_sources
    from kvpilot.runtime.wiring import build_service

    settings, clock, fetcher, collector = harness(args.targets, args.gpu_targets, "kvpilot-digest-")
    service, _restored = build_service(settings, build_sources(settings), clock=clock, collector=collector)
    loop = service.loop
    everything = hashlib.md5()
    for tick in range(1, args.ticks + 1):
        fetcher.render_next()
        snap = await loop.tick()
        await asyncio.to_thread(service.writer.flush)
        if tick == 1:
            freeze_startup_heap()
        state = loop.state
        seen = (
            snap.tick,
            snap.t,
            sorted(snap.deployments.items()),
            list(snap.replicas),
            list(snap.gpus),
            sorted(snap.decisions.items()),
            list(snap.findings),
            list(snap.targets),
            sorted(snap.node_drains.items()),
            sorted(snap.kv_time_to_exhaustion.items()),
            sorted(snap.costs.items()),
        )
        parts = [repr(seen)]  # repr: every float in full, -0.0 apart from 0.0
        for view in state.replicas():
            key = view.key
            histories = (state.replica_history(key), state.ttft_history(key))
            increases = (state.ttft_increase(key, snap.t - 300), state.ttft_increase(key, snap.t - 3600))
            parts.append(repr((key, histories, increases)))
        parts.extend(repr((key, state.deployment_history(key))) for key in sorted(state.deployments()))
        blob = "\n".join(parts).encode()
        everything.update(blob)
        print(tick, len(blob), hashlib.md5(blob).hexdigest(), len(snap.findings), len(snap.decisions), flush=True)
        clock.advance(5.0)
    print("all", everything.hexdigest())
    await collector.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ticks", type=int, default=70)
    p.add_argument("--targets", type=int, default=1000)
    p.add_argument("--gpu-targets", type=int, default=100)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
