"""bench/kv_fit.py: the fitted reading's labels, threshold and written coefficients."""

from __future__ import annotations

import math

import pytest

from detectors import kv_exhaustion, kv_fitted
from tests.helpers.bench import load_bench


def _reading(usage: float, rise: float) -> kv_exhaustion.KvReading:
    tte = None if rise <= 0 else (0.98 - usage) / (rise / 60.0)
    return kv_exhaustion.KvReading(
        usage=usage, peak_usage=usage, slope_per_s=rise / 60.0, time_to_exhaustion_s=tte,
        confirm_time_to_exhaustion_s=tte, requests_waiting=0.0, requests_running=10.0, preemptions_rate=0.0,
        in_flight_growth=0.1 * rise, arrival_rate=1.0 + 4.0 * usage, load=usage, load_ahead=usage + rise,
        demand=kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=10.0 * usage, horizon_s=155.0),
        demand_rise=rise, arrivals_rise=rise,
    )  # fmt: skip


def _episodes(kv_fit: object, n: int = 8) -> list[object]:
    """n ramps that preempt at 400 s (two replicas climbing from 30 %) and n flat pools at 30-65 % that never do;
    every other quiet pool wobbles upward for a minute, as a plateau reaching its level does."""
    out = []
    for k in range(n):
        for preempting in (True, False):
            readings = []
            for i in range(1, 80):
                t = 5.0 * i
                if preempting:
                    rise = 0.1 + 0.01 * k
                    usage = min(0.97, 0.3 + rise * t / 60.0 * 0.5)
                else:
                    rise = 0.12 if k % 2 and 200 <= t < 260 else 0.0
                    usage = 0.3 + 0.05 * k
                for replica in ("a", "b"):
                    readings.append(kv_fit.Reading(t, replica, _reading(usage, rise)))
            first = 400.0 if preempting else None
            episode = kv_fit.Episode("azure_conv", "ramp" if preempting else "plateau", 1.3, k, [], first, 1.0, 0.5)
            out.append(kv_fit.Recorded(episode, readings, None))
    return out


def test_labels_are_the_horizon_before_the_first_preemption() -> None:
    kv_fit = load_bench("kv_fit")
    ramp, quiet = _episodes(kv_fit, 1)
    assert kv_fit._label(quiet, 50.0) == 0
    assert kv_fit._label(ramp, 400.0 - 185.0) is None  # further ahead than the horizon: neither class
    assert kv_fit._label(ramp, 400.0 - 180.0) == 1
    assert kv_fit._label(ramp, 395.0) == 1
    assert kv_fit._label(ramp, 400.0) is None  # at the preemption: the critical rules' part


def test_the_threshold_opens_like_the_hysteresis_and_keeps_the_quiet_target() -> None:
    kv_fit = load_bench("kv_fit")
    recorded = _episodes(kv_fit)
    fit = kv_fit.fit(recorded, quiet_target=0.25)
    with kv_fit.coefficients(fit):
        warned = {id(r): kv_fit.first_warning(r, kv_fit.fitted_judge) for r in recorded}
        # reach(): the highest threshold that opens in time, agreeing with first_warning at the chosen one
        for rec in recorded:
            first = rec.episode.first_preempt_s
            tw = warned[id(rec)]
            in_time = tw is not None and (first is None or first - tw >= kv_fit.LEAD_S)
            assert (kv_fit.reach(rec) >= fit.threshold) == in_time
    quiet = [r for r in recorded if not r.episode.preempting]
    assert sum(warned[id(r)] is not None for r in quiet) <= 0.25 * len(quiet)
    assert sum(warned[id(r)] is not None for r in recorded if r.episode.preempting) == 8


def test_the_fit_is_deterministic_and_its_file_is_what_the_script_writes() -> None:
    kv_fit = load_bench("kv_fit")
    a = kv_fit.render(kv_fit.fit(_episodes(kv_fit)), "cmd", (1, 2))
    b = kv_fit.render(kv_fit.fit(_episodes(kv_fit)), "cmd", (1, 2))
    assert a == b
    namespace: dict[str, object] = {}
    exec(compile(a, "kv_fitted", "exec"), namespace)
    assert namespace["SEEDS"] == (1, 2)
    assert list(namespace["COEFFICIENTS"]) == list(kv_fitted.COEFFICIENTS)  # type: ignore[call-overload]
    assert 0.0 < namespace["THRESHOLD"] < 1.0  # type: ignore[operator]


def test_the_committed_coefficients_are_the_scripts_rendering() -> None:
    # detectors/kv_fitted.py is written by bench/kv_fit.py --write and not edited by hand: rendering its constants
    # gives the file back byte for byte.
    kv_fit = load_bench("kv_fit")
    committed = kv_fit.Fit(kv_fitted.INTERCEPT, dict(kv_fitted.COEFFICIENTS), kv_fitted.THRESHOLD)
    assert kv_fit.render(committed, kv_fitted.COMMAND, kv_fitted.SEEDS) == kv_fit.OUT.read_text()
    assert all(math.isfinite(v) for v in kv_fitted.COEFFICIENTS.values())
    assert kv_fitted.SEEDS  # fitted on named seeds
    assert not set(kv_fitted.SEEDS) & {17, 18}  # never on the reporting seeds


@pytest.mark.parametrize("h", [0.0, 0.5, 1.0])
def test_coefficients_are_restored(h: float) -> None:
    kv_fit = load_bench("kv_fit")
    before = kv_fitted.INTERCEPT, dict(kv_fitted.COEFFICIENTS), kv_fitted.THRESHOLD
    with kv_fit.coefficients(kv_fit.Fit(1.0, dict.fromkeys(kv_fitted.COEFFICIENTS, h), h)):
        assert h == kv_fitted.THRESHOLD
    assert (kv_fitted.INTERCEPT, dict(kv_fitted.COEFFICIENTS), kv_fitted.THRESHOLD) == before
