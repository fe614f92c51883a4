"""`OwnRaise`: the count read back, less what the stage after the planner added to the planner's count."""

from __future__ import annotations

import pytest

from scaler.decision import Decision
from scaler.own_raise import PLANNER_REPLICAS, OwnRaise, planner_replicas

KEY = "llm/chat"


def decision(desired: int, now: float = 0.0) -> Decision:
    return Decision(KEY, now, 0, 0, desired, 0, "test", "")


def raised(planned: int, published: int, now: float = 0.0, memory_s: float = 600.0) -> OwnRaise:
    own = OwnRaise(memory_s)
    own.note([decision(planned, now)], [decision(published, now)], now)
    return own


@pytest.mark.parametrize(
    ("count", "planner_count"),
    [
        (6, 4),  # the count published (4 + a surge of 2) read back: the planner's 4
        (5, 4),  # the surge half applied (KEDA's next poll pending): the part above the planner's count is ours
        (4, 4),  # not applied yet: all the planner's
        (3, 3),  # below the planner's count: nothing of ours in it
        (9, 7),  # someone scaled above what we published: only our 2 come off
    ],
)
def test_the_count_read_loses_at_most_the_raise_above_the_planners_count(count: int, planner_count: int) -> None:
    assert raised(4, 6).planner_count(KEY, count, now=5.0) == planner_count


def test_no_raise_no_change() -> None:
    own = raised(4, 4)  # the stage published the planner's count
    assert own.planner_count(KEY, 6, now=5.0) == 6
    assert own.planner_count("other/one", 6, now=5.0) == 6


def test_a_withdrawn_raise_is_read_off_until_the_count_comes_down() -> None:
    own = raised(4, 6, now=0.0)
    own.note([decision(4, 5.0)], [decision(4, 5.0)], 5.0)  # the rollout ended: the planner's count published
    assert own.planner_count(KEY, 6, now=10.0) == 4  # KEDA has not applied it yet: the surge is still ours
    assert own.planner_count(KEY, 4, now=15.0) == 4  # applied: forgotten
    assert own.planner_count(KEY, 6, now=20.0) == 6  # a later 6 is someone else's


def test_a_raise_is_forgotten_after_its_memory() -> None:
    own = raised(4, 6, now=0.0, memory_s=60.0)
    own.note([decision(4, 5.0)], [decision(4, 5.0)], 5.0)
    assert own.planner_count(KEY, 6, now=61.0) == 6  # held above the planner's by someone else for a minute


def test_the_raise_follows_the_planners_count() -> None:
    own = raised(4, 6, now=0.0)
    own.note([decision(5, 5.0)], [decision(7, 5.0)], 5.0)  # the planner asked for one more, the surge on top
    assert own.planner_count(KEY, 7, now=10.0) == 5
    own.forget(KEY)
    assert own.planner_count(KEY, 7, now=10.0) == 7


@pytest.mark.parametrize("memory_s", [0.0, -1.0, float("nan"), float("inf")])
def test_a_memory_that_is_not_a_positive_finite_time_is_refused(memory_s: float) -> None:
    with pytest.raises(ValueError, match="memory_s"):
        OwnRaise(memory_s)


def test_a_raised_decision_records_the_planners_count_and_an_unraised_one_nothing() -> None:
    own = OwnRaise()
    (out,) = own.note([decision(4)], [decision(6)], 0.0)
    assert out.forecast == {PLANNER_REPLICAS: 4.0}
    assert planner_replicas(out) == 4
    (out,) = own.note([decision(4, 5.0)], [decision(4, 5.0)], 5.0)
    assert PLANNER_REPLICAS not in out.forecast
    assert planner_replicas(out) is None


def test_a_new_instance_resumes_the_raise_from_the_decisions_stored() -> None:
    (stored,) = OwnRaise().note([decision(4)], [decision(6)], 0.0)
    fresh = OwnRaise(memory_s=60.0)
    fresh.resume([stored, decision(3)], now=1000.0)  # published again at 1000 s: remembered from then
    assert fresh.planner_count(KEY, 6, now=1005.0) == 4
    assert fresh.planner_count(KEY, 6, now=1061.0) == 6  # its memory runs from the restart


@pytest.mark.parametrize("value", [-1.0, 2.5, float("nan"), float("inf"), 7.0])
def test_a_recorded_count_that_is_no_count_under_the_raise_resumes_nothing(value: float) -> None:
    stored = Decision(KEY, 0.0, 0, 0, 6, 0, "rollout_surge", "", forecast={PLANNER_REPLICAS: value})
    fresh = OwnRaise()
    fresh.resume([stored], now=10.0)
    assert fresh.planner_count(KEY, 6, now=15.0) == 6
