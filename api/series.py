"""The catalogue of kvpilot's own Prometheus series: names, types, labels and help, as constants.

Alert rules (``alerts/``), dashboards (``dashboards/``) and the exporter (``api.exposition``) all import these,
so a renamed series breaks the build instead of a dashboard. Labels are bounded by the fleet (deployments,
replicas, nodes, GPUs, targets) and by small enums (kind, severity, state, reason, quantile); never request ids,
URLs with query strings or free text.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    type: str  # gauge | counter | histogram
    labels: tuple[str, ...]
    help: str


def _g(name: str, labels: tuple[str, ...], help_: str) -> Series:
    return Series(name, "gauge", labels, help_)


DEP = ("deployment",)
REPLICA = ("deployment", "replica", "engine")
GPU = ("node", "gpu")

REPLICA_REQUESTS_WAITING = _g("kvpilot_replica_requests_waiting", REPLICA, "Requests queued in one replica.")
REPLICA_REQUESTS_RUNNING = _g("kvpilot_replica_requests_running", REPLICA, "Requests in one replica's batch.")
REPLICA_KV_USAGE = _g("kvpilot_replica_kv_usage_ratio", REPLICA, "KV-cache usage of one replica, 0..1.")
DEPLOYMENT_REQUESTS_WAITING = _g("kvpilot_deployment_requests_waiting", DEP, "Requests queued, summed over replicas.")
DEPLOYMENT_REQUESTS_RUNNING = _g("kvpilot_deployment_requests_running", DEP, "Requests running, summed.")
DEPLOYMENT_KV_USAGE = _g("kvpilot_deployment_kv_usage_ratio", DEP, "Mean KV-cache usage over ready replicas.")
DEPLOYMENT_KV_USAGE_MAX = _g("kvpilot_deployment_kv_usage_max_ratio", DEP, "Highest KV-cache usage of any replica.")
DEPLOYMENT_ARRIVAL_RATE = _g("kvpilot_deployment_arrival_rate", DEP, "Request arrivals per second (windowed).")
DEPLOYMENT_TOKENS_RATE = _g(
    "kvpilot_deployment_tokens_rate", ("deployment", "direction"), "Tokens per second, direction=prompt|generation."
)
PREFIX_CACHE_HIT_RATIO = _g("kvpilot_prefix_cache_hit_ratio", DEP, "Windowed prefix-cache hit ratio (tokens).")
KV_TIME_TO_EXHAUSTION = _g(
    "kvpilot_kv_time_to_exhaustion_seconds",
    ("deployment", "replica"),
    "Projected seconds until a replica's KV cache is full (only while filling).",
)
DEPLOYMENT_POOL = _g(
    "kvpilot_deployment_pool_info",
    ("deployment", "pool"),
    "1 per deployment pool: pool=prefill|decode|both (co-located); join on deployment to group by pool.",
)
DEPLOYMENT_REPLICAS = _g("kvpilot_deployment_replicas", ("deployment", "state"), "Replicas by state=ready|loading.")
DESIRED_REPLICAS = _g("kvpilot_desired_replicas", DEP, "Replicas the scaler wants now.")
WARM_POOL_REPLICAS = _g("kvpilot_warm_pool_replicas", DEP, "Extra replicas to load now for demand at the horizon.")
PREDICTIVE_REPLICAS = _g("kvpilot_predictive_replicas", DEP, "Replicas the forecast alone asks for.")
REACTIVE_REPLICAS = _g("kvpilot_reactive_replicas", DEP, "Replicas the current load alone asks for.")
FORECAST_ARRIVAL_RATE = _g("kvpilot_forecast_arrival_rate", DEP, "Forecast arrivals per second at the horizon.")
PLANNER_ARRIVAL_RATE = _g(
    "kvpilot_planner_arrival_rate",
    DEP,
    "Arrivals per second the planner read this tick: the gateway's (collector.arrivals) where it had one, else the "
    "engines' estimate (kvpilot_deployment_arrival_rate).",
)
FORECAST_ARRIVAL_RATE_UPPER = _g(
    "kvpilot_forecast_arrival_rate_upper", DEP, "Upper bound of the forecast arrival rate at the horizon."
)
FORECAST_ERROR_MASE = _g(
    "kvpilot_forecast_error_mase", ("deployment", "model"), "Live forecast error (mean absolute scaled error)."
)
TTFT_SECONDS = _g("kvpilot_ttft_seconds", ("deployment", "quantile"), "Time to first token over the rate window.")
ITL_SECONDS = _g("kvpilot_itl_seconds", ("deployment", "quantile"), "Inter-token latency over the rate window.")
FINDING_ACTIVE = _g(
    "kvpilot_finding_active",
    ("kind", "severity", "deployment", "replica", "node", "gpu"),
    "1 for every open finding.",
)
GPU_UTILISATION = _g("kvpilot_gpu_utilisation_ratio", GPU, "GPU utilisation, 0..1.")
GPU_MEMORY_USED = _g(
    "kvpilot_gpu_memory_used_bytes", GPU, "Framebuffer memory in use on a GPU, from whichever GPU source reads it."
)
GPU_MEMORY_FREE = _g("kvpilot_gpu_memory_free_bytes", GPU, "Framebuffer memory free on a GPU.")
GPU_LAST_XID = _g("kvpilot_gpu_last_xid", ("node", "gpu", "xid_class"), "Last XID error code a GPU reported.")
NODE_DRAIN_STATE = _g("kvpilot_node_drain_state", ("node", "state"), "1 for a node's current drain action state.")
SCRAPE_UP = _g("kvpilot_scrape_up", ("target",), "1 when the latest scrape of a target succeeded.")
SCRAPE_DURATION = _g("kvpilot_scrape_duration_seconds", ("target",), "Duration of the latest scrape of a target.")
SCRAPE_FAILURES = Series("kvpilot_scrape_failures_total", "counter", (), "Failed scrapes over all targets.")
SCRAPE_PARTIAL_PAGES = Series(
    "kvpilot_scrape_partial_pages_total",
    "counter",
    ("target",),
    "Pages of a target read in part: a bad sample line cost its family, the rest was read (/v1/targets' last_error).",
)
LOOP_TICK_SECONDS = Series("kvpilot_loop_tick_seconds", "histogram", (), "Wall time of one control-loop tick.")
LOOP_OVERRUNS = Series("kvpilot_loop_overruns_total", "counter", (), "Ticks that took longer than the interval.")
STORE_UP = _g("kvpilot_store_up", (), "1 when the latest write to the store succeeded.")
STORE_PENDING_WRITES = _g("kvpilot_store_pending_writes", (), "Writes buffered while the store is unreachable.")
STORE_DROPPED_WRITES = Series(
    "kvpilot_store_dropped_writes_total",
    "counter",
    (),
    "Writes that never reached the store: dropped from a full buffer, or refused as bad rows.",
)
DECISIONS = Series("kvpilot_decisions_total", "counter", ("deployment", "reason"), "Scaling decisions by reason.")
STAGE_ERRORS = Series("kvpilot_loop_stage_errors_total", "counter", ("stage",), "Loop stages that raised.")
DRAIN_REFUSALS = Series(
    "kvpilot_drain_refusals_total",
    "counter",
    ("node", "reason"),
    "Drains the safety rails refused, one per node per tick, by rail (the log says it once per node and rail).",
)
API_AUTH_REFUSALS = Series(
    "kvpilot_api_auth_refusals_total",
    "counter",
    ("status",),
    "API requests refused: 401 (no or unknown token) or 403 (read token on a change); each is logged with client.",
)
# The HTTP API's connections (kvpilot.runtime.http_server): api.max_connections and api.header_timeout_s at work.
API_CONNECTIONS_OPEN = _g(
    "kvpilot_api_connections_open", (), "HTTP connections open now (api.max_connections bounds them)."
)
API_CONNECTIONS_REFUSED = Series(
    "kvpilot_api_connections_refused_total",
    "counter",
    (),
    "HTTP connections answered 503 and closed unread: api.max_connections were already open.",
)
API_REQUEST_HEAD_TIMEOUTS = Series(
    "kvpilot_api_request_head_timeouts_total",
    "counter",
    (),
    "HTTP connections answered 408 and closed: a request head (or the unread rest of a body answered early) had "
    "not all arrived within api.header_timeout_s.",
)
API_SEND_TIMEOUTS = Series(
    "kvpilot_api_send_timeouts_total",
    "counter",
    (),
    "HTTP connections closed because the client took none of its answer for 60 s (an answer larger than the socket's "
    "buffers, to a client that does not read it).",
)
# API changes refused at SQLite's writer gate (store.writers); only on SQLite: PostgreSQL's writers are not queued.
API_WRITES_REFUSED = Series(
    "kvpilot_api_writes_refused_total",
    "counter",
    ("reason",),
    "API changes answered 503 with Retry-After before SQLite's one writer took them (nothing applied), by reason: "
    "queue_full (as many as may wait already did), pace (the changes queued ahead would clearly outlast the "
    "request's deadline), deadline (queued, and the deadline came first). Only on SQLite.",
)
# Every value the `stage` label takes (kvpilot.runtime.loop and kvpilot.runtime.service).
LOOP_STAGES = (
    "discover", "collect", "observe", "arrivals", "detect", "decide", "publish", "kv_projection", "drains", "actuate",
    "cost",
)  # fmt: skip
LEADER = _g("kvpilot_leader", (), "1 while this replica holds the Lease and may actuate.")
STORE_SQLITE = _g(
    "kvpilot_store_sqlite",
    (),
    "1 when the store is SQLite, a file no other pod shares (two or more such pods: KvpilotStoreNotShared).",
)
# keda.serve_from: process (scaler/keda/process.py); absent when KEDA is served in the loop's process.
KEDA_SERVER_UP = _g("kvpilot_keda_server_up", (), "1 while KEDA's own server process serves.")
KEDA_SERVER_RESTARTS = Series(
    "kvpilot_keda_server_restarts_total", "counter", (), "Restarts of KEDA's server process after it exited."
)
# collector.arrivals from a Prometheus API with max_sample_age_s (kvpilot.runtime.arrivals); absent otherwise.
ARRIVALS_SAMPLE_AGE_READ = _g(
    "kvpilot_arrivals_sample_age_read",
    (),
    "1 while the gateway's counter is asked with its samples' times (a series not updated for "
    "collector.arrivals.max_sample_age_s is left out), 0 while the server refuses that query and it is asked alone "
    "(tried again every 10 minutes).",
)
ARRIVALS_CLOCK_OFFSET = _g(
    "kvpilot_arrivals_clock_offset_seconds",
    (),
    "How far the Prometheus API's clock (its answers' Date header) reads ahead of kvpilot's, as allowed for in the "
    "samples' age; 0 within 2 s or when not known.",
)
# Sharding (kvpilot.runtime.taken_answers); absent without sharding.
KEDA_STORED_ANSWERS = Series(
    "kvpilot_keda_stored_answers_total",
    "counter",
    (),
    "KEDA calls for a shard this instance just took over answered from the decisions its previous holder stored, "
    "before this instance's tick decided them (only with sharding).",
)
# collector.discovery.static_file (collector.discovery.static); absent for other discovery kinds.
TARGETS_FILE_READS_KEPT = Series(
    "kvpilot_targets_file_reads_kept_total",
    "counter",
    (),
    "Reads of the targets file that kept the previous targets: the file empty, cut where it does not parse, or no "
    "regular file (only with collector.discovery.static_file).",
)
TARGETS_FILE_UNREAD = _g(
    "kvpilot_targets_file_unread",
    (),
    "1 while the targets file holds something other than the targets in use that could not be read (empty, "
    "unparsable, no regular file), 0 once it reads (only with collector.discovery.static_file).",
)
# Cost (scaler.cost, docs/cost.md). `pool` is empty for a whole deployment (set for prefill/decode pools).
COST = ("deployment", "pool", "gpu_type")
COST_USD_PER_HOUR = _g("kvpilot_cost_usd_per_hour", COST, "Dollars per hour: replicas x GPUs per replica x GPU price.")
COST_USD_PER_MILLION_TOKENS = _g(
    "kvpilot_cost_usd_per_million_tokens", COST, "Dollars per million output tokens at the current generation rate."
)
COST_GPUS = _g("kvpilot_cost_gpus", COST, "GPUs the deployment's replicas hold (loading replicas included).")
COST_POWER_WATTS = _g("kvpilot_cost_power_watts", COST, "Board power of those GPUs at full load (datasheet).")
COST_OPTION_USD_PER_HOUR = _g(
    "kvpilot_cost_option_usd_per_hour",
    ("deployment", "pool", "gpu_type", "meets_slo"),
    "Dollars per hour to serve the current demand on each profiled GPU type (advisory; docs/cost.md).",
)

ALL: tuple[Series, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Series))

TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TTFT_QUANTILES = (0.5, 0.9, 0.99)
