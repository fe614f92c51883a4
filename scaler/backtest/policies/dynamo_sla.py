"""`dynamo-sla`: NVIDIA Dynamo's planner in its opt-in SLA mode (`optimization_target="sla"`): throughput-based
scaling every 180 s from the next interval's predicted request count, input and output length (ARIMA, as its
`predictors.py` fits it), sized against what one engine sustains within the TTFT SLA.

Sources (repository, path, commit), one per constant below:
- ai-dynamo/dynamo components/src/dynamo/planner/config/defaults.py @ 1ca601557ebf7cf963a3c0a1bcbae45fd2166944:
  `throughput_adjustment_interval = 180` s, `load_predictor = "arima"`, `min_endpoint = 1`,
  `enable_throughput_scaling = True`, `enable_load_scaling = False` (the SLA mode's own defaults).
- ai-dynamo/dynamo components/src/dynamo/planner/core/load/predictors.py @ 260b6ae9412cea46626b25b11407fbebd30e5cb0:
  `BasePredictor` (non-finite readings are 0, leading zeros skipped), `ARIMAPredictor` (last value below 5 points;
  the first value when every point is equal; otherwise `auto_arima` fitted once on all history, and if it selects
  p = q = 0 on raw values, refitted on log1p(y); later points update the fitted model; one step ahead, ≥ 0).

engine_rps comes from the backtest's shared capacity profile (`Context.capacity_rps` at the profiled mix, scaled by
the predicted mix's token cost), so Dynamo's profiling-error correction factor is 1 here. Departures (pmdarima is
not a dependency): the order is chosen once, as auto_arima's is, but by AICc over p, q <= 2 and d <= 1 among the
orders the points can identify (`select_order`); for speed the parameters are then re-estimated every 10 intervals
on the last 500 (pmdarima's `update` re-estimates at each).
"""

from __future__ import annotations

import math

from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, ForecastPoint, Policy, ceil_div
from scaler.forecast.arima import Arima

ADJUSTMENT_INTERVAL_S = 180.0  # defaults.py @ 1ca6015: throughput_adjustment_interval
MIN_ENDPOINT = 1  # defaults.py @ 1ca6015: min_endpoint
MIN_POINTS = 5  # predictors.py @ 260b6ae: ARIMAPredictor minimum_data_points
OUTPUT_WEIGHT = 4.0  # same token-cost model as scaler.capacity's default
REFIT_EVERY = 10
WINDOW = 500


def select_order(y: list[float]) -> tuple[int, int, int]:
    """The (p, d, q) of least AICc over p, q <= 2 and d <= 1, among the orders the points can identify.

    A stand-in for pmdarima's `auto_arima` (not a dependency): the small-sample correction keeps a 5-point first
    fit to at most one coefficient, where statsmodels would otherwise spend minutes on unidentifiable models.
    """
    import warnings

    import numpy as np
    from statsmodels.tsa.arima.model import ARIMA

    arr = np.asarray(y, dtype=float)
    best: tuple[float, tuple[int, int, int]] = (math.inf, (0, 1, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in (0, 1):
            n = len(arr) - d
            for p in (0, 1, 2):
                for q in (0, 1, 2):
                    k = p + q + (1 if d == 0 else 0) + 1  # coefficients, constant, noise variance
                    if n - k - 1 <= 0:
                        continue
                    try:
                        aic = float(ARIMA(arr, order=(p, d, q), trend="c" if d == 0 else "n").fit().aic)
                    except (ValueError, np.linalg.LinAlgError):
                        continue
                    aicc = aic + 2 * k * (k + 1) / (n - k - 1)
                    if math.isfinite(aicc) and aicc < best[0]:
                        best = (aicc, (p, d, q))
    return best[1]


class ArimaLoadPredictor:
    """`ARIMAPredictor` of predictors.py: one series, one point per adjustment interval, predicts the next."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.raw: list[float] = []
        self.log1p = False
        self._model: Arima | None = None
        self._fed = 0
        self._seen_nonzero = False

    def add(self, value: float) -> None:
        value = value if math.isfinite(value) else 0.0
        if value == 0 and not self._seen_nonzero:
            return  # the idle period before the first traffic
        self._seen_nonzero = self._seen_nonzero or value != 0
        self.raw.append(max(0.0, value))

    def _new_model(self, log1p: bool) -> Arima:
        self.log1p, self._fed = log1p, 0
        y = [math.log1p(v) for v in self.raw] if log1p else list(self.raw)
        return Arima(order=select_order(y[-WINDOW:]), window=WINDOW, refit_every=REFIT_EVERY, min_points=MIN_POINTS)

    def _feed(self, model: Arima) -> None:
        for i in range(self._fed, len(self.raw)):
            model.observe(i * self.step_s, math.log1p(self.raw[i]) if self.log1p else self.raw[i])
        self._fed = len(self.raw)

    def predict_next(self) -> float:
        if len(self.raw) < MIN_POINTS:
            return self.raw[-1] if self.raw else 0.0
        if len(set(self.raw)) == 1:
            return self.raw[0]
        if self._model is None:
            self._model = self._new_model(log1p=False)
            p, _, q = self._model.order
            if p == 0 and q == 0:  # collapsed to (0, d, 0): fall back to log1p(y), as predictors.py does
                self._model = self._new_model(log1p=True)
        self._feed(self._model)
        point = self._model.predict(self.step_s).point
        return max(0.0, math.expm1(point) if self.log1p else point)


class DynamoSla(Policy):
    name = "dynamo-sla"
    interval_s = ADJUSTMENT_INTERVAL_S

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.num_req = ArimaLoadPredictor(self.interval_s)
        self.isl = ArimaLoadPredictor(self.interval_s)
        self.osl = ArimaLoadPredictor(self.interval_s)
        self._last: tuple[float, float, float, float] | None = None  # arrivals, finished, prompt, generation

    def _cost(self, isl: float, osl: float) -> float:
        return max(isl + OUTPUT_WEIGHT * osl, 1e-9)

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        current = (obs.arrivals_total, obs.finished_total, obs.prompt_tokens_total, obs.generation_tokens_total)
        if self._last is not None:
            a0, f0, p0, g0 = self._last
            finished = obs.finished_total - f0
            self.num_req.add(obs.arrivals_total - a0)
            if finished > 0:
                self.isl.add(max(obs.prompt_tokens_total - p0, 0.0) / finished)
                self.osl.add(max(obs.generation_tokens_total - g0, 0.0) / finished)
        self._last = current
        if not self.num_req.raw:
            return self.ctx.clamp(obs.current)
        rps = self.num_req.predict_next() / self.interval_s
        self.forecasts.append(ForecastPoint(now, self.interval_s, rps, rps))
        isl = self.isl.predict_next() if self.isl.raw else 0.0
        osl = self.osl.predict_next() if self.osl.raw else 0.0
        if isl <= 0 and osl <= 0:  # nothing finished yet: the profiled mix
            isl, osl = self.ctx.mean_prompt_tokens, self.ctx.mean_output_tokens
        ref = self._cost(self.ctx.mean_prompt_tokens, self.ctx.mean_output_tokens)
        engine_rps = self.ctx.capacity_rps * ref / self._cost(isl, osl)
        return self.ctx.clamp(max(ceil_div(rps, engine_rps), MIN_ENDPOINT))
