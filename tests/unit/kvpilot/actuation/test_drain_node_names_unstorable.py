"""A node name no database column can hold (a NUL byte, read raw from a GPU exporter's Hostname label: the parser
keeps label values as written) costs its own drain only: PostgreSQL refuses NUL in text, and one such name in the
drain pass's transaction failed it whole, every pass, so no node's drain was requested (session 30 helper E)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from detectors.finding import Finding, Severity, Subject
from kvpilot.actuation import Actuation, NoClusterDrainer
from kvpilot.runtime.snapshot import Snapshot
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.reliability.conftest import Store


def _stuck(node: str, since: float) -> Finding:
    return Finding("stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu="GPU-1"), since, f"XID 79 on {node}",
                   action="drain_node")  # fmt: skip


def _drains(sessions: sessionmaker[Session]) -> list[tuple[str, str, str]]:
    with transaction(sessions) as s:
        rows = sorted(repo.list_drains(session=s).items, key=lambda r: r.id)
        return [(r.node, r.state, r.reason) for r in rows]


async def test_a_node_name_holding_a_nul_costs_only_its_own_drain(store: Store) -> None:
    sessions = session_factory(make_engine(store.url))
    clock = VirtualClock(1000.0)
    act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=True, max_concurrent_nodes=2),
                    drainer=NoClusterDrainer(clock))  # fmt: skip
    findings = [_stuck("gpu\x00node", 980.0), _stuck("gpu-node-2", 990.0)]
    for tick in (1, 2):  # a second pass finds both requests in the store: nothing asked twice
        await act.after_tick(Snapshot(tick=tick, t=clock.now(), findings=findings))
        clock.advance(5.0)
    assert _drains(sessions) == [
        ("gpu\ufffdnode", "requested", "drain gpu\ufffdnode: XID 79 on gpu\ufffdnode (dry run)"),
        ("gpu-node-2", "requested", "drain gpu-node-2: XID 79 on gpu-node-2 (dry run)"),
    ]
