"""Sharding at fleet scale: per-instance tick with N kvpilot instances against one instance (the peer) on the same
fleet, a killed instance's takeover against the lease period, and KEDA calls forwarded to the owner against calls
answered locally (the peer).

One loopback Prometheus-API server (``tests.services.promapi``, as bench/fleet_scale.py uses) serves the fleet;
the Kubernetes API is the in-process fake (``tests.fakekube``, Leases through the official client, reached by
``kvpilot run`` through a kubeconfig). Each kvpilot is the real ``kvpilot run`` (PromQL source in aggregates mode,
its own SQLite store), so ticks, Leases and gRPC are what production runs; the machine is shared, so read the
ratios, not the absolute figures. The peer runs before the instances and again after them (``--peer-once``: before
only), and the instances' CPU is read against the mean of the two.

The takeover is read two ways: from the SIGKILL (``takeover_s``), and against the Lease it takes over (``late_s``):
the time the bench sees another holder on a shard Lease minus the victim's last ``renewTime`` on it plus its
``leaseDurationSeconds``, which is when the Lease lets anyone take it. A kill just after a renewal gives a
``takeover_s`` a little over the lease period and a small ``late_s``; ``late_s`` <= 0 would be a takeover the Lease
forbids. ``renewTime`` is the victim's wall clock (RFC 3339, microseconds) on this machine, so it is compared with
``time.time()``; across machines it would carry their clocks' skew.

  .venv/bin/python bench/shards.py --replicas 10000 --shards 3 --ticks 6

Last line: ``replicas N shards S tick_p50_s X peer_tick_p50_s Y cpu_per_tick_s C peer_cpu_per_tick_s D
takeover_s T late_s X lease_s L forward_p50_ms F local_p50_ms P`` (``late_s``: the latest of the victim's
shards).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._process import metric, spawn, tree_cpu_s, tree_hwm_mb, wait_line  # noqa: E402
from scaler.keda import externalscaler_pb2 as pb  # noqa: E402
from scaler.keda import externalscaler_pb2_grpc as pb_grpc  # noqa: E402
from tests.fakekube import FakeKube  # noqa: E402

PY = sys.executable
KVPILOT = str(Path(PY).parent / "kvpilot")
LEASE_S = 6.0  # short leases keep the bench short; the takeover is read against this
RENEW_S = 2.0
# Where the instances' Leases live, set in their configuration and read here. Unset, ha.lease_namespace is kvpilot's
# own namespace ("kvpilot" outside a pod, since 5fe4ad0), while this bench read "default": every shard read as
# unheld and the kill step failed ("held no shard when killed").
LEASE_NAMESPACE = "kvpilot"


def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "bench", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "bench"}}],
                "current-context": "fake",
            }
        )
    )
    return path


class Instance:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], http: int, grpc_port: int) -> None:
        self.name = name
        self.proc = proc
        self.http = http
        self.grpc_port = grpc_port
        self.ticks: list[float] = []
        self.cpu_s = 0.0  # CPU of the process and its answer reader over the measured ticks
        self.cpu_ticks = 0  # ticks ended in that window
        self.rss_mb = 0.0  # peak RSS of the process plus its answer reader's
        self.answer_mb: list[float] = []  # inflated PromQL answers of each measured tick
        self.deployments_read: float | None = None  # what its queries were narrowed to (sharded only)

    @property
    def cpu_per_tick_s(self) -> float:
        return self.cpu_s / max(1, self.cpu_ticks)


def _start(
    name: str, tmp: Path, prom: int, shards: int, interval_s: float, kubeconfig: Path | None, *, ksm: bool = True
) -> Instance:
    config: dict[str, Any] = {
        "collector": {
            "interval_s": interval_s,
            "timeout_s": min(interval_s * 0.9, 60.0),
            "discovery": {
                "kind": "promql",
                "promql_url": f"http://127.0.0.1:{prom}",
                "promql_mode": "aggregates",
                "promql_max_answer_bytes": 2 * 1024**3,
                "promql_kube_state_metrics": ksm,
            },
        },
        "api": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "anonymous_read": True},
        "sharding": {"shards": shards},
        "ha": {
            "lease_name": "kvpilot",
            "lease_namespace": LEASE_NAMESPACE,
            "lease_duration_s": LEASE_S,
            "renew_every_s": RENEW_S,
            "identity": name,
        },
    }
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    log = tmp / f"{name}.log"
    env = {"KVPILOT_DATABASE_URL": f"sqlite:///{tmp / f'{name}.db'}", "POD_IP": "127.0.0.1"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    proc = spawn([KVPILOT, "run", "--config", str(cfg)], env=env, log=log)
    http = int(wait_line(log, r"API on http://[^:]+:(\d+)", proc, 120).group(1))
    grpc_port = int(wait_line(log, r"KEDA external scaler \(gRPC\) on [^:]+:(\d+)", proc, 60).group(1))
    return Instance(name, proc, http, grpc_port)


async def _ticks(
    instances: list[Instance], ticks: int, warmup: int, metrics_every_s: float, *, interval_s: float, near_end: bool
) -> None:
    """Each tick's duration from the steps of kvpilot_loop_tick_seconds, after ``warmup``. /metrics is read once per
    tick: ``/readyz`` (its ``last_tick_at``) is watched every 0.5 s and /metrics read when it moves, until the page
    shows the new tick. A page render costs the instance CPU that is counted in its ticks (3-5 ms each at 10,000
    replicas), and so does each ``/readyz`` (~1.2 ms), so the bench should not add many: with ``near_end`` the watch
    sleeps from a tick's end until 0.75 s before the next one is due (ticks start every ``interval_s``), ~3 reads per
    tick instead of 10 (a kubelet probes every 10 s); without it, every 0.5 s as on 2026-12-03 evening.
    ``metrics_every_s`` > 0 polls /metrics at that period instead (0.2 reproduces the bench before 2026-12-03
    evening: 24 more renders per 5 s tick). CPU per tick divides by the ticks counted in the window."""

    async def one(i: Instance) -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{i.http}", timeout=30, trust_env=False) as c:
            last: tuple[float, float] | None = None
            seen = 0
            cpu0 = 0.0
            counted = 0  # ticks seen when cpu0 was read
            ended: float | None = None  # when the latest tick's end was seen
            tick_at: float | None = None
            pending = True  # a tick ended that /metrics has not shown yet
            while len(i.ticks) < ticks:
                if metrics_every_s <= 0:
                    now_at = (await c.get("/readyz")).json().get("last_tick_at")
                    pending = pending or now_at != tick_at
                    tick_at = now_at
                if pending or metrics_every_s > 0:
                    text = (await c.get("/metrics")).text
                    count = metric(text, "kvpilot_loop_tick_seconds_count")
                    total = metric(text, "kvpilot_loop_tick_seconds_sum")
                    if count is not None and total is not None:
                        if last is not None and count > last[0]:
                            pending = False
                            ended = time.monotonic()
                            seen += int(count - last[0])
                            if seen >= warmup and not counted:
                                cpu0, counted = tree_cpu_s(i.proc.pid), seen
                            elif seen > warmup:
                                i.ticks.append((total - last[1]) / (count - last[0]))
                                i.answer_mb.append((metric(text, "kvpilot_promql_answer_bytes") or 0.0) / 1e6)
                                i.deployments_read = metric(text, "kvpilot_promql_deployments_read")
                        elif last is None:
                            pending = False
                        last = (count, total)
                if metrics_every_s > 0:
                    await asyncio.sleep(metrics_every_s)
                elif near_end and ended is not None and not pending:
                    await asyncio.sleep(max(0.5, ended + interval_s - 0.75 - time.monotonic()))
                else:
                    await asyncio.sleep(0.5)
            i.cpu_s = tree_cpu_s(i.proc.pid) - cpu0
            i.cpu_ticks = seen - counted
            i.rss_mb = tree_hwm_mb(i.proc.pid)

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in instances)), 1800)


def _peer(
    name: str, tmp: Path, port: int, args: Any, ksm: bool, watch: dict[str, Any], started: list[Instance]
) -> Instance:
    """One instance without sharding on the same fleet, its ticks measured, then stopped."""
    peer = _start(name, tmp, port, 1, args.interval, None, ksm=ksm)
    started.append(peer)
    asyncio.run(_ticks([peer], args.ticks, warmup=2, **watch))
    peer.proc.terminate()
    peer.proc.wait(60)
    return peer


def _shard_specs(kube: FakeKube, shards: int) -> dict[int, dict[str, Any]]:
    """Each shard Lease's spec as the fake API server holds it ({} while the Lease is absent)."""
    out: dict[int, dict[str, Any]] = {}
    for i in range(shards):
        try:
            out[i] = kube.get("leases", f"kvpilot-shard-{i}", namespace=LEASE_NAMESPACE)["spec"] or {}
        except Exception:
            out[i] = {}
    return out


def _holders(kube: FakeKube, shards: int) -> dict[int, str | None]:
    return {i: spec.get("holderIdentity") for i, spec in _shard_specs(kube, shards).items()}


def _epoch(micro_time: str) -> float:
    """An RFC 3339 MicroTime (``renewTime``, ``acquireTime``) as seconds since the epoch."""
    return dt.datetime.fromisoformat(micro_time.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True, slots=True)
class Taken:
    """One of the killed instance's shards, taken over."""

    shard: int
    by: str
    after_kill_s: float  # monotonic, from the SIGKILL to the bench seeing the new holder
    late_s: float  # time.time() at that sight - (the victim's last renewTime + leaseDurationSeconds)
    written_late_s: float  # the taker's acquireTime (its clock when its round began) - the same expiry
    age_at_kill_s: float  # time.time() at the SIGKILL - the victim's last renewTime
    lease_s: float  # the victim's leaseDurationSeconds


def _kill_and_watch(
    kube: FakeKube, shards: int, victim: Instance, *, at_renewal: bool = False, poll_s: float = 0.02
) -> list[Taken]:
    """SIGKILL ``victim`` (``at_renewal``: as soon as one of its shard Leases is seen renewed, the worst case for a
    takeover counted from the kill), then poll its shard Leases until every one has another holder. The victim's last
    renewal is its Lease as read after the kill, or a later write of its own (a renewal in flight at the kill lands
    after it)."""
    if at_renewal:
        renewed = {s: spec.get("renewTime") for s, spec in _shard_specs(kube, shards).items()}
        while all(
            spec.get("holderIdentity") != victim.name or spec.get("renewTime") == renewed[s]
            for s, spec in _shard_specs(kube, shards).items()
        ):
            time.sleep(0.002)
    victim.proc.kill()  # SIGKILL: nothing released
    killed, killed_wall = time.monotonic(), time.time()
    last = {s: spec for s, spec in _shard_specs(kube, shards).items() if spec.get("holderIdentity") == victim.name}
    if not last:
        raise RuntimeError(f"{victim.name} held no shard when killed")
    taken: dict[int, Taken] = {}
    while len(taken) < len(last):
        specs = _shard_specs(kube, shards)
        seen, seen_wall = time.monotonic(), time.time()
        for s in sorted(set(last) - set(taken)):
            spec, holder = specs[s], specs[s].get("holderIdentity")
            if holder == victim.name:
                last[s] = spec
            elif holder is not None:
                mine = last[s]
                lease_s = float(mine["leaseDurationSeconds"])
                expiry = _epoch(mine["renewTime"]) + lease_s
                taken[s] = Taken(
                    shard=s,
                    by=holder,
                    after_kill_s=seen - killed,
                    late_s=seen_wall - expiry,
                    written_late_s=_epoch(spec["acquireTime"]) - expiry,
                    age_at_kill_s=killed_wall - _epoch(mine["renewTime"]),
                    lease_s=lease_s,
                )
        if time.monotonic() - killed > 10 * LEASE_S:
            raise RuntimeError(f"shards {sorted(set(last) - set(taken))} not taken over: {_holders(kube, shards)}")
        time.sleep(poll_s)
    return [taken[s] for s in sorted(taken)]


async def _keda_latency(via: Instance, owned: list[str], forwarded: list[str], calls: int) -> tuple[float, float]:
    """p50 of GetMetrics through ``via`` for deployments it owns and for deployments it forwards (ms)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{via.grpc_port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]

        async def timed(keys: list[str]) -> list[float]:
            out = []
            for n in range(calls):
                ns, name = keys[n % len(keys)].split("/")
                request = pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(name=name, namespace=ns))
                t0 = time.perf_counter()
                await stub.GetMetrics(request, timeout=10)
                out.append((time.perf_counter() - t0) * 1000)
            return out

        await timed(owned[:5] + forwarded[:5])  # channels and routes warm
        local, remote = await timed(owned), await timed(forwarded)
    return statistics.median(remote), statistics.median(local)


def _decided(i: Instance, interval_s: float) -> list[str]:
    """Deployments this instance decides now: those whose decision counter grows over one and a half ticks."""

    def counts() -> dict[str, float]:
        text = httpx.get(f"http://127.0.0.1:{i.http}/metrics", timeout=30, trust_env=False).text
        found = re.findall(r'^kvpilot_decisions_total\{[^}]*deployment="([^"]+)"[^}]*\} (\S+)$', text, re.M)
        out: dict[str, float] = {}
        for key, value in found:
            out[key] = out.get(key, 0.0) + float(value)
        return out

    before = counts()
    time.sleep(1.5 * interval_s)
    after = counts()
    return sorted(k for k, v in after.items() if v > before.get(k, 0.0))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=10_000)
    p.add_argument("--shards", type=int, default=3)
    p.add_argument("--ticks", type=int, default=6)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--calls", type=int, default=200, help="KEDA GetMetrics calls per kind (local, forwarded)")
    p.add_argument(
        "--metrics-every",
        type=float,
        default=0.0,
        help="poll /metrics every S s (0.2: as the bench did before 2026-12-03 evening); 0: read it once per tick",
    )
    p.add_argument(
        "--readyz-steady",
        action="store_true",
        help="watch /readyz every 0.5 s all tick long (as on 2026-12-03 evening); default: only near each tick's end",
    )
    p.add_argument(
        "--no-kube-state-metrics",
        action="store_true",
        help="collector.discovery.promql_kube_state_metrics: false (no Deployment series query each tick)",
    )
    p.add_argument(
        "--kill-at-renewal",
        action="store_true",
        help="SIGKILL the victim just after it renews a shard Lease (the longest takeover from the kill); default: "
        "whenever the bench gets there",
    )
    p.add_argument(
        "--peer-once",
        action="store_true",
        help="measure the peer before the instances only (as until 2026-12-04); default: before and after them",
    )
    args = p.parse_args()
    ksm = not args.no_kube_state_metrics
    watch = {"metrics_every_s": args.metrics_every, "interval_s": args.interval, "near_end": not args.readyz_steady}
    with tempfile.TemporaryDirectory(prefix="kvpilot-shards-") as t, FakeKube() as kube:
        tmp = Path(t)
        prom_log = tmp / "promapi.log"
        prom = spawn([PY, "-m", "tests.services.promapi", "--replicas", str(args.replicas)], log=prom_log)
        started: list[Instance] = []
        try:
            port = int(wait_line(prom_log, r"listening (\d+)", prom, 300).group(1))
            # the peer: one instance, no sharding, the same fleet
            peer = _peer("peer", tmp, port, args, ksm, watch, started)
            kubeconfig = _kubeconfig(tmp / "kubeconfig", kube.url)
            group = [
                _start(f"kv-{n}", tmp, port, args.shards, args.interval, kubeconfig, ksm=ksm)
                for n in range(args.shards)
            ]
            started += group
            asyncio.run(_ticks(group, args.ticks, warmup=3, **watch))
            holders = _holders(kube, args.shards)
            owners = {name: [s for s, h in holders.items() if h == name] for name in (i.name for i in group)}
            decided = {i.name: _decided(i, args.interval) for i in group}
            every = sorted(set().union(*decided.values()))
            overlap = sum(len(v) for v in decided.values()) - len(every)
            print(
                f"  shards held: {owners}; deployments decided per instance: "
                f"{ {k: len(v) for k, v in decided.items()} } (total {len(every)}, overlap {overlap})",
                flush=True,
            )
            via = group[0]
            others = sorted(set(every) - set(decided[via.name]))
            forward_ms, local_ms = asyncio.run(_keda_latency(via, decided[via.name], others, args.calls))
            victim = group[-1]
            taken = _kill_and_watch(kube, args.shards, victim, at_renewal=args.kill_at_renewal)
            takeover_s = max(x.after_kill_s for x in taken)
            late_s = max(x.late_s for x in taken)
            for i in group:
                if i.proc.poll() is None:
                    i.proc.terminate()
                    i.proc.wait(60)
            # the peer again after them, unless --peer-once: the VM's load moves between the phases, and a ratio
            # against the mean of a peer measured on both sides of the instances moves less with it
            peers = [peer] if args.peer_once else [peer, _peer("peer-after", tmp, port, args, ksm, watch, started)]
            tick = statistics.median(d for i in group for d in i.ticks)
            peer_tick = statistics.median(d for one in peers for d in one.ticks)
            peer_cpu = statistics.mean(one.cpu_per_tick_s for one in peers)
            for i in group:
                print(
                    f"  {i.name}: tick p50 {statistics.median(i.ticks):.3f} s max {max(i.ticks):.3f} s, "
                    f"CPU {i.cpu_per_tick_s:.2f} s per tick, peak RSS {i.rss_mb:.0f} MB, "
                    f"answers {statistics.median(i.answer_mb):.2f} MB per tick "
                    f"({i.deployments_read or 0:.0f} deployments asked for)",
                    flush=True,
                )
            for one in peers:
                print(
                    f"  {one.name} (one instance, whole fleet): tick p50 {statistics.median(one.ticks):.3f} s "
                    f"max {max(one.ticks):.3f} s, CPU {one.cpu_per_tick_s:.2f} s per tick, "
                    f"peak RSS {one.rss_mb:.0f} MB, answers {statistics.median(one.answer_mb):.2f} MB per tick"
                )
            cpu = statistics.mean(i.cpu_per_tick_s for i in group)
            print(f"  per-instance / peer: tick {tick / peer_tick:.2f}, CPU per tick {cpu / peer_cpu:.3f}")
            print(
                f"  takeover of shards {[x.shard for x in taken]} after SIGKILL: {takeover_s:.2f} s "
                f"(lease {LEASE_S:g} s, renew {RENEW_S:g} s)"
            )
            for x in taken:
                print(
                    f"    shard {x.shard} ({victim.name} -> {x.by}): seen taken {x.after_kill_s:.3f} s after SIGKILL, "
                    f"its Lease renewed {x.age_at_kill_s:.3f} s before the kill; late against renewTime + "
                    f"{x.lease_s:g} s: {x.late_s:.3f} s as seen, {x.written_late_s:.3f} s by the taker's acquireTime "
                    "(wall clocks of one machine)"
                )
            print(
                f"  KEDA GetMetrics p50: forwarded {forward_ms:.2f} ms, local {local_ms:.2f} ms "
                f"(x{forward_ms / local_ms:.2f})"
            )
            print(
                f"replicas {args.replicas} shards {args.shards} tick_p50_s {tick:.3f} peer_tick_p50_s {peer_tick:.3f} "
                f"cpu_per_tick_s {cpu:.3f} peer_cpu_per_tick_s {peer_cpu:.3f} "
                f"takeover_s {takeover_s:.2f} late_s {late_s:.3f} lease_s {LEASE_S:g} forward_p50_ms {forward_ms:.2f} "
                f"local_p50_ms {local_ms:.2f}",
                flush=True,
            )
        finally:
            for proc in [*(i.proc for i in started), prom]:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    main()
