"""A rolling update at peak, with and without kvpilot's surge, on the request-level simulator.

The simulator's `rollout` fault replaces replicas in waves (maxSurge 0: each wave drains `wave` old replicas and
cold-starts as many new ones; the next wave starts once they are ready). Three runs on the same trace segment:

- baseline: no rollout;
- rollout: the waves alone, the fleet one wave short for a cold start per wave;
- rollout + surge: `scaler.rollout.surge_replicas` asked for one cold start before the rollout (desired plus the
  first wave, which starts within a cold start) and dropped back once the rollout is done: an oracle that knows
  when the rollout starts;
- kvpilot without a rollout (`kvpilot-base`): the planner `kvpilot run` builds from the same settings
  (`backtest_planner`: settings -> `planner_config`, as `kvpilot backtest`), replayed through the backtest's own
  loop (`scaler.backtest.run.run_policy`, the `kvpilot` policy: each ready replica's `/metrics` page parsed into a
  real FleetState, the count from the simulator's) on the bench's fleet of `--replicas`: the same window without a
  rollout, which the kvpilot modes below are judged against (issue 16);
- rollout + kvpilot: the same planner and loop with the rollout injected and the control loop's rollout stage on
  top, exactly as `kvpilot backtest --rollout-at` replays it (``scaler.backtest.run._surge``), from the replicas
  alone. It sees the rollout at the first drain (a ready replica gone while the count asked for held), so the first
  wave runs short for part of a cold start. (Before 2026-12-06 this mode and the two below handed the stage a fixed
  decision of the fleet's size: no planner, so no planner setting reached them.)
- rollout + kvpilot reading the Deployment (`kvpilot-k8s`): the same, and the stage also told the Deployment's status
  as `KubernetesScale` reads it
  (generation, updatedReplicas, the strategy's wave), emulated from the simulator's replicas, for the common
  `kubectl rollout pause` / `set image` / `rollout resume` sequence: the template changes one cold start before
  the operator resumes. kvpilot sees a rollout pending (replicas not on the newest template) at once and surges.
- rollout + kvpilot in PromQL mode reading kube-state-metrics (`kvpilot-ksm`): the same Deployment status, but as
  PromQL mode gets it: kube-state-metrics' `kube_deployment_*` series of it, scraped by Prometheus every
  `--ksm-scrape-s` (30 s: kube-prometheus' ServiceMonitor for kube-state-metrics,
  manifests/kubeStateMetrics-serviceMonitor.yaml @ 02cfa422; OpenShift's is 1m), each scrape holding the status
  as of the last tick at or before it, read every tick through `KubeStateMetricsScale` (its query answered with
  the last scrape's series, as an instant query is) and handed to the stage with the count it reads. By default
  the scrapes fall just before the template change and the first drain (the worst phase: the status is seen a
  whole interval late); `--ksm-phase-s` sets the first scrape's time.

Two models of the rollout controller (`--controller`, the simulator's `rollout` fault field): `deployment` (the
default since 2026-12-04): the Deployment controller's own fenceposts, under which old pods are scaled down only
while more than spec.replicas - maxUnavailable pods are available (unhealthy old pods first) and new ones are
created up to spec.replicas, so a count raised before a wave holds the fleet's availability; `waves` (the model
every figure before 2026-12-04 was measured with): each wave drains `wave` old replicas once the previous wave is
ready, whatever spec.replicas says. The two agree while spec.replicas is the fleet's size; they part once a surge
raises it.

Reported: TTFT SLO attainment of the requests arriving during the rollout window (a request still without a first
token at the end counts as a miss), and replica-hours (replicas alive, loading included, integrated over the run)
over the first mode's over the same span; for the kvpilot modes also against `kvpilot-base` (where it ran) over the
same window and span: the points lost to the rollout and the surge's cost in replica-hours, and when the rollout
finished (every replica on the new version and ready).

The window follows the rollout: it starts at T_ROLLOUT and lasts until the rollout is done plus one cold start (the
fleet settled on the new version: the last wave's successors, and any surge, have served a cold start), whatever
the fleet's size; the run ends a minute after it. Each rollout mode has its own window; the modes without a rollout
(baseline, kvpilot-base) run as long as the longest of them and are measured over each one's window. A rollout not
done by the segment's end (`--max-s` of trace, or the trace's own end: Mooncake's is 1,022 s) has its window cut a
minute before that end, and says so. (Before 2026-12-06 the window was sized for the fleet of `--replicas`:
T_ROLLOUT + (waves + 2) cold starts; where the planner sized a fleet of 16-20 it ended before the rollout did.)
`--config`: the settings file the planner is built from (default: kvpilot's defaults and `KVPILOT_*` environment
variables, as `kvpilot backtest`).

Every shared trace (`--trace all`, or one name of SHARED) from the segment bench/kv_episodes.py uses, scaled by
one rule (REFERENCE): its busiest minute asks for the GPU work per replica the reference's does.

Run: `.venv/bin/python bench/rollout.py [--trace NAME|all|FILE] [--rate-scale X] [--replicas N] [--wave N]
[--speed X] [--modes baseline,rollout,surge,kvpilot-base,kvpilot,kvpilot-k8s,kvpilot-ksm] [--ksm-scrape-s S]
[--ksm-phase-s S] [--controller deployment|waves] [--config FILE] [--max-s S]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.promql.decode import Series  # noqa: E402
from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from kvpilot.runtime.scale_ksm import KSM_DEPLOYMENT_SERIES, KubeStateMetricsScale  # noqa: E402
from scaler.backtest.policies.kvpilot import DEPLOYMENT, Kvpilot  # noqa: E402
from scaler.backtest.result import PolicyResult  # noqa: E402
from scaler.backtest.run import BacktestConfig, context_for, run_policy  # noqa: E402
from scaler.rollout import DeploymentRollout, surge_replicas  # noqa: E402
from simulator import Fleet, FleetConfig, load_trace, parse_fault  # noqa: E402
from simulator.faults import ROLLOUT_CONTROLLERS  # noqa: E402
from simulator.profile import ReplicaProfile  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
TICK_S = 5.0
COLD_S = 120.0
T_ROLLOUT = 300.0
SLO_S = 2.0
KEY = DEPLOYMENT  # the deployment the backtest's kvpilot scrapes ("backtest/llm")
KVPILOT_MODES = ("kvpilot-base", "kvpilot", "kvpilot-k8s", "kvpilot-ksm")
MODES = ("baseline", "rollout", "surge", *KVPILOT_MODES)
NO_ROLLOUT = ("baseline", "kvpilot-base")
# The most trace a run replays from its segment's start (--max-s): an hour, past the longest rollout measured (Azure
# code's planner sizes 16-20 replicas: 20 waves of 1 end ~2,900 s in) and the Azure traces' own end (~2,840 s).
MAX_SEGMENT_S = 3600.0
TAIL_S = 60.0  # the run goes on this long after the window, so that the window's last requests get a first token
# kube-prometheus' ServiceMonitor for kube-state-metrics (manifests/kubeStateMetrics-serviceMonitor.yaml @ 02cfa422):
# interval 30s. A Deployment's status reaches PromQL mode up to that much later than the API server has it.
KSM_SCRAPE_S = 30.0
# Every shared trace, from the segment bench/kv_episodes.py uses for it (Mooncake: the whole 1,022 s trace).
SHARED: dict[str, tuple[str, float]] = {
    "azure_code": ("azure2023_code.csv", 600.0),
    "azure_conv": ("azure2023_conv.csv", 600.0),
    "mooncake": ("mooncake_synthetic_trace.jsonl", 0.0),
    "servegen": ("servegen_m-large_days1-10", 3600.0),
}
# The one rule for "peak load with a few replicas": each trace is scaled so that the busiest minute of its
# segment asks for the GPU time (the replica profile's own step costs: prefill per prompt token, decode and KV
# reads per output token) that the reference's busiest minute asks for per replica: Azure conversation x12 on 4
# replicas, a fleet with no replica to spare (one replica short for a cold start, two requests in three miss the
# SLO). The busiest minute, not the mean: Azure code is on/off, its mean is a third of its bursts.
REFERENCE = ("azure_conv", 12.0, 4)
CONTROLLERS = ROLLOUT_CONTROLLERS


def window_end(replicas: int, wave: int) -> float:
    """The window sized for a fleet of ``replicas`` (before 2026-12-06 every window's end): still the segment the
    peak rule scales each trace on, so that the rate scales are those published."""
    return T_ROLLOUT + (-(-replicas // wave) + 2) * COLD_S


def rollout_window_end(done_s: float | None, segment_end_s: float) -> tuple[float, bool]:
    """The window's end for a rollout done at ``done_s`` (None: not done): a cold start after it, cut a minute
    before the segment's end where that comes first (True: cut)."""
    cut = segment_end_s - TAIL_S
    if done_s is None or done_s + COLD_S > cut:
        return cut, True
    return done_s + COLD_S, False


def peak_work(path: str, start_s: float, duration_s: float, rate_scale: float = 1.0) -> float:
    """GPU-seconds of work per second in the segment's busiest minute, from the default replica profile."""
    p = ReplicaProfile()
    cols = load_trace(path, seed=7, rate_scale=rate_scale, start_s=start_s, duration_s=duration_s).columns
    prompt, output = cols.prompt_tokens.astype(float), cols.output_tokens.astype(float)
    per_token = p.decode_s_per_seq + (prompt + output / 2) * p.kv_read_s_per_token
    work = prompt * p.prefill_s_per_token + output * per_token
    return float(np.bincount((cols.arrival_s // 60.0).astype(int), weights=work).max()) / 60.0


def peak_scale(name: str, replicas: int, duration_s: float) -> float:
    """The rate scale that puts ``name``'s busiest minute at the reference's GPU work per replica (REFERENCE)."""
    ref_name, ref_scale, ref_replicas = REFERENCE
    if name == ref_name and replicas == ref_replicas:
        return ref_scale
    file, start = SHARED[ref_name]
    ref = peak_work(str(TRACES / file), start, duration_s, ref_scale) / ref_replicas
    file, start = SHARED[name]
    return ref * replicas / peak_work(str(TRACES / file), start, duration_s)


@dataclass
class Run:
    """One mode's figures: attainment in its window, replica-hours over its run (to ``ran_to_s``), the window's end
    (cut: the rollout not done by the segment's end), when the rollout finished (None: not within the run, or no
    rollout), the counts kvpilot published ((time, count) at each change), and what a window or span other than its
    own is measured from: the replicas alive at each tick, each finished request's (arrival, TTFT), the arrivals."""

    attained: float
    replica_hours: float
    window_end_s: float
    rollout_end_s: float | None = None
    published: list[tuple[float, int]] = field(default_factory=list)
    ran_to_s: float = 0.0
    window_cut: bool = False
    alive: list[tuple[float, int]] = field(default_factory=list)
    ttfts: list[tuple[float, float]] = field(default_factory=list)
    arrivals: Any = None

    def attained_in(self, start_s: float, end_s: float) -> float:
        """TTFT SLO attainment of the requests arriving in [start_s, end_s) (one without a first token: a miss)."""
        ok = sum(1 for a, ttft in self.ttfts if start_s <= a < end_s and ttft <= SLO_S)
        done = sum(1 for a, _ in self.ttfts if start_s <= a < end_s)
        arrived = int(np.count_nonzero((self.arrivals >= start_s) & (self.arrivals < end_s)))
        return ok / max(arrived, done, 1)

    def replica_hours_until(self, end_s: float) -> float:
        """Replicas alive integrated over [0, end_s] (each tick's count held for the tick before it)."""
        total, before = 0.0, 0.0
        for t, n in self.alive:
            if t > end_s + 1e-9:
                break
            total += n * (t - before)
            before = t
        return total / 3600.0


def run(
    trace_path: str,
    rate_scale: float,
    replicas: int,
    wave: int,
    mode: str,
    *,
    start_s: float = 600.0,
    speed: float = 1.0,
    ksm_scrape_s: float = KSM_SCRAPE_S,
    ksm_phase_s: float | None = None,
    lead_s: float = COLD_S,
    controller: str = "deployment",
    config: Path | None = None,
    max_s: float = MAX_SEGMENT_S,
    until_s: float | None = None,
) -> Run:
    """One mode on the trace segment (``max_s`` of it at most): the peers' loop here, kvpilot's through the
    backtest's (``replay_kvpilot``). A rollout mode runs until a minute after its window (``rollout_window_end``);
    a mode without a rollout runs to ``until_s`` (None: the window sized for ``replicas``), its window the same."""
    if controller not in CONTROLLERS:
        raise ValueError(f"--controller must be one of {', '.join(CONTROLLERS)}, got {controller!r}")
    trace = load_trace(trace_path, seed=7, rate_scale=rate_scale, start_s=start_s, duration_s=max_s)
    segment_end = trace.duration_s
    if mode in NO_ROLLOUT:
        stop_at = min(window_end(replicas, wave) + TAIL_S if until_s is None else until_s, segment_end)

        def stop(t: float, _done: float | None) -> bool:
            return t >= stop_at - 1e-9

    else:

        def stop(t: float, done: float | None) -> bool:
            return t >= rollout_window_end(done, segment_end)[0] + TAIL_S - 1e-9

    config_ = FleetConfig(replicas=replicas, cold_start_s=COLD_S, routing="least_loaded", seed=7)
    fleet = Fleet(config_, trace)
    out = Run(0.0, 0.0, 0.0)
    if mode in KVPILOT_MODES:
        ksm = None
        if mode == "kvpilot-ksm":
            phase = worst_phase(ksm_scrape_s, lead_s) if ksm_phase_s is None else ksm_phase_s
            ksm = _KsmPrometheus(ksm_scrape_s, phase)
        reader = ScaleReader(wave=wave, lead_s=lead_s, ksm=ksm) if mode in ("kvpilot-k8s", "kvpilot-ksm") else None
        result = replay_kvpilot(
            trace, fleet, wave=wave, speed=speed, controller=controller, rollout=mode != "kvpilot-base",
            scale_read=reader, config=config, until=lambda t, r: stop(t, _done(r, segment_end)),
        )  # fmt: skip
        out.replica_hours = result.replica_hours
        out.rollout_end_s = _done(result, segment_end)
        out.published = published(result)
        out.alive = list(zip(result.times, result.replicas, strict=True))
        out.ran_to_s = result.times[-1]
    else:
        _replay_peer(fleet, trace, replicas, wave, mode, speed=speed, controller=controller, out=out, stop=stop)
        fleet.advance_to(out.ran_to_s + 4 * SLO_S)
    if mode in NO_ROLLOUT:
        out.window_end_s = out.ran_to_s - TAIL_S
    else:
        out.window_end_s, out.window_cut = rollout_window_end(out.rollout_end_s, segment_end)
    out.ttfts = [(f.arrival_s, f.ttft_s) for f in fleet.finished()]
    out.arrivals = trace.columns.arrival_s
    # Requests of the window still waiting for a first token at the end count as missing the SLO.
    out.attained = out.attained_in(T_ROLLOUT, out.window_end_s)
    return out


def _done(result: PolicyResult, segment_end_s: float) -> float | None:
    """When the replay's rollout finished (every replica new and ready), None: not (yet), or no rollout."""
    window = result.rollout
    return window.end_s if window is not None and window.end_s < segment_end_s else None


def _replay_peer(
    fleet: Fleet,
    trace: Any,
    replicas: int,
    wave: int,
    mode: str,
    *,
    speed: float,
    controller: str,
    out: Run,
    stop: Any = None,
) -> None:
    """baseline (no rollout), rollout (no surge) and surge (the oracle): the count held, or set by the oracle;
    until ``stop(t, when the rollout finished)`` holds (None: the trace's end)."""
    surge = surge_replicas(
        desired=replicas,
        old_remaining=replicas,
        wave_size=wave,
        wave_in_progress=False,
        next_wave_in_s=COLD_S,
        cold_start_s=COLD_S,
    )
    replica_s = 0.0
    rolled = False
    t = 0.0
    while t < trace.duration_s:
        t += TICK_S
        if mode == "surge" and t == T_ROLLOUT - COLD_S:
            fleet.set_replicas(surge)
        if mode != "baseline" and t == T_ROLLOUT:
            fleet.inject(
                parse_fault(
                    {
                        "type": "rollout",
                        "wave_size": wave,
                        "model_name": "next",
                        "speed": speed,
                        "controller": controller,
                    }
                )
            )
        fleet.advance_to(t)
        snap = fleet.snapshot()
        replica_s += len(snap.replicas) * TICK_S
        out.alive.append((t, len(snap.replicas)))
        new_and_ready = all(r.model_name == "next" and r.state == "ready" for r in snap.replicas)
        if mode != "baseline" and not rolled and t > T_ROLLOUT and new_and_ready:
            rolled = True  # the rollout is done: the oracle goes back to what demand needs
            out.rollout_end_s = t
            if mode == "surge":
                fleet.set_replicas(replicas)
        if stop is not None and stop(t, out.rollout_end_s):
            break
    out.ran_to_s = t
    out.replica_hours = replica_s / 3600.0


def replay_kvpilot(
    trace: Any,
    fleet: Fleet,
    *,
    wave: int,
    speed: float,
    controller: str = "deployment",
    rollout: bool = True,
    scale_read: Any = None,
    config: Path | None = None,
    planner: Any = None,
    until: Any = None,
) -> PolicyResult:
    """kvpilot on ``fleet`` as `kvpilot backtest [--rollout-at T_ROLLOUT]` replays it: the planner built from the
    settings (``config``; ``planner``: a PlannerConfig given instead) by the function `kvpilot run` uses, the
    backtest's `kvpilot` policy and loop, and, with a rollout, the control loop's rollout stage on top, told what
    ``scale_read`` reads of the Deployment where given. The fleet is left at the end (its requests measured)."""
    built, facts = backtest_planner(config, cold_start=COLD_S, slo_ttft=SLO_S, max_replicas=None)
    cfg = BacktestConfig(
        policies=("kvpilot",),
        fidelity="request",
        seed=7,
        planner=planner if planner is not None else built,
        frontier=False,
        rollout_at_s=T_ROLLOUT if rollout else None,
        rollout_wave=wave,
        rollout_speed=speed,
        rollout_controller=controller,
        **facts,
    )
    ctx = context_for(trace, cfg)
    return run_policy(trace, Kvpilot(ctx), ctx, cfg, "request", fleet=fleet, scale_read=scale_read, until=until)


def published(result: PolicyResult) -> list[tuple[float, int]]:
    """(time, count) at each change of the count kvpilot asked for."""
    steps: list[tuple[float, int]] = []
    for at, n in zip(result.times, result.desired, strict=True):
        if not steps or steps[-1][1] != n:
            steps.append((at, n))
    return steps


def worst_phase(interval_s: float, lead_s: float = COLD_S) -> float:
    """The first kube-state-metrics scrape's time that puts a scrape just before the template change (and, for a
    lead and T_ROLLOUT that are multiples of the interval, before the first drain): each is seen a whole interval
    late."""
    return (T_ROLLOUT - lead_s - 1e-3) % interval_s


def ksm_series(d: DeploymentRollout, at: float) -> list[Series]:
    """The `kube_deployment_*` series kube-state-metrics exports for ``d`` (RollingUpdate: the strategy's fenceposts
    as counts), as a Prometheus instant query answers them, sampled at ``at``."""
    fields = {
        "replicas": d.replicas,
        "generation": d.generation,
        "observed_generation": d.observed_generation,
        "status_replicas": d.status_replicas,
        "updated_replicas": d.updated_replicas,
        "ready_replicas": d.ready_replicas,
        "available_replicas": d.ready_replicas,
        "max_surge": d.max_surge,
        "max_unavailable": d.max_unavailable,
    }
    namespace, _, name = KEY.partition("/")
    labels = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080", "namespace": namespace, "deployment": name}
    return [
        {"metric": {"__name__": metric, **labels}, "value": [at, str(fields[field])]}
        for metric, field in KSM_DEPLOYMENT_SERIES.items()
    ]


class _KsmPrometheus:
    """kube-state-metrics scraped by Prometheus every ``interval_s`` from ``phase_s``: each scrape holds the
    Deployment's status as of the last tick at or before it (the simulator moves at ticks), and an instant query
    answers the last scrape's series (within Prometheus' 5-minute lookback)."""

    def __init__(self, interval_s: float, phase_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"--ksm-scrape-s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self.next_scrape = phase_s % interval_s - interval_s  # one scrape before the run: kvpilot starts with it
        self.series: list[Series] = []
        self.before: DeploymentRollout | None = None  # the status at the previous tick

    def observe(self, status: DeploymentRollout, t: float) -> None:
        while self.next_scrape <= t:
            seen = self.before if self.before is not None and self.next_scrape < t else status
            self.series = ksm_series(seen, self.next_scrape)
            self.next_scrape += self.interval_s
        self.before = status

    async def query(self, promql: str, now: float) -> list[Series]:
        if promql.startswith("up{"):
            return [
                {
                    "metric": {"__name__": "up", "job": "kube-state-metrics", "instance": "10.0.0.9:8080"},
                    "value": [now, "1"],
                }
            ]
        return self.series


class ScaleReader:
    """What `kvpilot run`'s scale source reads of the Deployment at a tick (``scaler.backtest.run.ScaleRead``): its
    status as the API server reports it (`kvpilot-k8s`, ``KubernetesScale``), emulated from the simulator's
    replicas, or as kube-state-metrics exports it, scraped by Prometheus and read through
    ``KubeStateMetricsScale`` with the count it holds (`kvpilot-ksm`, ``ksm`` given)."""

    def __init__(self, *, wave: int, lead_s: float = COLD_S, ksm: _KsmPrometheus | None = None) -> None:
        self.wave = wave
        self.lead_s = lead_s
        self.ksm = ksm
        self.ksm_scale = KubeStateMetricsScale(ksm.query) if ksm is not None else None

    def __call__(self, snap: Any, t: float) -> tuple[dict[str, DeploymentRollout], int | None]:
        spec = sum(1 for r in snap.replicas if r.state != "draining")
        deployments = {KEY: self._deployment(snap, t, spec)}
        if self.ksm is None or self.ksm_scale is None:
            return deployments, None
        # PromQL mode: the status and spec.replicas as the last kube-state-metrics scrape holds them
        self.ksm.observe(deployments[KEY], t)
        view = asyncio.run(self.ksm_scale.read([KEY], t))
        return dict(view.rollouts), view.replicas.get(KEY, spec)

    def _deployment(self, snap: Any, t: float, spec: int) -> DeploymentRollout:
        """The Deployment's status as the apiserver would report it: the template changed (generation 2) at
        T_ROLLOUT - lead_s (paused until T_ROLLOUT; 0: `kubectl set image` with no pause); updated = replicas on
        the new version, loading included."""
        changed = t >= T_ROLLOUT - self.lead_s
        live = [r for r in snap.replicas if r.state != "draining"]
        return DeploymentRollout(
            generation=2 if changed else 1,
            observed_generation=2 if changed else 1,
            replicas=spec,
            updated_replicas=sum(1 for r in live if r.model_name == "next") if changed else spec,
            status_replicas=len(live),
            ready_replicas=sum(1 for r in live if r.state == "ready"),
            max_surge=0,
            max_unavailable=self.wave,
        )


def report_lines(modes: list[str], runs: dict[str, Run]) -> list[str]:
    """One line per mode, in the order asked: attainment over its window, replica-hours over its run and against
    the first mode's over the same span; for the kvpilot modes the rollout's end and the points and surge against
    kvpilot-base over the same window and span."""
    first = runs[modes[0]]
    alone = runs.get("kvpilot-base")  # the planner's own run without the rollout
    lines: list[str] = []
    for mode in modes:
        r = runs[mode]
        if r.published:
            steps = ", ".join(f"{n} at {at:.0f} s" for at, n in r.published)
            lines.append(f"          kvpilot published desired: {steps}")
        span = min(r.ran_to_s, first.ran_to_s)
        line = (
            f"{mode:<12} TTFT <= {SLO_S:g} s for {r.attained:.2%} of requests arriving "
            f"{T_ROLLOUT:.0f}-{r.window_end_s:.0f} s{' (cut: rollout not done)' if r.window_cut else ''}; "
            f"{r.replica_hours:.2f} replica-hours over 0-{r.ran_to_s:.0f} s "
            f"({r.replica_hours_until(span) - first.replica_hours_until(span) + 0.0:+.2f} over 0-{span:.0f} s)"
        )
        if mode in KVPILOT_MODES and mode != "kvpilot-base":
            ended = "not by the run's end" if r.rollout_end_s is None else f"at {r.rollout_end_s:.0f} s"
            line += f"; rollout done {ended}"
            if alone is not None:
                points = (r.attained - alone.attained_in(T_ROLLOUT, r.window_end_s)) * 100.0 + 0.0  # no "-0.00"
                goal = "met" if points >= -1.0 else "MISSED"
                surge = r.replica_hours - alone.replica_hours_until(r.ran_to_s) + 0.0
                line += (
                    f"; against kvpilot-base {points:+.2f} points ({goal}: within 1), surge {surge:+.2f} replica-hours"
                )
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default="azure_conv", help=f"one of {', '.join(SHARED)}, 'all', or a file")
    parser.add_argument("--rate-scale", type=float, default=None, help="default: the peak rule (REFERENCE)")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--wave", type=int, default=1)
    parser.add_argument("--speed", type=float, default=1.0, help="the new version's speed (step times divided)")
    parser.add_argument(
        "--modes",
        default="baseline,rollout,kvpilot-base,kvpilot,kvpilot-k8s",
        help=f"comma-separated, of {', '.join(MODES)}; baseline first, kvpilot-base before the kvpilot modes",
    )
    parser.add_argument(
        "--ksm-scrape-s", type=float, default=KSM_SCRAPE_S, help="kvpilot-ksm: kube-state-metrics' scrape interval"
    )
    parser.add_argument(
        "--ksm-phase-s", type=float, default=None, help="kvpilot-ksm: the first scrape's time (default: the worst)"
    )
    parser.add_argument(
        "--lead-s",
        type=float,
        default=COLD_S,
        help="kvpilot-k8s/-ksm: the template changes this long before the rollout resumes (0: no pause)",
    )
    parser.add_argument(
        "--controller",
        choices=CONTROLLERS,
        default="deployment",
        help="the rollout's controller: the Deployment controller's fenceposts, or fixed waves (before 2026-12-04)",
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="kvpilot's settings file for the planner (as kvpilot backtest's)"
    )
    parser.add_argument(
        "--max-s",
        type=float,
        default=MAX_SEGMENT_S,
        help="the most trace a run replays from the segment's start: a rollout not done by then has its window cut",
    )
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {', '.join(unknown)}; known: {', '.join(MODES)}")
    started = time.perf_counter()
    names = list(SHARED) if args.trace == "all" else [args.trace]
    for name in names:
        path, start = (str(TRACES / SHARED[name][0]), SHARED[name][1]) if name in SHARED else (name, 0.0)
        duration = window_end(args.replicas, args.wave) + 60.0
        scale = args.rate_scale if args.rate_scale is not None else peak_scale(name, args.replicas, duration)
        print(
            f"== {name} x{scale:.3g} from {start:.0f} s, {args.replicas} replicas, waves of {args.wave}, "
            f"new version speed {args.speed:g}, {args.controller} controller",
            flush=True,
        )
        runs: dict[str, Run] = {}
        # the rollout modes first: the modes without one run as long as the longest of them
        for mode in sorted(modes, key=lambda m: m in NO_ROLLOUT):
            spans = [r.ran_to_s for m, r in runs.items() if m not in NO_ROLLOUT]
            runs[mode] = run(
                path,
                scale,
                args.replicas,
                args.wave,
                mode,
                start_s=start,
                speed=args.speed,
                ksm_scrape_s=args.ksm_scrape_s,
                ksm_phase_s=args.ksm_phase_s,
                lead_s=args.lead_s,
                controller=args.controller,
                config=args.config,
                max_s=args.max_s,
                until_s=max(spans) if spans else None,
            )
        print(
            f"   window: from the rollout's start ({T_ROLLOUT:.0f} s) to a cold start ({COLD_S:.0f} s) after the "
            f"rollout is done (every replica new and ready), each rollout mode its own (cut a minute before the "
            f"segment's end, {args.max_s:.0f} s of trace at most, where not done); "
            f"{' and '.join(m for m in NO_ROLLOUT if m in runs) or 'the modes without a rollout'} measured over "
            "each one's window and span",
            flush=True,
        )
        for line in report_lines(modes, runs):
            print(line, flush=True)
    print(f"(wall {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
