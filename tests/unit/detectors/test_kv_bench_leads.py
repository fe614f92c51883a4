"""bench/detectors.py's KV score at several leads: every preempting episode, the sudden ones included, counted by how
long before its first preemption the first warning opened."""

from __future__ import annotations

import math

import pytest

from tests.helpers.bench import load_bench


def _episode(family: str, first_preempt_s: float | None) -> object:
    kv_episodes = load_bench("kv_episodes")
    return kv_episodes.Episode("azure_conv", family, 1.3, 0, [], first_preempt_s, 1.0, 0.8)


# (family, first preemption, first warning, its lead as scored: -inf where nothing opened before the preemption)
CASES = [
    ("ramp", 400.0, 330.0, 70.0),  # a minute ahead and more: counts at every lead
    ("ramp", 400.0, 380.0, 20.0),  # 20 s ahead: too late for a replica, still ahead of the preemption
    ("burst", 320.0, 315.0, 5.0),  # a sudden burst warned 5 s ahead: sudden ones count at every lead too
    ("ramp", 400.0, 400.0, 0.0),  # open on the tick the first preemption was counted: lead 0
    ("ramp", 400.0, 420.0, -math.inf),  # opened after the preemption: ahead at no lead
    ("leak", 600.0, None, -math.inf),  # never warned
]


def _score() -> object:
    detectors = load_bench("detectors")
    sc = detectors.KvScore()
    for family, first, warned, _ in CASES:
        sc.add(_episode(family, first), warned)
    sc.add(_episode("plateau", None), 200.0)  # quiet and warned: a false warning, no lead
    sc.add(_episode("plateau", None), None)
    return sc


def test_every_preempting_episode_keeps_its_lead() -> None:
    sc = _score()
    assert sc.ahead == [lead for *_, lead in CASES]
    assert (sc.false, sc.quiet) == (1, 2)


@pytest.mark.parametrize(
    ("lead_s", "warned"),
    [
        (0.0, 4),  # 70, 20, 5 and 0 s ahead
        (10.0, 2),  # 70 and 20 s ahead: their pages fire before the preemption
        (30.0, 1),  # only the one a minute ahead
        (60.0, 1),
        (90.0, 0),
    ],
)
def test_warned_ahead_counts_leads_at_or_above(lead_s: float, warned: int) -> None:
    assert _score().warned_ahead(lead_s) == warned


def test_the_goals_count_is_the_score_at_its_lead_and_the_line_says_every_lead() -> None:
    detectors = load_bench("detectors")
    sc = _score()
    assert sc.warned_ahead(detectors.LEAD_S) == sc.caught + sc.sudden_caught
    assert sc.line().endswith(
        "all preempting warned >= 0 s ahead 4, >= 10 s ahead 2, >= 30 s ahead 1, >= 60 s ahead 1 of 6"
    )
