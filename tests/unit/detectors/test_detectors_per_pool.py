"""The detectors on a disaggregated deployment (issue 14): each finding lands on the pool that has the problem — KV
exhaustion on decode, TTFT burn on prefill, a stuck GPU on whichever pool's replica runs on it — through the real
FleetState and every registered detector at once, as the control loop runs them."""

from __future__ import annotations

from typing import Any

import pytest

from detectors.finding import Finding
from detectors.registry import run_all
from tests.unit.detectors.detector_fleet import TICK_S, drive, gpu, replica, ttft

TICKS = 720  # the TTFT burn's long window is an hour


def _pooled(hung: str | None = None) -> tuple[list[Finding], Any]:
    """ml/chat as two prefill replicas (p0, p1) and one decode replica (d0), each on its own node's GPU. Prefill's
    first tokens are 20 % late (its queue); decode's KV is 95 % full with sequences waiting for blocks. ``hung``:
    the replica whose GPU is pinned at 100 % while it makes no progress."""
    fast = slow = 0.0

    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        nonlocal fast, slow
        fast, slow = fast + 16.0, slow + 4.0
        replicas, gpus = [], []
        for name, role in (("p0", "prefill"), ("p1", "prefill"), ("d0", "decode")):
            stuck = name == hung
            kw: dict[str, Any] = (
                {"ttft": ttft(fast, slow), "requests_waiting": 10.0, "kv_usage": 0.1}
                if role == "prefill"
                else {"ttft": ttft(fast + slow, 0.0), "requests_waiting": 3.0, "kv_usage": 0.95}
            )
            tokens = 100.0 * (min(i, 5) if stuck else i)  # a hung replica's counter stops
            replicas.append(replica(name, t, role=role, generation_tokens=tokens, **kw))
            gpus.append(gpu(f"node-{name}", t, utilisation=1.0 if stuck and i >= 5 else 0.7))
        return replicas, gpus

    state = drive(tick, TICKS)
    return run_all(state, now=(TICKS - 1) * TICK_S), state


def _by_kind(findings: list[Finding]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in findings:
        where = f.subject.deployment or str(f.evidence.get("deployment"))
        out.setdefault(f.kind, set()).add(where)
    return out


def test_each_finding_lands_on_the_pool_with_the_problem() -> None:
    findings, state = _pooled()
    assert sorted(state.deployments()) == ["ml/chat@decode", "ml/chat@prefill"]
    found = _by_kind(findings)
    # decode's KV is full with sequences waiting: its pool, never prefill's (10 % full)
    assert found["kv_exhaustion"] == {"ml/chat@decode"}
    # prefill's late first tokens burn the TTFT budget of the prefill pool; decode's are all fast
    assert found["ttft_slo_burn"] == {"ml/chat@prefill"}
    assert "stuck_gpu" not in found  # every GPU busy and making progress
    assert "kv_transfer_stall" not in found  # nothing finishes on either pool here: no hand-over to compare


@pytest.mark.parametrize(("hung", "pool"), [("p1", "ml/chat@prefill"), ("d0", "ml/chat@decode")])
def test_a_stuck_gpu_is_found_in_either_pool(hung: str, pool: str) -> None:
    findings, _ = _pooled(hung=hung)
    (stuck,) = [f for f in findings if f.kind == "stuck_gpu"]
    assert (stuck.subject.node, stuck.evidence["condition"]) == (f"node-{hung}", "hang")
    assert (stuck.evidence["deployment"], stuck.evidence["replica"]) == (pool, hung)
