"""Keyword-only repository functions: the only code that turns domain types into rows and back."""

from store.repo.audit import list_audit, record_audit
from store.repo.capacity import get_capacity, learned_capacities, upsert_capacity
from store.repo.decisions import latest_decisions, list_decisions, record_decision
from store.repo.deployments import all_deployments, get_deployment, list_deployments, upsert_deployments
from store.repo.drains import (
    approve_drain,
    claim_rail,
    count_active_drains,
    count_budget_drains,
    drain_attempt,
    drain_claim,
    drains_in,
    get_drain,
    latest_drain_for_node,
    list_drain_events,
    list_drains,
    note_drain,
    request_drain,
    transition_drain,
)
from store.repo.findings import acknowledge_finding, get_finding, list_findings, open_findings, upsert_findings
from store.repo.fleet import (
    drain_flagged_nodes,
    forget_instances,
    instance_node_sets,
    instance_refreshes,
    live_instance_nodes,
    refresh_instance_nodes,
)
from store.repo.page import KeysetPage, Page
from store.repo.retention import newest_stored, prune
from store.repo.rollups import RollupPoint, load_rollups, record_rollup
from store.repo.targets import add_static_target, get_static_target, list_static_targets, remove_static_target

__all__ = [
    "KeysetPage",
    "Page",
    "RollupPoint",
    "acknowledge_finding",
    "add_static_target",
    "all_deployments",
    "approve_drain",
    "claim_rail",
    "count_active_drains",
    "count_budget_drains",
    "drain_attempt",
    "drain_claim",
    "drain_flagged_nodes",
    "drains_in",
    "forget_instances",
    "get_capacity",
    "get_deployment",
    "get_drain",
    "get_finding",
    "get_static_target",
    "instance_node_sets",
    "instance_refreshes",
    "latest_decisions",
    "latest_drain_for_node",
    "learned_capacities",
    "list_audit",
    "list_decisions",
    "list_deployments",
    "list_drain_events",
    "list_drains",
    "list_findings",
    "list_static_targets",
    "live_instance_nodes",
    "load_rollups",
    "newest_stored",
    "note_drain",
    "open_findings",
    "prune",
    "record_audit",
    "record_decision",
    "record_rollup",
    "refresh_instance_nodes",
    "remove_static_target",
    "request_drain",
    "transition_drain",
    "upsert_capacity",
    "upsert_deployments",
    "upsert_findings",
]
