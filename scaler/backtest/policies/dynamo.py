"""`dynamo`: NVIDIA Dynamo planner, throughput (SLA) mode, with its default ARIMA load predictor.

Source: ai-dynamo/dynamo `components/src/dynamo/planner/` (planner_config.py defaults:
`throughput_adjustment_interval_seconds=180`, `load_predictor="arima"`, `min_workers=1`, load-based scaling off;
utils/load_predictor.py: one predictor each for the interval's request count, input length and output length,
leading idle zeros skipped, last value until 5 points): every 180 s predict the next interval, then
replicas = max(ceil(predicted_rps / engine_rps), min_workers), where engine_rps is what one engine sustains
within the TTFT SLA at the predicted input/output lengths. engine_rps comes from the same simulator profiling
kvpilot gets (Context.capacity_rps at the trace's mix, scaled by the predicted mix's token cost), so the
correction factor Dynamo applies for profiling error is 1 here.
"""

from __future__ import annotations

from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, ForecastPoint, Policy, ceil_div
from scaler.forecast import Forecaster, make

ADJUSTMENT_INTERVAL_S = 180.0
OUTPUT_WEIGHT = 4.0  # same token-cost model as scaler.capacity's default


class Dynamo(Policy):
    name = "dynamo"
    interval_s = ADJUSTMENT_INTERVAL_S

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.num_req: Forecaster = make("arima", order="auto", min_points=5, refit_every=10, window=500)
        self.isl: Forecaster = make("arima", order="auto", min_points=5, refit_every=10, window=500)
        self.osl: Forecaster = make("arima", order="auto", min_points=5, refit_every=10, window=500)
        self._last: tuple[float, float, float, float] | None = None  # arrivals, finished, prompt, generation
        self._seen_nonzero = False

    def _cost(self, isl: float, osl: float) -> float:
        return max(isl + OUTPUT_WEIGHT * osl, 1e-9)

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        current = (obs.arrivals_total, obs.finished_total, obs.prompt_tokens_total, obs.generation_tokens_total)
        if self._last is not None:
            a0, f0, p0, g0 = self._last
            n = obs.arrivals_total - a0
            finished = obs.finished_total - f0
            if n > 0:
                self._seen_nonzero = True
            if self._seen_nonzero:
                self.num_req.observe(now, n)
                if finished > 0:
                    self.isl.observe(now, max(obs.prompt_tokens_total - p0, 0.0) / finished)
                    self.osl.observe(now, max(obs.generation_tokens_total - g0, 0.0) / finished)
        self._last = current
        if not self._seen_nonzero:
            return self.ctx.clamp(obs.current)
        fc = self.num_req.predict(self.interval_s)
        rps = fc.point / self.interval_s
        self.forecasts.append(ForecastPoint(now, self.interval_s, rps, fc.upper / self.interval_s))
        isl = self.isl.predict(self.interval_s).point if self.isl.values else 0.0
        osl = self.osl.predict(self.interval_s).point if self.osl.values else 0.0
        if isl <= 0 and osl <= 0:  # nothing finished yet: the profiled mix
            isl, osl = self.ctx.mean_prompt_tokens, self.ctx.mean_output_tokens
        ref = self._cost(self.ctx.mean_prompt_tokens, self.ctx.mean_output_tokens)
        engine_rps = self.ctx.capacity_rps * ref / self._cost(isl, osl)
        return self.ctx.clamp(max(ceil_div(rps, engine_rps), 1))
