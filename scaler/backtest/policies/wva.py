"""`wva`: llm-d's workload-variant-autoscaler as its Helm chart deploys it: the saturation engine (V1 analyzer,
the chart's default) every 30 s, publishing `wva_desired_replicas`, and the chart's HPA scaling the deployment on
that metric with the chart's `behavior`.

Sources (repository, path, commit), one per constant below:
- llm-d/llm-d-workload-variant-autoscaler internal/engines/saturation/engine.go
  @ 07078b0db37ff95e68308edcb3953b02be61431a:
  the polling executor's `Interval: 30 * time.Second` (hard-coded; `GLOBAL_OPT_INTERVAL` is read but unused there).
  Later llm-d-incubation/workload-variant-autoscaler commits (engine.go @ 03478227dbb33187caeb0fcd4f8dfca6871a9aaf,
  internal/config/loader.go @ 36587f8c5d7b140ecb179dadfeb895362e6826bc) take the interval from `GLOBAL_OPT_INTERVAL`
  (default 60 s); the 30 s of the released engine is modelled here.
- llm-d-incubation/workload-variant-autoscaler internal/saturation/analyzer.go
  @ 36587f8c5d7b140ecb179dadfeb895362e6826bc:
  saturation per replica, average spare capacity over the non-saturated replicas, scale-up trigger, the N/(N−1)
  scale-down simulation, and `CalculateSaturationTargets` (hold while the model is in transition: last desired ≠
  current, or replicas reporting metrics ≠ current; otherwise ready + 1 / ready − 1, never below 1).
- llm-d-incubation/workload-variant-autoscaler docs/saturation-analyzer.md @ 6400520b1952f4a85aac350414ca445a0a3bb87c:
  signals are `max_over_time(...[1m])` per pod; scale-down needs at least 2 non-saturated replicas.
- llm-d-incubation/workload-variant-autoscaler charts/workload-variant-autoscaler/values.yaml
  @ 282dbece60b63accfd108e3e79ca546f5c3c0634:
  `capacityScaling.default` thresholds, `hpa.targetAverageValue: "1"`, `hpa.behavior` (240 s stabilisation up and
  down, at most 10 pods per 150 s each way, selectPolicy Max). The HPA's own tolerance (10 %) and 15 s sync period
  are the Kubernetes defaults (`scaler.backtest.hpa`).
"""

from __future__ import annotations

from scaler.backtest.hpa import SYNC_PERIOD_S, HpaBehaviour, ScalingPolicy, ScalingRules, average_value_replicas
from scaler.backtest.observe import History, Observation
from scaler.backtest.policies.base import Context, Policy

ENGINE_INTERVAL_S = 30.0  # engine.go @ 07078b0: Interval: 30 * time.Second
KV_SATURATED = 0.80  # values.yaml @ 282dbece: kvCacheThreshold
QUEUE_SATURATED = 5.0  # values.yaml @ 282dbece: queueLengthThreshold
KV_SPARE_TRIGGER = 0.10  # values.yaml @ 282dbece: kvSpareTrigger
QUEUE_SPARE_TRIGGER = 3.0  # values.yaml @ 282dbece: queueSpareTrigger
MIN_NON_SATURATED_FOR_SCALE_DOWN = 2  # saturation-analyzer.md @ 6400520: N_non_sat >= 2
SIGNAL_WINDOW_S = 60.0  # saturation-analyzer.md @ 6400520: max_over_time[1m]
HPA_TARGET_AVERAGE_VALUE = 1.0  # values.yaml @ 282dbece: hpa.targetAverageValue
HPA_STABILISATION_S = 240.0  # values.yaml @ 282dbece: hpa.behavior.scaleUp/scaleDown.stabilizationWindowSeconds
HPA_POLICY = ScalingPolicy("Pods", 10, 150.0)  # values.yaml @ 282dbece: hpa.behavior.*.policies (Pods 10 / 150 s)


def chart_hpa(ctx: Context) -> HpaBehaviour:
    """The HPA the WVA chart creates in front of the deployment."""
    rules = ScalingRules(HPA_STABILISATION_S, (HPA_POLICY,), "Max")
    return HpaBehaviour(min_replicas=ctx.min_replicas, max_replicas=ctx.max_replicas, scale_up=rules, scale_down=rules)


def saturation_target(kv: list[float], queue: list[float], current: int, ready: int, last_desired: int) -> int:
    """`CalculateSaturationTargets` for one variant from per-replica KV usage and queue length (ready replicas)."""
    in_transition = (last_desired != 0 and last_desired != current) or ready != current
    if in_transition:
        return last_desired if last_desired != 0 and last_desired != current else current
    spare = [(KV_SATURATED - k, QUEUE_SATURATED - q) for k, q in zip(kv, queue, strict=True)]
    unsaturated = [(sk, sq) for sk, sq in spare if sk > 0 and sq > 0]
    n = len(unsaturated)
    spare_kv = sum(s[0] for s in unsaturated) / n if n else 0.0
    spare_queue = sum(s[1] for s in unsaturated) / n if n else 0.0
    if spare_kv < KV_SPARE_TRIGGER or spare_queue < QUEUE_SPARE_TRIGGER:
        return ready + 1
    if n >= MIN_NON_SATURATED_FOR_SCALE_DOWN and ready > 1:
        grow = n / (n - 1)  # the non-saturated replicas' load spread over one fewer
        kv_after = (KV_SATURATED - spare_kv) * grow
        queue_after = (QUEUE_SATURATED - spare_queue) * grow
        if KV_SATURATED - kv_after >= KV_SPARE_TRIGGER and QUEUE_SATURATED - queue_after >= QUEUE_SPARE_TRIGGER:
            return ready - 1
    return ready


def _windowed_signals(history: History) -> tuple[list[float], list[float]]:
    """max_over_time over 1 m per replica slot (replicas are matched by position among the ready ones)."""
    n = len(history.latest.ready)
    window = history.window(SIGNAL_WINDOW_S)

    def peak(signal: str, i: int) -> float:
        return max((getattr(o.ready[i], signal) for o in window if len(o.ready) > i), default=0.0)

    return [peak("kv_usage", i) for i in range(n)], [peak("requests_waiting", i) for i in range(n)]


class Wva(Policy):
    name = "wva"
    interval_s = SYNC_PERIOD_S  # the HPA syncs every 15 s; the engine behind it every 30 s

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.hpa = chart_hpa(ctx)
        self.desired = 0  # the VariantAutoscaling's status.desiredOptimizedAlloc (0: none yet)
        self._engine_at: float | None = None

    def start(self, replicas: int, now: float) -> None:
        self.hpa.seed(now, replicas)

    def engine(self, obs: Observation, history: History) -> int:
        """One optimisation cycle of the saturation engine: the new `wva_desired_replicas`."""
        if not obs.ready:  # no replica reports metrics: the engine's safety net keeps the current count
            return self.desired or obs.current
        kv, queue = _windowed_signals(history)
        target = saturation_target(kv, queue, obs.current, len(obs.ready), self.desired)
        return self.ctx.clamp(max(target, 1))

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        if self._engine_at is None or now - self._engine_at >= ENGINE_INTERVAL_S - 1e-9:
            self.desired = self.engine(obs, history)
            self._engine_at = now
        metric = float(self.desired or obs.current)
        recommended = average_value_replicas(metric, HPA_TARGET_AVERAGE_VALUE, obs.current)
        return self.ctx.clamp(self.hpa.apply(now, obs.current, recommended))
