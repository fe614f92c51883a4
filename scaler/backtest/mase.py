"""Forecast error at the scaling horizon, scaled by the last-value forecast's error (MASE < 1: better than
assuming demand stays where it is, which is what every reactive scaler implicitly does)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scaler.forecast import make

STEP_S = 15.0
WINDOW_S = 60.0


def _resample(times: Sequence[float], rates: Sequence[float], step_s: float, window_s: float) -> list[float]:
    """The arrival rate a collector would see every ``step_s``: arrivals over the last ``window_s`` / window."""
    import numpy as np

    if len(times) < 2:
        return list(rates)
    t = np.asarray(times, dtype=float)
    r = np.asarray(rates, dtype=float)
    bin_s = float(t[1] - t[0])
    edges = np.append(t, t[-1] + bin_s)
    cum = np.concatenate([[0.0], np.cumsum(r * bin_s)])  # arrivals up to each edge
    at = np.arange(float(edges[0]) + window_s, edges[-1] + 1e-9, step_s)  # full windows only
    counts = np.interp(at, edges, cum) - np.interp(at - window_s, edges, cum)
    return [float(x) for x in counts / window_s]


def forecast_mase(future_rate: tuple[Sequence[float], Sequence[float]], *, forecaster: str, horizon_s: float) -> float:
    times, rates = future_rate
    series = _resample(times, rates, STEP_S, WINDOW_S)
    step = STEP_S
    k = max(1, round(horizon_s / step))
    model = make(forecaster)
    err_model = err_naive = 0.0
    for i, v in enumerate(series):
        model.observe(i * step, v)
        if i + k < len(series):
            truth = series[i + k]
            err_model += abs(model.predict(horizon_s).point - truth)
            err_naive += abs(v - truth)
    return err_model / err_naive if err_naive > 0 else math.nan
