"""prefix_cache_miss: fires when routing spreads shared prefixes, silent when traffic stops sharing them."""

from __future__ import annotations

import pytest

from detectors import prefix_cache_miss
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import TICK_S, drive, replica

QUERIES_PER_TICK = 5000.0  # tokens: 1000 tokens/s per replica, above min_queries_rate
BASELINE_TICKS = 120  # 10 minutes of baseline
AFTER_TICKS = 48  # 4 minutes after the change (60 s rate window + 90 s settle, with margin)


def _run(before: list[float], after: list[float], after_ticks: int = AFTER_TICKS):
    """Per-replica hit ratios before and after a change at BASELINE_TICKS; a replica list that grows is a scale-out."""
    hits: dict[str, float] = {}
    queries: dict[str, float] = {}

    def tick(i: int, t: float):
        ratios = before if i < BASELINE_TICKS else after
        out = []
        for k, r in enumerate(ratios):
            name = f"r{k}"
            queries[name] = queries.get(name, 0.0) + QUERIES_PER_TICK
            hits[name] = hits.get(name, 0.0) + QUERIES_PER_TICK * r
            out.append(replica(name, t, prefix_queries=queries[name], prefix_hits=hits[name]))
        return out, []

    n = BASELINE_TICKS + after_ticks
    return drive(tick, n), (n - 1) * TICK_S


CASES = [
    # the router lost affinity: every replica's ratio fell together from 0.8 to 0.35 -> fire, pattern "spread"
    ([0.8, 0.8, 0.8], [0.35, 0.3, 0.4], "spread"),
    # a scale-out from 2 to 4 replicas spread the prefixes: fire, pattern "scale_out"
    ([0.8, 0.8], [0.4, 0.4, 0.45, 0.4], "scale_out"),
    # the traffic stopped sharing prefixes: the ratio fell to ~0 everywhere -> silent (routing cannot help)
    ([0.8, 0.8, 0.8], [0.01, 0.02, 0.0], None),
    # a small dip within the tolerated relative drop -> silent
    ([0.8, 0.8, 0.8], [0.6, 0.65, 0.6], None),
    # a deployment that never had a useful prefix cache -> silent whatever happens
    ([0.1, 0.1, 0.1], [0.03, 0.06, 0.06], None),
    # one replica's cache fell while the others held: not a routing pattern -> silent here
    ([0.8, 0.8, 0.8], [0.1, 0.8, 0.8], None),
]


@pytest.mark.parametrize(("before", "after", "pattern"), CASES)
def test_prefix_cases(before, after, pattern):
    state, now = _run(before, after)
    found = prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)
    assert [f.evidence["pattern"] for f in found] == ([pattern] if pattern else [])
    for f in found:
        assert f.action == "prefix_aware_routing"
        assert f.subject.deployment == "ml/chat"


def test_no_baseline_no_finding():
    # Without min_baseline_s of history older than the recent window there is no baseline to compare.
    state = drive(lambda i, t: ([replica("r0", t, prefix_queries=1e4 * i, prefix_hits=1e3 * i)], []), 10)
    assert prefix_cache_miss.detect(state, thresholds=DEFAULT, now=45) == []


def test_not_yet_settled_is_silent():
    # 95 s after a routing change the 60 s window has only just left the baseline: too early to call it,
    # while the same run 4 minutes on fires.
    before, after = [0.8, 0.8, 0.8], [0.35, 0.3, 0.4]
    state, now = _run(before, after, after_ticks=19)
    assert prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now) == []
    state, now = _run(before, after)
    assert prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now) != []


def test_the_finding_states_the_fall_and_the_bar():
    state, now = _run([0.8, 0.8, 0.8], [0.4, 0.4, 0.4])
    (f,) = prefix_cache_miss.detect(state, thresholds=DEFAULT, now=now)
    assert f.evidence["drop"] == pytest.approx(0.5, abs=0.01)
    assert f.evidence["drop_threshold"] == pytest.approx(0.4)
    assert "fell from 80% to 40% on all 3 replicas together (down 50%, warns from 40%)" in f.summary
