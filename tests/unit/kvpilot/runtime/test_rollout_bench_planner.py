"""bench/rollout.py's kvpilot modes replay the planner `kvpilot run` builds from the settings (as `kvpilot backtest
--rollout-at` does, through its own loop), with the rollout stage on top: a planner setting moves what they ask for,
and the stage's surge comes on top of the planner's own count. Before 2026-12-06 they handed the stage a fixed
decision of the fleet's size, so no planner setting reached them (session 20: identical with the burst floor on and
off)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.bench import load_bench

# Steady light traffic: the planner's own count falls well below the fleet of 2 the bench starts with.
TRACE = "synthetic:duration_s=900,rate=3,amplitude=0,bursts=0,prompt_mean=400,output_mean=150"


def _run(mode: str) -> Any:
    return load_bench("rollout").run(TRACE, 1.0, 2, 1, mode, start_s=0.0)


def _asked(published: list[tuple[float, int]], at: float) -> int:
    """The count asked for at ``at`` (the last change at or before it)."""
    return [n for t, n in published if t <= at][-1]


@pytest.mark.parametrize(
    ("min_replicas", "fewest"),
    [
        # kvpilot's defaults: the planner asks for 1 once the light load is measured
        (None, 1),
        # scaler.default.min_replicas 5 (KVPILOT_ environment, as `kvpilot backtest` reads it): never fewer than 5
        ("5", 5),
    ],
)
def test_a_planner_setting_moves_what_the_kvpilot_mode_asks_for(
    monkeypatch: pytest.MonkeyPatch, min_replicas: str | None, fewest: int
) -> None:
    if min_replicas is None:
        monkeypatch.delenv("KVPILOT_SCALER__DEFAULT__MIN_REPLICAS", raising=False)
    else:
        monkeypatch.setenv("KVPILOT_SCALER__DEFAULT__MIN_REPLICAS", min_replicas)
    run = _run("kvpilot")
    after_warmup = [n for t, n in run.published if t >= 60.0]
    assert min(after_warmup) == fewest


def test_the_rollout_stage_surges_on_top_of_the_planners_own_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the Deployment, the template change at 180 s (a cold start before the resume) raises the planner's
    count by the wave (+1); without a rollout the same planner asks for its own count, and the rollout's replicas
    cost replica-hours on top of it."""
    monkeypatch.delenv("KVPILOT_SCALER__DEFAULT__MIN_REPLICAS", raising=False)
    alone, rolled = _run("kvpilot-base"), _run("kvpilot-k8s")
    assert _asked(rolled.published, 180.0) == _asked(alone.published, 180.0) + 1
    assert rolled.rollout_end_s is not None
    assert alone.rollout_end_s is None
    assert rolled.replica_hours > alone.replica_hours
