"""Safety rails for node drains: which flagged nodes may be drained now, and why the others may not.

Pure: findings, where replicas run and what is already draining go in; one decision per flagged node comes
out, each with a machine-readable verdict and a sentence an operator reads, for the audit trail. The rails:
- dry-run by default: a decision says what *would* happen until an operator turns it off;
- at most ``max_concurrent_nodes`` nodes draining at once (those already draining count);
- a budget over time: at most ``budget`` drains started within ``budget_window_s`` (``budget_spent``, which the
  caller counts in the store, includes those draining now), since a done drain leaves its node cordoned until an
  operator uncordons it, so the concurrency limit alone frees a slot each time a drain ends;
- a circuit breaker: when more than ``breaker_share`` of all nodes are flagged at once, the monitoring is more
  likely broken than the GPUs, so nothing is drained;
- never drain the last ready replica of a deployment (counting replicas on nodes approved in the same pass).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from detectors.finding import Finding


class Verdict(StrEnum):
    DRAIN = "drain"  # go ahead
    DRY_RUN = "dry_run"  # would drain; dry-run is on
    ALREADY_DRAINING = "already_draining"
    REFUSED_CIRCUIT_BREAKER = "refused_circuit_breaker"
    REFUSED_MAX_CONCURRENT = "refused_max_concurrent"
    REFUSED_BUDGET = "refused_budget"
    REFUSED_LAST_READY_REPLICA = "refused_last_ready_replica"


@dataclass(frozen=True, slots=True)
class DrainRails:
    dry_run: bool = True
    max_concurrent_nodes: int = 1
    breaker_share: float = 0.2
    # Below this many flagged nodes the breaker never trips (one bad node in a 3-node fleet is 33 %).
    breaker_min_flagged: int = 2
    # At most this many drains started within budget_window_s (None: no budget).
    budget: int | None = None
    budget_window_s: float = 86400.0

    def __post_init__(self) -> None:
        if self.budget is not None and (isinstance(self.budget, bool) or self.budget < 0):
            raise ValueError(f"DrainRails.budget must be >= 0, got {self.budget!r}")
        if not self.budget_window_s > 0:
            raise ValueError(f"DrainRails.budget_window_s must be > 0, got {self.budget_window_s!r}")
        if isinstance(self.max_concurrent_nodes, bool) or self.max_concurrent_nodes < 0:
            raise ValueError(f"DrainRails.max_concurrent_nodes must be >= 0, got {self.max_concurrent_nodes!r}")
        if not (isinstance(self.breaker_share, int | float) and 0.0 <= self.breaker_share <= 1.0):
            raise ValueError(f"DrainRails.breaker_share must be within [0, 1], got {self.breaker_share!r}")
        if self.breaker_min_flagged < 0:
            raise ValueError(f"DrainRails.breaker_min_flagged must be >= 0, got {self.breaker_min_flagged}")


@dataclass(frozen=True, slots=True)
class Placement:
    """One replica (pod) of a deployment on a node, and whether it is ready."""

    deployment: str  # "namespace/name"
    replica: str
    node: str
    ready: bool


@dataclass(frozen=True, slots=True)
class DrainDecision:
    node: str
    verdict: Verdict
    reason: str  # a sentence an operator reads
    finding_ids: tuple[str, ...]
    evidence: dict[str, float | str | None] = field(default_factory=dict)

    @property
    def approved(self) -> bool:
        """True when the actuator should act (a dry run is approved but must not touch the cluster)."""
        return self.verdict in (Verdict.DRAIN, Verdict.DRY_RUN)


def _flagged_nodes(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        if f.action == "drain_node" and f.subject.node:
            out.setdefault(f.subject.node, []).append(f)
    return out


def _last_ready_on(node: str, ready_by_deployment: dict[str, set[str]], placements: Sequence[Placement]) -> list[str]:
    """Deployments whose every remaining ready replica is on ``node``."""
    on_node: dict[str, set[str]] = {}
    for p in placements:
        if p.node == node and p.ready:
            on_node.setdefault(p.deployment, set()).add(p.replica)
    return sorted(d for d, here in on_node.items() if here and ready_by_deployment.get(d, set()) <= here)


def last_ready_on(node: str, placements: Sequence[Placement], *, draining: Collection[str] = ()) -> list[str]:
    """Deployments whose every ready replica, off the nodes in ``draining``, is on ``node``: the rail ``decide``
    applies, asked again for one node (the drain worker, before it runs a drain approved earlier)."""
    ready_by_deployment: dict[str, set[str]] = {}
    for p in placements:
        if p.ready and p.node not in draining:
            ready_by_deployment.setdefault(p.deployment, set()).add(p.replica)
    return _last_ready_on(node, ready_by_deployment, placements)


def decide(
    findings: Iterable[Finding],
    *,
    nodes: Collection[str],
    placements: Sequence[Placement],
    draining: Collection[str] = (),
    rails: DrainRails = DrainRails(),
    budget_spent: int = 0,
    fleet_nodes: Collection[str] | None = None,
    fleet_flagged: Collection[str] = (),
) -> list[DrainDecision]:
    """One decision per node flagged with a ``drain_node`` finding, oldest finding first. ``budget_spent``: the
    drains that count against ``rails.budget`` now (``store.repo.count_budget_drains``).

    The circuit breaker's share is of ``nodes`` and the nodes ``findings`` flag; with sharding (``fleet_nodes`` not
    None) of the fleet's: every live instance's nodes (``fleet_nodes``, with ``nodes``) and the nodes any instance's
    findings flag (``fleet_flagged``, with this one's)."""
    flagged = _flagged_nodes(findings)
    if not flagged:
        return []
    order = sorted(flagged, key=lambda n: (min(f.since for f in flagged[n]), n))
    counted = set(flagged) if fleet_nodes is None else set(flagged) | set(fleet_flagged)
    total = max(len(set(nodes) | counted | set(fleet_nodes or ())), 1)
    share = len(counted) / total
    common: dict[str, float | str | None] = {"flagged_nodes": float(len(counted)), "total_nodes": float(total)}
    limit = max(rails.breaker_min_flagged, math.floor(rails.breaker_share * total))
    if len(counted) > limit:
        whose = "nodes" if fleet_nodes is None else "nodes of the fleet (every shard's)"
        reason = (
            f"circuit breaker: {len(counted)} of {total} {whose} ({share:.0%}) flagged at once, above "
            f"{rails.breaker_share:.0%}; the monitoring is more likely broken than the GPUs"
        )
        return [
            DrainDecision(n, Verdict.REFUSED_CIRCUIT_BREAKER, reason, _ids(flagged[n]), dict(common)) for n in order
        ]

    ready_by_deployment: dict[str, set[str]] = {}
    for p in placements:
        if p.ready and p.node not in draining:
            ready_by_deployment.setdefault(p.deployment, set()).add(p.replica)
    busy = set(draining)
    spent = budget_spent
    out: list[DrainDecision] = []
    for node in order:
        ids = _ids(flagged[node])
        if node in busy and node in draining:
            out.append(DrainDecision(node, Verdict.ALREADY_DRAINING, f"{node} is already draining", ids, dict(common)))
            continue
        if len(busy) >= rails.max_concurrent_nodes:
            reason = f"{len(busy)} node(s) already draining, the limit is {rails.max_concurrent_nodes}"
            out.append(DrainDecision(node, Verdict.REFUSED_MAX_CONCURRENT, reason, ids, dict(common)))
            continue
        if rails.budget is not None and spent >= rails.budget:
            reason = (
                f"drain budget spent: {spent} drain(s) started or approved in the last "
                f"{rails.budget_window_s / 3600:g} h or node(s) still cordoned by kvpilot, the budget is "
                f"{rails.budget}; drained nodes stay cordoned until an operator uncordons them"
            )
            evidence = {**common, "budget_spent": float(spent), "budget": float(rails.budget)}
            out.append(DrainDecision(node, Verdict.REFUSED_BUDGET, reason, ids, evidence))
            continue
        last = _last_ready_on(node, ready_by_deployment, placements)
        if last:
            reason = f"{node} holds the last ready replica of {', '.join(last)}"
            evidence = {**common, "deployments": ",".join(last)}
            out.append(DrainDecision(node, Verdict.REFUSED_LAST_READY_REPLICA, reason, ids, evidence))
            continue
        busy.add(node)
        spent += 1
        for replicas in ready_by_deployment.values():
            replicas.difference_update(p.replica for p in placements if p.node == node)
        verdict = Verdict.DRY_RUN if rails.dry_run else Verdict.DRAIN
        reason = f"drain {node}: {flagged[node][0].summary}" + (" (dry run)" if rails.dry_run else "")
        out.append(DrainDecision(node, verdict, reason, ids, dict(common)))
    return out


def _ids(findings: list[Finding]) -> tuple[str, ...]:
    return tuple(sorted({f.id for f in findings}))
