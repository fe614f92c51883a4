"""Drain safety rails: each case says which rail it proves."""

from __future__ import annotations

import pytest

from detectors.drain_rails import DrainRails, Placement, Verdict, decide
from detectors.finding import Finding, Severity, Subject

NODES = [f"n{i}" for i in range(10)]


def _drain(node: str, since: float = 0.0) -> Finding:
    return Finding(
        "stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu="0"), since, f"XID 79 on {node}", action="drain_node"
    )


def _spread(deployment: str, nodes: list[str], ready: bool = True) -> list[Placement]:
    return [Placement(deployment, f"{deployment}-{i}", n, ready) for i, n in enumerate(nodes)]


LIVE = DrainRails(dry_run=False, max_concurrent_nodes=2)

CASES = [
    # dry-run is the default: the decision says what would happen, verdict dry_run
    ([_drain("n1")], _spread("ml/a", ["n1", "n2"]), (), DrainRails(), {"n1": Verdict.DRY_RUN}),
    # live rails approve a flagged node whose replicas have ready peers elsewhere
    ([_drain("n1")], _spread("ml/a", ["n1", "n2"]), (), LIVE, {"n1": Verdict.DRAIN}),
    # never the last ready replica of a deployment
    (
        [_drain("n1")],
        _spread("ml/a", ["n1"]) + _spread("ml/b", ["n1", "n2"]),
        (),
        LIVE,
        {"n1": Verdict.REFUSED_LAST_READY_REPLICA},
    ),
    # a peer that is not ready does not count as a spare
    (
        [_drain("n1")],
        [Placement("ml/a", "a-0", "n1", True), Placement("ml/a", "a-1", "n2", False)],
        (),
        LIVE,
        {"n1": Verdict.REFUSED_LAST_READY_REPLICA},
    ),
    # two nodes approved in one pass cannot take out both replicas of a deployment
    (
        [_drain("n1", 0), _drain("n2", 1)],
        _spread("ml/a", ["n1", "n2"]),
        (),
        LIVE,
        {"n1": Verdict.DRAIN, "n2": Verdict.REFUSED_LAST_READY_REPLICA},
    ),
    # at most K nodes at once, counting those already draining; oldest finding goes first
    (
        [_drain("n3", 5), _drain("n4", 1)],
        [],
        ("n9",),
        DrainRails(dry_run=False, max_concurrent_nodes=2),
        {"n4": Verdict.DRAIN, "n3": Verdict.REFUSED_MAX_CONCURRENT},
    ),
    # a node already draining is reported as such, not drained twice
    ([_drain("n9")], [], ("n9",), LIVE, {"n9": Verdict.ALREADY_DRAINING}),
    # replicas on a node already draining are not counted as ready spares
    ([_drain("n1")], _spread("ml/a", ["n1", "n9"]), ("n9",), LIVE, {"n1": Verdict.REFUSED_LAST_READY_REPLICA}),
    # circuit breaker: 3 of 10 nodes flagged (> 20 %) -> refuse all, the monitoring is suspect
    (
        [_drain("n1"), _drain("n2"), _drain("n3")],
        [],
        (),
        LIVE,
        dict.fromkeys(("n1", "n2", "n3"), Verdict.REFUSED_CIRCUIT_BREAKER),
    ),
    # 2 of 10 flagged is at the breaker's floor: allowed
    ([_drain("n1"), _drain("n2")], [], (), LIVE, {"n1": Verdict.DRAIN, "n2": Verdict.DRAIN}),
    # findings that do not ask for a drain are ignored
    ([Finding("kv_exhaustion", Severity.CRITICAL, Subject(node="n1"), 0, "s", action="scale_out")], [], (), LIVE, {}),
]


@pytest.mark.parametrize(("findings", "placements", "draining", "rails", "expected"), CASES)
def test_rails(findings, placements, draining, rails, expected):
    decisions = decide(findings, nodes=NODES, placements=placements, draining=draining, rails=rails)
    assert {d.node: d.verdict for d in decisions} == expected
    for d in decisions:
        assert d.reason  # every decision explains itself for the audit trail
        assert d.finding_ids


def test_breaker_refusal_names_the_share():
    # The reason an operator reads says how many nodes were flagged and why nothing happened.
    (d, *_) = decide([_drain(n) for n in NODES[:5]], nodes=NODES, placements=[], rails=LIVE)
    assert "5 of 10" in d.reason
    assert "monitoring" in d.reason


@pytest.mark.parametrize(
    "kw",
    [
        # negative concurrency is a typo
        {"max_concurrent_nodes": -1},
        # a share above 1 can never trip
        {"breaker_share": 1.5},
    ],
)
def test_bad_rails_fail_fast(kw):
    with pytest.raises(ValueError, match="DrainRails"):
        DrainRails(**kw)
