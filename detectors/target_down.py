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
    # Ages run on step-free time (``ReplicaView.age_s``): a step of the wall clock neither hides a target silent since
    # before it (a step back of an hour read its last sample as fresh for the hour) nor downs one that answers. They
    # are the state's, at its latest tick: a detector asked later adds the time since.
    later = 0.0 if state.now is None else now - state.now
    for view in state.replicas():
        age = view.age_s + later
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
    stale: dict[tuple[str, str], tuple[float, float]] = {}  # (node, page) -> (last seen, age) of its newest GPU
    for gpu in state.gpus():
        age = gpu.age_s + later
        if gpu.present and age > limit:
            where = (gpu.sample.node, "" if gpu.sample.node else gpu.sample.page)
            newest = stale.get(where)
            if newest is None or age < newest[1]:
                stale[where] = (gpu.last_seen, age)
    for (node, page), (last_seen, age) in sorted(stale.items()):
        out.append(
            Finding(
                kind=KIND,
                severity=Severity.WARNING,
                subject=Subject(replica=page, node=node),
                since=now,
                summary=f"GPU exporter {f'at {page} (node unknown)' if page else f'on {node}'} unavailable "
                f"(last scraped {age:.0f} s ago)",
                evidence={"target": "gpu", "last_seen": last_seen, "age_s": age},
                action="notify",
            )
        )
    return out
