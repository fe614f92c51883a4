import pytest

from detectors.thresholds import (
    BurnWindow,
    GpuThresholds,
    HysteresisPolicy,
    KvThresholds,
    PrefixThresholds,
    Thresholds,
    TtftSlo,
)

BAD = [
    # a usage fraction above 1 is refused, naming the field
    (lambda: KvThresholds(near_full=1.5), "KvThresholds.near_full"),
    # the projection must start below "near full", or it would never warn first
    (lambda: KvThresholds(project_from_usage=0.95, near_full=0.9), "project_from_usage < near_full"),
    # NaN is not a threshold
    (lambda: PrefixThresholds(relative_drop=float("nan")), "PrefixThresholds.relative_drop"),
    # idle must be below busy, otherwise a GPU could be both
    (lambda: GpuThresholds(idle_utilisation=0.9, busy_utilisation=0.5), "idle_utilisation"),
    # a zero error budget cannot burn
    (lambda: TtftSlo(objective=1.0), "TtftSlo.objective"),
    # a short window longer than the long one is a typo
    (lambda: BurnWindow(long_s=60, short_s=300, factor=14.4, severity="critical"), "short_s"),
    # severity is a closed set
    (lambda: BurnWindow(long_s=600, short_s=60, factor=2, severity="page"), "severity"),
    # opening after 0 ticks would make hysteresis meaningless
    (lambda: HysteresisPolicy(open_after_ticks=0), "open_after_ticks"),
    # a bool is not a count
    (lambda: HysteresisPolicy(close_after_ticks=True), "close_after_ticks"),
    # the tick must be positive: alert `for` durations derive from it
    (lambda: Thresholds(tick_s=0), "tick_s"),
]


@pytest.mark.parametrize(("build", "message"), BAD)
def test_bad_configuration_fails_fast_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_alert_for_duration_derives_from_hysteresis_and_tick():
    # The alert `for` equals the detectors' opening delay, so alert and finding agree on when to fire.
    th = Thresholds(tick_s=10.0, hysteresis={"stuck_gpu": HysteresisPolicy(open_after_ticks=3)})
    assert th.for_seconds("stuck_gpu") == 30.0
    assert th.for_seconds("unknown_kind") == HysteresisPolicy().open_after_ticks * 10.0
