"""Forecasters of per-deployment demand (arrival rate, queue, token mix), one per file, behind one interface.

`FORECASTERS` maps a name to its class; `make(name, **options)` builds one with its options checked.
"""

from __future__ import annotations

from collections.abc import Callable

from scaler.forecast.arima import Arima
from scaler.forecast.base import Forecast, Forecaster
from scaler.forecast.ensemble import Ensemble
from scaler.forecast.ewma import Ewma
from scaler.forecast.holt import Holt
from scaler.forecast.kalman import Kalman
from scaler.forecast.last_value import LastValue
from scaler.forecast.learned import Learned
from scaler.forecast.linear_trend import LinearTrend
from scaler.forecast.seasonal_naive import SeasonalNaive
from scaler.forecast.window_ramp import WindowRamp

FORECASTERS: dict[str, Callable[..., Forecaster]] = {
    "last_value": LastValue,
    "ewma": Ewma,
    "seasonal_naive": SeasonalNaive,
    "holt": Holt,
    "arima": Arima,
    "kalman": Kalman,
    "sklearn": Learned,
    "linear_trend": LinearTrend,
    "window_ramp": WindowRamp,
    "auto": Ensemble,
}


def make(name: str, **options: float | int | str) -> Forecaster:
    """Build the forecaster called ``name``; unknown names and options fail with what was asked for."""
    try:
        factory = FORECASTERS[name]
    except KeyError:
        raise ValueError(f"unknown forecaster {name!r}; known: {', '.join(sorted(FORECASTERS))}") from None
    try:
        return factory(**options)
    except TypeError as exc:
        raise ValueError(f"forecaster {name!r}: {exc}") from None


__all__ = ["FORECASTERS", "Forecast", "Forecaster", "make"]
