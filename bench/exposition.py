"""kvpilot's own /metrics: gauges rendered from the tick's snapshot at scrape time, against the usual
prometheus_client pattern (long-lived labelled Gauges, cleared and set every tick so gone replicas vanish).

Both export the same replica, deployment and GPU series for a synthetic fleet (the peer writes 0 where a value
is unknown, ours leaves the sample out). Every GPU carries framebuffer used and free, as a dcgm-exporter page always
does (FB_USED/FB_FREE), so both export the GPU memory series kvpilot's catalogue has. The cost compared is one
control loop tick's metric upkeep plus one Prometheus scrape. Medians over rounds; last line: the ratio ours/peer.

    .venv/bin/python bench/exposition.py [--replicas 2000] [--deployments 100] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# bench/detectors.py would shadow the `detectors` package when this file runs as a script.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from prometheus_client import CollectorRegistry, Gauge, generate_latest  # noqa: E402

from api import series as S  # noqa: N812, E402
from api.exposition import render_snapshot  # noqa: E402
from collector.samples import GpuSample, ReplicaSample  # noqa: E402
from collector.state import FleetState  # noqa: E402
from kvpilot.runtime.snapshot import Snapshot  # noqa: E402


def _fleet(replicas: int, deployments: int) -> FleetState:
    state = FleetState()
    for t in (0.0, 30.0):
        samples, gpus = [], []
        for i in range(replicas):
            node = f"node-{i // 8}"
            samples.append(
                ReplicaSample(
                    namespace="llm",
                    deployment=f"model-{i % deployments}",
                    replica=f"r-{i}",
                    node=node,
                    engine="vllm",
                    model="m",
                    timestamp=t,
                    requests_waiting=i % 5,
                    requests_running=8,
                    kv_usage=(i % 100) / 100,
                    prompt_tokens=1000 * t,
                    generation_tokens=200 * t,
                    requests_finished=4 * t,
                )
            )
            gpus.append(
                GpuSample(
                    node=node,
                    index=str(i % 8),
                    uuid=f"GPU-{i}",
                    model_name="H100",
                    timestamp=t,
                    utilisation=0.7,
                    last_xid=0,
                    memory_used_bytes=float((i % 80 + 1) * 2**30),  # an 80 GiB card, as FB_USED/FB_FREE give it
                    memory_free_bytes=float((79 - i % 80) * 2**30),
                )
            )
        state.observe(samples, gpus, now=t)
    return state


def _snapshot(state: FleetState) -> Snapshot:
    return Snapshot(tick=1, t=30.0, deployments=state.deployments(), replicas=state.replicas(), gpus=state.gpus())


class _Ours:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def tick_and_scrape(self, snap: Snapshot) -> bytes:
        self.snap = snap  # the loop publishes the snapshot it built anyway: no per-series upkeep
        return render_snapshot(snap)  # what /metrics sends for a snapshot at its first scrape (OwnMetrics)


class _Peer:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        gauges = (
            S.REPLICA_REQUESTS_WAITING,
            S.REPLICA_REQUESTS_RUNNING,
            S.REPLICA_KV_USAGE,
            S.DEPLOYMENT_REQUESTS_WAITING,
            S.DEPLOYMENT_REQUESTS_RUNNING,
            S.DEPLOYMENT_KV_USAGE,
            S.DEPLOYMENT_KV_USAGE_MAX,
            S.DEPLOYMENT_ARRIVAL_RATE,
            S.DEPLOYMENT_TOKENS_RATE,
            S.PREFIX_CACHE_HIT_RATIO,
            S.DEPLOYMENT_REPLICAS,
            S.GPU_UTILISATION,
            S.GPU_LAST_XID,
        )
        self.memory = [s for s in S.ALL if s.name.startswith("kvpilot_gpu_memory_")]  # those ours exports
        self.g = {
            s.name: Gauge(s.name, s.help, list(s.labels), registry=self.registry) for s in (*gauges, *self.memory)
        }

    def tick_and_scrape(self, snap: Snapshot) -> bytes:
        g = self.g
        for gauge in g.values():
            gauge.clear()  # otherwise replicas that left the fleet are exported forever
        for r in snap.replicas:
            s = r.sample
            labels = (s.deployment_key, s.replica, s.engine)
            g[S.REPLICA_REQUESTS_WAITING.name].labels(*labels).set(s.requests_waiting or 0)
            g[S.REPLICA_REQUESTS_RUNNING.name].labels(*labels).set(s.requests_running or 0)
            g[S.REPLICA_KV_USAGE.name].labels(*labels).set(s.kv_usage or 0)
        for key, d in snap.deployments.items():
            g[S.DEPLOYMENT_REQUESTS_WAITING.name].labels(key).set(d.requests_waiting or 0)
            g[S.DEPLOYMENT_REQUESTS_RUNNING.name].labels(key).set(d.requests_running or 0)
            g[S.DEPLOYMENT_KV_USAGE.name].labels(key).set(d.kv_usage_mean or 0)
            g[S.DEPLOYMENT_KV_USAGE_MAX.name].labels(key).set(d.kv_usage_max or 0)
            g[S.DEPLOYMENT_ARRIVAL_RATE.name].labels(key).set(d.arrival_rate or 0)
            g[S.DEPLOYMENT_TOKENS_RATE.name].labels(key, "prompt").set(d.prompt_tokens_rate or 0)
            g[S.DEPLOYMENT_TOKENS_RATE.name].labels(key, "generation").set(d.generation_tokens_rate or 0)
            g[S.PREFIX_CACHE_HIT_RATIO.name].labels(key).set(d.prefix_hit_ratio or 0)
            g[S.DEPLOYMENT_REPLICAS.name].labels(key, "ready").set(d.ready_replicas)
            g[S.DEPLOYMENT_REPLICAS.name].labels(key, "loading").set(d.loading_replicas)
        for gv in snap.gpus:
            gpu = gv.sample.uuid or gv.sample.index
            g[S.GPU_UTILISATION.name].labels(gv.sample.node, gpu).set(gv.sample.utilisation or 0)
            g[S.GPU_LAST_XID.name].labels(gv.sample.node, gpu, "none").set(gv.sample.last_xid or 0)
            for m in self.memory:
                read = gv.sample.memory_used_bytes if m.name.endswith("_used_bytes") else gv.sample.memory_free_bytes
                g[m.name].labels(gv.sample.node, gpu).set(read or 0)
        return generate_latest(self.registry)


def _samples(page: bytes) -> int:
    return sum(1 for line in page.splitlines() if line and not line.startswith(b"#"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2000)
    parser.add_argument("--deployments", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    snap = _snapshot(_fleet(args.replicas, args.deployments))
    ours, peer = _Ours(snap), _Peer()
    n_ours, n_peer = _samples(ours.tick_and_scrape(snap)), _samples(peer.tick_and_scrape(snap))
    times: dict[str, list[float]] = {"ours": [], "peer": []}
    for _ in range(args.rounds):
        for name, impl in (("ours", ours), ("peer", peer)):  # alternate, so drift hits both alike
            t0 = time.perf_counter()
            impl.tick_and_scrape(snap)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"fleet: {args.replicas} replicas, {args.deployments} deployments, {len(snap.gpus)} GPUs")
    print(f"samples per scrape: ours {n_ours}, peer {n_peer}")
    for k in ("ours", "peer"):
        print(f"{k:5s} tick upkeep + scrape: median {med[k] * 1000:.1f} ms over {args.rounds} rounds")
    print(f"ratio ours/peer (tick upkeep + scrape time): {med['ours'] / med['peer']:.2f}")


if __name__ == "__main__":
    main()
