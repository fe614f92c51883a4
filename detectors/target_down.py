"""Scrape targets down: an engine replica or a node's GPU exporter that stopped answering.

Without its metrics every other detector is blind to that replica or node, so this is reported on its own
(and the drain rails count a mass outage as a monitoring problem, not a fleet one).
"""

from __future__ import annotations

from collector.state import FleetState
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import Thresholds

KIND = "target_down"


def detect(state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]:
    out: list[Finding] = []
    limit = thresholds.target.down_after_s
    for view in state.replicas():
        age = now - view.last_seen
        if view.target_up and age <= limit:
            continue
        out.append(
            Finding(
                kind=KIND,
                severity=Severity.WARNING,
                subject=Subject(deployment=view.deployment_key, replica=view.sample.replica, node=view.sample.node),
                since=now,
                summary=f"engine metrics of {view.sample.replica} unavailable (last scraped {age:.0f} s ago)",
                evidence={"target": "engine", "last_seen": view.last_seen, "age_s": age},
                action="notify",
            )
        )
    # A node whose exporter stopped answering keeps its GPUs "present" with an ageing last_seen. A page that places
    # its GPUs on no node (dcgm-exporter without NODE_NAME, a static target) is named by its URL instead, as the
    # subject's replica: each such page is a finding of its own, and a sharded instance closes it by its URL.
    stale: dict[tuple[str, str], float] = {}
    for gpu in state.gpus():
        if gpu.present and now - gpu.last_seen > limit:
            where = (gpu.sample.node, "" if gpu.sample.node else gpu.sample.page)
            stale[where] = max(stale.get(where, gpu.last_seen), gpu.last_seen)
    for (node, page), last_seen in sorted(stale.items()):
        out.append(
            Finding(
                kind=KIND,
                severity=Severity.WARNING,
                subject=Subject(replica=page, node=node),
                since=now,
                summary=f"GPU exporter {f'at {page} (node unknown)' if page else f'on {node}'} unavailable "
                f"(last scraped {now - last_seen:.0f} s ago)",
                evidence={"target": "gpu", "last_seen": last_seen, "age_s": now - last_seen},
                action="notify",
            )
        )
    return out
