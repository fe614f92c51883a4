"""The lost-affinity option's own view of which prefix_cache_miss findings are open (``PrefixBaselines.note``) goes
on after the wall clock steps back (NTP). It took one tick's candidates only when the tick came later than the last
noted, so after a step back of an hour it froze: a finding open there was held (``_held``) for the hour after the
loop's own hysteresis had closed it."""

from __future__ import annotations

from detectors.finding import Finding, Severity, Subject
from detectors.prefix_cache_miss import PrefixBaselines
from detectors.thresholds import DEFAULT

START = 1_700_000_000.0


def test_the_open_findings_follow_the_ticks_after_a_step_back() -> None:
    found = Finding("prefix_cache_miss", Severity.WARNING, Subject(deployment="llm/chat"), START, "hit ratio fell")
    baselines = PrefixBaselines()
    for i in range(3):  # open after 3 bad ticks
        baselines.note([found], DEFAULT.policy, START + 5 * i)
    assert set(baselines.open_findings()) == {"llm/chat"}
    stepped = START + 15 - 3600
    for i in range(12):  # closed after 12 clean ticks, the first an hour "before" the last noted
        baselines.note([], DEFAULT.policy, stepped + 5 * i)
    assert baselines.open_findings() == {}
    baselines.note([found], DEFAULT.policy, stepped + 55)  # the same tick asked again: nothing changes
    assert baselines.open_findings() == {}
