import pytest

from detectors.finding import Finding, Severity, Subject
from detectors.hysteresis import Hysteresis
from detectors.thresholds import HysteresisPolicy


def _f(
    kind: str = "stuck_gpu", node: str = "n1", severity: Severity = Severity.CRITICAL, since: float = 0.0
) -> Finding:
    return Finding(kind=kind, severity=severity, subject=Subject(node=node), since=since, summary="s")


def _policy(kind: str) -> HysteresisPolicy:
    return HysteresisPolicy(open_after_ticks=2, close_after_ticks=3)


CASES = [
    # a single bad tick never opens (one noisy scrape neither pages nor drains)
    ("B....", [False] * 5),
    # two consecutive bad ticks open on the second
    ("BB...", [False, True, True, True, False]),
    # bad ticks that are not consecutive never open
    ("B.B.B.B", [False] * 7),
    # an open finding survives two clean ticks and closes on the third
    ("BB..B...", [False, True, True, True, True, True, True, False]),
]


@pytest.mark.parametrize(("pattern", "expected_open"), CASES)
def test_open_after_n_bad_close_after_m_clean(pattern, expected_open):
    h = Hysteresis(_policy)
    got = []
    for i, c in enumerate(pattern):
        tr = h.update([_f(since=float(i))] if c == "B" else [], now=float(i))
        got.append(bool(tr.active))
    assert got == expected_open


def test_since_is_the_first_bad_tick_and_transitions_are_reported_once():
    # `since` is when the streak began, not when it opened; opened/closed are reported on their tick only.
    h = Hysteresis(_policy)
    assert h.update([_f(since=10)], now=10).opened == []
    tr = h.update([_f(since=15)], now=15)
    assert [f.since for f in tr.opened] == [10]
    assert h.update([_f(since=20)], now=20).opened == []
    for now in (25, 30):
        assert h.update([], now=now).closed == []
    closed = h.update([], now=35).closed
    assert [f.since for f in closed] == [10]


def test_restore_keeps_an_open_finding_open_after_restart():
    # A finding persisted as open is still open after a restart and keeps its identity and since.
    h = Hysteresis(_policy)
    before = _f(since=100)
    h.restore([before])
    tr = h.update([_f(since=500)], now=500)
    assert [(f.id, f.since) for f in tr.active] == [(before.id, 100)]
    assert tr.opened == []  # not re-announced


def test_most_severe_duplicate_wins_within_a_tick():
    # Two candidates with one identity in one tick: the critical one is kept.
    h = Hysteresis(lambda k: HysteresisPolicy(open_after_ticks=1, close_after_ticks=1))
    tr = h.update([_f(severity=Severity.WARNING), _f(severity=Severity.CRITICAL), _f(severity=Severity.INFO)], now=0)
    assert [f.severity for f in tr.active] == [Severity.CRITICAL]


def test_policy_is_per_kind():
    # A kind with open_after 1 opens at once while another kind waits.
    pol = {"fast": HysteresisPolicy(open_after_ticks=1), "slow": HysteresisPolicy(open_after_ticks=3)}
    h = Hysteresis(pol.__getitem__)
    tr = h.update([_f(kind="fast"), _f(kind="slow")], now=0)
    assert [f.kind for f in tr.active] == ["fast"]
