"""kvpilot's Grafana dashboards as code: fleet overview, deployment detail, GPU health, kvpilot itself, cost.

Every query is built from the mixin config (``dashboards.mixin.CONFIG``, the one the alert rules read too): the job
selector, the template variables' matchers, the rate window and the colour steps, with series names taken from the
catalogue ``api/series.py`` rather than written out. An operator who relabels `deployment` or scrapes kvpilot
under another job changes one place.
"""

from __future__ import annotations

from dashboards.builder import Dashboard, Panel, Query, Row, Variable
from dashboards.mixin import CONFIG, MixinConfig, series

# Matchers beside the selectors (label values the exporter writes: api/series.py and detectors.finding).
_READY = 'state="ready"'
_LOADING = 'state="loading"'
_SURGE = 'reason="rollout_surge"'
_ROLLOUT = 'kind="rollout"'
_KV_EXHAUSTION = 'kind="kv_exhaustion"'
_STUCK_GPU = 'kind="stuck_gpu"'


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def _increase(c: MixinConfig, s: series.Series, *matchers: str) -> str:
    """One copy of a counter's increase over the rate window (``MixinConfig.one_copy``)."""
    return c.one_copy(f"increase({c.select(s, *matchers)}[{c.rate_window}])")


def _quantile(q: float, bucket_series: str, window: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({bucket_series}[{window}])))"


def fleet_overview(c: MixinConfig = CONFIG) -> Dashboard:
    d = c.deployment_selector
    return Dashboard(
        tags=c.dashboard_tags,
        refresh=c.dashboard_refresh,
        uid="kvpilot-fleet",
        title="kvpilot / Fleet overview",
        description="Every LLM deployment kvpilot watches: replicas, queue, KV cache, prefix cache, latency, findings.",
        variables=[
            Variable(
                "deployment", "Deployment", f"label_values({c.select(series.DEPLOYMENT_REQUESTS_WAITING)}, deployment)"
            )
        ],
        rows=[
            Row(
                "Capacity",
                (
                    Panel(
                        "Replicas: desired vs ready",
                        "kvpilot's desired replica count (what KEDA is told) against replicas that serve traffic. "
                        "A persistent gap means replicas are cold-starting or stuck pending.",
                        (
                            _q(c.read(series.DESIRED_REPLICAS, d), "desired {{deployment}}"),
                            _q(c.read(series.DEPLOYMENT_REPLICAS, d, _READY), "ready {{deployment}}"),
                            _q(c.read(series.DEPLOYMENT_REPLICAS, d, _LOADING), "loading {{deployment}}"),
                        ),
                        min=0,
                    ),
                    Panel(
                        "Requests waiting",
                        "Requests queued in the engines, summed per deployment. Queueing means TTFT is growing.",
                        (_q(c.read(series.DEPLOYMENT_REQUESTS_WAITING, d), "{{deployment}}"),),
                        min=0,
                        thresholds=c.queue_steps,
                    ),
                    Panel(
                        "Requests running",
                        "Requests in the engines' running batches, summed per deployment.",
                        (_q(c.read(series.DEPLOYMENT_REQUESTS_RUNNING, d), "{{deployment}}"),),
                        min=0,
                    ),
                    Panel(
                        "KV cache usage",
                        "Share of the paged KV pool in use: mean over replicas and the fullest replica. "
                        "Near 1 the engine preempts requests.",
                        (
                            _q(c.read(series.DEPLOYMENT_KV_USAGE, d), "mean {{deployment}}"),
                            _q(c.read(series.DEPLOYMENT_KV_USAGE_MAX, d), "max {{deployment}}"),
                        ),
                        unit="percentunit",
                        min=0,
                        max=1,
                        thresholds=c.kv_usage_steps,
                    ),
                ),
            ),
            Row(
                "Efficiency and latency",
                (
                    Panel(
                        "Prefix cache hit ratio",
                        "Windowed Δhits/Δqueries (tokens). A fall after a scale-out usually means routing spreads "
                        "shared prefixes across replicas: use prefix-aware routing.",
                        (_q(c.read(series.PREFIX_CACHE_HIT_RATIO, d), "{{deployment}}"),),
                        unit="percentunit",
                        min=0,
                        max=1,
                    ),
                    Panel(
                        "Time to first token",
                        "TTFT quantiles over the rate window, from the engines' histograms.",
                        (_q(c.read(series.TTFT_SECONDS, d), "p{{quantile}} {{deployment}}"),),
                        unit="s",
                        min=0,
                    ),
                    Panel(
                        "Inter-token latency",
                        "Time between output tokens over the rate window, from the engines' histograms, per deployment"
                        " (kvpilot's series, so it follows $deployment as the other panels do).",
                        (_q(c.read(series.ITL_SECONDS, d), "p{{quantile}} {{deployment}}"),),
                        unit="s",
                        min=0,
                    ),
                    Panel(
                        "Token throughput",
                        "Prompt and generated tokens per second per deployment.",
                        (_q(c.read(series.DEPLOYMENT_TOKENS_RATE, d), "{{direction}} {{deployment}}"),),
                        unit="short",
                        min=0,
                    ),
                ),
            ),
            Row(
                "Findings",
                (
                    Panel(
                        "Active findings",
                        "Open findings by kind and severity (KV exhaustion, prefix-cache misses, stuck GPUs, targets "
                        "down, TTFT SLO burn). Details in the kvpilot API at /v1/findings.",
                        (
                            _q(
                                f"sum by (kind, severity) ({c.read(series.FINDING_ACTIVE)})",
                                "{{kind}} ({{severity}})",
                            ),
                        ),
                        kind="bargauge",
                        width=24,
                        height=6,
                    ),
                ),
            ),
        ],
    )


def deployment_detail(c: MixinConfig = CONFIG) -> Dashboard:
    d = c.deployment_selector
    return Dashboard(
        tags=c.dashboard_tags,
        refresh=c.dashboard_refresh,
        uid="kvpilot-deployment",
        title="kvpilot / Deployment detail",
        description="Forecast against actual demand, replica decisions and their reasons, warm pool and cold starts.",
        variables=[
            Variable(
                "deployment",
                "Deployment",
                f"label_values({c.select(series.DESIRED_REPLICAS)}, deployment)",
                multi=False,
                include_all=False,
            )
        ],
        rows=[
            Row(
                "Demand",
                (
                    Panel(
                        "Arrival rate: forecast vs actual",
                        "Observed request arrival rate (the engines' estimate) and the rate the planner read (the "
                        "gateway's where collector.arrivals gives one) against kvpilot's forecast at the scaling "
                        "horizon (cold start + scaling delay) and its upper band.",
                        (
                            _q(c.read(series.DEPLOYMENT_ARRIVAL_RATE, d), "actual"),
                            _q(c.read(series.PLANNER_ARRIVAL_RATE, d), "planner input"),
                            _q(c.read(series.FORECAST_ARRIVAL_RATE, d), "forecast"),
                            _q(c.read(series.FORECAST_ARRIVAL_RATE_UPPER, d), "forecast upper"),
                        ),
                        unit="reqps",
                        min=0,
                        width=16,
                    ),
                    Panel(
                        "Forecast error (MASE)",
                        "Mean absolute scaled error at the horizon; below 1 beats the last-value forecast.",
                        (_q(c.read(series.FORECAST_ERROR_MASE, d), "{{model}}"),),
                        min=0,
                        width=8,
                        thresholds=c.mase_steps,
                    ),
                ),
            ),
            Row(
                "Decisions",
                (
                    Panel(
                        "Desired replicas and their parts",
                        "desired = max(predictive at the horizon, reactive from the current queue), after "
                        "stabilisation, step limits and min/max clamps.",
                        (
                            _q(c.read(series.DESIRED_REPLICAS, d), "desired"),
                            _q(c.read(series.PREDICTIVE_REPLICAS, d), "predictive"),
                            _q(c.read(series.REACTIVE_REPLICAS, d), "reactive"),
                            _q(c.read(series.DEPLOYMENT_REPLICAS, d, _READY), "ready"),
                        ),
                        min=0,
                        width=16,
                    ),
                    Panel(
                        "Warm pool",
                        "Replicas loading now for the demand expected one cold start ahead.",
                        (_q(c.read(series.WARM_POOL_REPLICAS, d), "warm pool"),),
                        min=0,
                        width=8,
                    ),
                    Panel(
                        "Decisions by reason",
                        "How often each reason decided the replica count (predictive, reactive, stabilised, "
                        "clamped...).",
                        (_q(f"sum by (reason) ({_increase(c, series.DECISIONS, d)})", "{{reason}}"),),
                        min=0,
                    ),
                    Panel(
                        "Cold starts",
                        "Replicas loading weights (not ready yet).",
                        (_q(c.read(series.DEPLOYMENT_REPLICAS, d, _LOADING), "loading"),),
                        min=0,
                    ),
                    Panel(
                        "Rollouts: surge and findings",
                        "Ticks whose published count was raised by a rollout's surge (reason rollout_surge: "
                        "desired plus the replicas a wave is loading and the next wave's), beside open rollout "
                        "findings (warning: too many replicas out at once or TTFT burning; critical: both).",
                        (
                            _q(
                                # 0, not "No data", while no rollout has happened: the counter's label appears
                                # only with the first surge
                                f"sum({_increase(c, series.DECISIONS, _SURGE, d)}) or vector(0)",
                                "surge ticks",
                            ),
                            _q(
                                f"sum by (severity) ({c.read(series.FINDING_ACTIVE, _ROLLOUT, d)}) "
                                'or label_replace(vector(0), "severity", "none", "", "")',
                                "rollout finding ({{severity}})",
                            ),
                        ),
                        min=0,
                    ),
                ),
            ),
            Row(
                "Replicas",
                (
                    Panel(
                        "Queue per replica",
                        "Waiting requests on each replica: uneven queues point at routing.",
                        (_q(c.read(series.REPLICA_REQUESTS_WAITING, d), "{{replica}}"),),
                        min=0,
                    ),
                    Panel(
                        "KV usage per replica",
                        "KV pool usage of each replica. Near 1 the engine preempts requests.",
                        (_q(c.read(series.REPLICA_KV_USAGE, d), "{{replica}}"),),
                        unit="percentunit",
                        min=0,
                        max=1,
                    ),
                    Panel(
                        "Projected time until the KV pool is full",
                        "From each replica's KV-usage trend; only replicas whose usage is rising have a value. "
                        "The kv_exhaustion finding (and the KvCacheExhaustionImminent alert) opens below its "
                        "threshold only while the pool is still filling: arrivals outrunning completions, or "
                        "requests waiting for blocks.",
                        (_q(c.read(series.KV_TIME_TO_EXHAUSTION, d), "{{replica}}"),),
                        unit="s",
                        min=0,
                    ),
                    Panel(
                        "KV exhaustion findings per replica",
                        "Open kv_exhaustion findings: warning = projected full and still filling, critical = "
                        "preempting on a full pool, or full with requests waiting. The finding's text (kvpilot's API: "
                        "GET /v1/findings?kind=kv_exhaustion) gives the usage, fill rate, time to exhaustion and "
                        "preemption rate.",
                        (
                            _q(
                                f"sum by (replica, severity) ({c.read(series.FINDING_ACTIVE, _KV_EXHAUSTION, d)})",
                                "{{replica}} ({{severity}})",
                            ),
                        ),
                        min=0,
                    ),
                    Panel(
                        "Requests running per replica",
                        "Requests in each replica's running batch: uneven batches point at routing or a slow GPU.",
                        (_q(c.read(series.REPLICA_REQUESTS_RUNNING, d), "{{replica}}"),),
                        min=0,
                    ),
                ),
            ),
        ],
    )


def gpu_health(c: MixinConfig = CONFIG) -> Dashboard:
    n = c.node_selector
    return Dashboard(
        tags=c.dashboard_tags,
        refresh=c.dashboard_refresh,
        uid="kvpilot-gpus",
        title="kvpilot / GPU health",
        description="GPU utilisation, memory, XIDs by triage class and node drain state.",
        variables=[Variable("node", "Node", f"label_values({c.select(series.GPU_UTILISATION)}, node)")],
        rows=[
            Row(
                "Utilisation",
                (
                    Panel(
                        "GPU utilisation",
                        "Share of time each GPU was busy. Pinned at 1 with no token progress is a hang.",
                        (_q(c.read(series.GPU_UTILISATION, n), "{{node}} gpu{{gpu}}"),),
                        unit="percentunit",
                        min=0,
                        max=1,
                    ),
                    Panel(
                        "Framebuffer memory used",
                        "Memory in use on each GPU, as kvpilot read it from the node's GPU source (dcgm-exporter, "
                        "AMD's exporter, NVML or Triton), labelled with kvpilot's node names like the panels beside "
                        "it. kvpilot_gpu_memory_free_bytes holds what is free.",
                        (_q(c.read(series.GPU_MEMORY_USED, n), "{{node}} gpu{{gpu}}"),),
                        unit="bytes",
                        min=0,
                    ),
                ),
            ),
            Row(
                "Health",
                (
                    Panel(
                        "Last XID by class",
                        "Last XID seen per GPU, labelled with its triage class: application (restart the workload), "
                        "watch (reset when idle), drain (cordon, drain, reset).",
                        (_q(f"{c.read(series.GPU_LAST_XID, n)} > 0", "{{node}} gpu{{gpu}} {{xid_class}}"),),
                        kind="table",
                    ),
                    Panel(
                        "Node drain state",
                        "Nodes kvpilot has flagged, cordoned or drained (dry-run included).",
                        (_q(f"{c.read(series.NODE_DRAIN_STATE, n)} > 0", "{{node}} {{state}}"),),
                        kind="table",
                    ),
                    Panel(
                        "Stuck-GPU findings",
                        "Open stuck_gpu findings per node.",
                        (_q(f"sum by (node) ({c.read(series.FINDING_ACTIVE, _STUCK_GPU)})", "{{node}}"),),
                        kind="bargauge",
                        width=24,
                        height=6,
                    ),
                ),
            ),
        ],
    )


def kvpilot_self(c: MixinConfig = CONFIG) -> Dashboard:
    w = c.rate_window
    return Dashboard(
        tags=c.dashboard_tags,
        refresh=c.dashboard_refresh,
        uid="kvpilot-self",
        title="kvpilot / kvpilot itself",
        description="Is the watcher healthy: scrape health, control-loop timing, store lag, its API's connections.",
        rows=[
            Row(
                "Collection",
                (
                    Panel(
                        "Targets up",
                        "Scrape targets answering, out of all known.",
                        (
                            _q(f"sum({c.read(series.SCRAPE_UP)})", "up"),
                            _q(f"count({c.read(series.SCRAPE_UP)})", "known"),
                        ),
                        min=0,
                    ),
                    Panel(
                        "Slowest scrapes",
                        "The ten slowest targets' last scrape duration.",
                        (_q(f"topk(10, {c.read(series.SCRAPE_DURATION)})", "{{target}}"),),
                        unit="s",
                        min=0,
                    ),
                    Panel(
                        "Scrape failures",
                        "Failed scrapes per second across all targets.",
                        (_q(f"rate({c.select(series.SCRAPE_FAILURES)}[{w}])", "failures"),),
                        unit="short",
                        min=0,
                    ),
                    Panel(
                        "Pages read in part",
                        "The ten targets with the most pages that lost a family to a bad sample line over the window "
                        "(0 when every page was read whole); the rest of each page was read and the target stays up. "
                        "/v1/targets' last_error names what was left out.",
                        (
                            _q(
                                f"topk(10, sum by (target) ({_increase(c, series.SCRAPE_PARTIAL_PAGES)}))",
                                "{{target}}",
                            ),
                        ),
                        unit="short",
                        min=0,
                    ),
                ),
            ),
            Row(
                "Control loop and store",
                (
                    Panel(
                        "Tick duration",
                        "p50 and p99 of one control-loop tick (collect, detect, decide, persist, publish).",
                        (
                            _q(_quantile(0.5, c.select(series.LOOP_TICK_SECONDS, suffix="_bucket"), w), "p50"),
                            _q(_quantile(0.99, c.select(series.LOOP_TICK_SECONDS, suffix="_bucket"), w), "p99"),
                        ),
                        unit="s",
                        min=0,
                    ),
                    Panel(
                        "Tick overruns",
                        "Ticks that took longer than the interval.",
                        (_q(f"increase({c.select(series.LOOP_OVERRUNS)}[{w}])", "overruns"),),
                        min=0,
                    ),
                    Panel(
                        "Store",
                        "Whether the database answers, and writes buffered while it does not.",
                        (
                            _q(c.select(series.STORE_UP), "store up"),
                            _q(c.select(series.STORE_PENDING_WRITES), "pending writes"),
                        ),
                        min=0,
                    ),
                    Panel(
                        "Writes dropped and stage errors",
                        "Buffered writes dropped because the store stayed down past the buffer's size, and loop "
                        "stages that raised (the loop carries on; the log says why).",
                        (
                            _q(f"increase({c.select(series.STORE_DROPPED_WRITES)}[{w}])", "dropped writes"),
                            _q(f"sum by (stage) (increase({c.select(series.STAGE_ERRORS)}[{w}]))", "errors: {{stage}}"),
                        ),
                        min=0,
                    ),
                    Panel(
                        "Leader",
                        "1 on the kvpilot replica that holds the Lease and may actuate (drains, direct scaling); "
                        "the others serve reads.",
                        (_q(c.select(series.LEADER), "{{instance}}"),),
                        min=0,
                        max=1,
                    ),
                ),
            ),
            Row(
                "HTTP API",
                (
                    Panel(
                        "API connections",
                        "HTTP connections open on each kvpilot instance (api.max_connections bounds them, 1000 by "
                        "default); kvpilot's clients (Prometheus, probes, KEDA's metrics-api trigger) open tens.",
                        (_q(c.select(series.API_CONNECTIONS_OPEN), "{{instance}}"),),
                        unit="short",
                        min=0,
                    ),
                    Panel(
                        "API connections refused and timed out",
                        "New connections answered 503 at api.max_connections (a scrape or a probe among them is "
                        "lost: KvpilotApiConnectionsRefused), connections answered 408 because a request head "
                        "did not arrive within api.header_timeout_s, and connections closed because their client "
                        "took none of a large answer for 60 s, over the window.",
                        (
                            _q(f"increase({c.select(series.API_CONNECTIONS_REFUSED)}[{w}])", "refused: {{instance}}"),
                            _q(
                                f"increase({c.select(series.API_REQUEST_HEAD_TIMEOUTS)}[{w}])",
                                "head timed out: {{instance}}",
                            ),
                            _q(
                                f"increase({c.select(series.API_SEND_TIMEOUTS)}[{w}])",
                                "answer not taken: {{instance}}",
                            ),
                        ),
                        unit="short",
                        min=0,
                    ),
                ),
            ),
        ],
    )


def cost(c: MixinConfig = CONFIG) -> Dashboard:
    """What the fleet costs (scaler.cost, docs/cost.md): dollars per hour and per million output tokens by
    deployment, GPUs and their power, and the advisory per-GPU-type options."""
    d = c.deployment_selector
    return Dashboard(
        tags=c.dashboard_tags,
        refresh=c.dashboard_refresh,
        uid="kvpilot-cost",
        title="kvpilot / Cost",
        description="Dollars per hour and per million output tokens by deployment, from GPU type, count and price "
        "(settings `cost`), and what the current demand would cost on each profiled GPU type (advisory).",
        variables=[
            Variable("deployment", "Deployment", f"label_values({c.select(series.COST_USD_PER_HOUR)}, deployment)")
        ],
        rows=[
            Row(
                "Spend",
                (
                    Panel(
                        "Fleet cost per hour",
                        "Replicas x GPUs per replica x price per GPU-hour, summed over the selected deployments. "
                        "Loading replicas count: they hold their GPUs.",
                        (_q(f"sum({c.read(series.COST_USD_PER_HOUR, d)})"),),
                        unit="currencyUSD",
                        kind="stat",
                        width=6,
                        height=6,
                    ),
                    Panel(
                        "Per day at this rate",
                        "The cost per hour now, times 24.",
                        (_q(f"sum({c.read(series.COST_USD_PER_HOUR, d)}) * 24"),),
                        unit="currencyUSD",
                        kind="stat",
                        width=6,
                        height=6,
                    ),
                    Panel(
                        "GPUs held",
                        "GPUs the selected deployments' replicas hold, by GPU type.",
                        (_q(f"sum by (gpu_type) ({c.read(series.COST_GPUS, d)})", "{{gpu_type}}"),),
                        kind="stat",
                        width=6,
                        height=6,
                    ),
                    Panel(
                        "Power at full load",
                        "Datasheet board power of those GPUs (kW): what they draw flat out, not a measurement.",
                        (_q(f"sum({c.read(series.COST_POWER_WATTS, d)}) / 1000"),),
                        unit="kwatt",
                        kind="stat",
                        width=6,
                        height=6,
                    ),
                ),
            ),
            Row(
                "By deployment",
                (
                    Panel(
                        "Cost per hour",
                        "Dollars per hour per deployment and GPU type. A deployment whose GPU type is unknown is "
                        "absent (its `problem` in GET /v1/cost says why).",
                        (
                            _q(
                                f"sum by (deployment, gpu_type) ({c.read(series.COST_USD_PER_HOUR, d)})",
                                "{{deployment}} {{gpu_type}}",
                            ),
                        ),
                        unit="currencyUSD",
                        min=0,
                    ),
                    Panel(
                        "Cost per million output tokens",
                        "Cost per hour over output tokens generated per hour (the engines' counters). Rises when "
                        "replicas idle; absent while nothing is generated.",
                        (_q(c.read(series.COST_USD_PER_MILLION_TOKENS, d), "{{deployment}} {{gpu_type}}"),),
                        unit="currencyUSD",
                        min=0,
                    ),
                ),
            ),
            Row(
                "GPU type (advisory)",
                (
                    Panel(
                        "Current demand on each profiled GPU type",
                        "Dollars per hour to serve the deployment's current requests/s and token mix on each GPU "
                        "type the simulator has a calibrated profile of, at the planner's target utilisation; "
                        "meets_slo=false where the mean request misses the TTFT SLO or does not fit. kvpilot "
                        "never changes GPU types: GET /v1/deployments/{ns}/{name} says which one it advises.",
                        (
                            _q(
                                c.read(series.COST_OPTION_USD_PER_HOUR, d),
                                "{{deployment}} {{gpu_type}} meets_slo={{meets_slo}}",
                            ),
                        ),
                        unit="currencyUSD",
                        kind="table",
                        width=24,
                    ),
                ),
            ),
        ],
    )


DASHBOARDS = {
    "fleet-overview": fleet_overview,
    "deployment-detail": deployment_detail,
    "gpu-health": gpu_health,
    "kvpilot-self": kvpilot_self,
    "cost": cost,
}
