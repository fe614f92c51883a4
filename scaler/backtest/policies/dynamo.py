"""`dynamo`: NVIDIA Dynamo's planner as it deploys by default: `optimization_target="throughput"`, which turns
load-based scaling on and throughput (predictive SLA) scaling off, no profiling and no load predictor. Every 5 s it
reads each engine's forward-pass metrics and steps the worker count by one on static KV thresholds.

Sources (repository, path, commit), one per constant below:
- ai-dynamo/dynamo components/src/dynamo/planner/config/planner_config.py @ 1366ebb2f4c735f3c109a44783a973b7a3f0c816:
  `optimization_target` defaults to "throughput"; any target other than "sla" forces `enable_load_scaling=True`,
  `enable_throughput_scaling=False` ("easy mode", no SLA targets or profiling needed).
- ai-dynamo/dynamo components/src/dynamo/planner/config/defaults.py @ 1ca601557ebf7cf963a3c0a1bcbae45fd2166944:
  `load_adjustment_interval = 5` s, `min_endpoint = 1`. (`max_gpu_budget = 8` is not modelled: every policy gets
  the backtest's one replica ceiling, `Context.max_replicas`.)
- ai-dynamo/dynamo components/src/dynamo/planner/core/load_scaling.py @ 0c6da1ec762c848fe31cef804e70d171eef4d622:
  `_agg_easy_decision` (an aggregated deployment, as the simulator's replicas are): per engine
  util = (scheduled decode KV + queued decode KV + queued prefill tokens) / max_kv_tokens; one more worker if any
  engine is above `_DECODE_THROUGHPUT_SCALE_UP = 1.0`, one fewer (not below `min_endpoint`) if every engine is below
  `_DECODE_THROUGHPUT_SCALE_DOWN = 0.6`; nothing while a scaling is in progress or the engines reporting metrics
  are not all the workers.

What the simulator cannot show exactly: the queued prefill tokens per engine (the forward-pass metrics carry them)
are taken as its waiting requests times the mean prompt length finished over the last minute (the trace's mean
before anything finished); queued decode KV (preempted sequences) is not exposed and counts as 0.
"""

from __future__ import annotations

from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, Policy

LOAD_ADJUSTMENT_INTERVAL_S = 5.0  # defaults.py @ 1ca6015: load_adjustment_interval
MIN_ENDPOINT = 1  # defaults.py @ 1ca6015: min_endpoint
SCALE_UP_UTIL = 1.0  # load_scaling.py @ 0c6da1e: _DECODE_THROUGHPUT_SCALE_UP (util > 100 %)
SCALE_DOWN_UTIL = 0.6  # load_scaling.py @ 0c6da1e: _DECODE_THROUGHPUT_SCALE_DOWN (util < 60 %)
PROMPT_WINDOW_S = 60.0


def agg_easy_decision(utils: list[float], workers: int) -> int | None:
    """`_agg_easy_decision`: the new worker count, or None for no change."""
    if not utils or workers == 0:
        return None
    if any(u > SCALE_UP_UTIL for u in utils):
        return workers + 1
    if workers > 1 and all(u < SCALE_DOWN_UTIL for u in utils):
        return max(workers - 1, MIN_ENDPOINT)
    return None


def recent_prompt_tokens(history: History, fallback: float) -> float:
    """Mean prompt length of the requests finished over the last minute (the engines' prompt-length histogram)."""
    window = history.window(PROMPT_WINDOW_S)
    finished = window[-1].finished_total - window[0].finished_total
    if len(window) < 2 or finished <= 0:
        return fallback
    return max(window[-1].prompt_tokens_total - window[0].prompt_tokens_total, 0.0) / finished


class Dynamo(Policy):
    name = "dynamo"
    interval_s = LOAD_ADJUSTMENT_INTERVAL_S

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        workers = obs.current
        engines = obs.ready
        # `_scaling_in_progress` / `_reconcile_fpm_worker_count`: observe only until every worker reports.
        if len(engines) != workers:
            return self.ctx.clamp(workers)
        prompt = recent_prompt_tokens(history, self.ctx.mean_prompt_tokens)
        utils = [
            (r.kv_usage * r.kv_capacity_tokens + r.requests_waiting * prompt) / r.kv_capacity_tokens
            for r in engines
            if r.kv_capacity_tokens > 0
        ]
        desired = agg_easy_decision(utils, workers)
        return self.ctx.clamp(workers if desired is None else max(desired, MIN_ENDPOINT))
