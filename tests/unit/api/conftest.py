"""The API against a real SQLite store (built by the migrations), a real FleetState fed with samples, the real
metrics registry and static-target registry; only the control loop is replaced by a hand-set snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.auth import TokenAuth
from api.exposition import LoopCounters, OwnMetrics
from api.main import create_app
from api.runtime import RuntimeHealth
from collector.health import TargetHealth
from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.state import FleetState
from detectors.finding import Finding, Severity, Subject
from kvpilot.runtime.snapshot import Snapshot
from kvpilot.runtime.targets import StaticTargets
from scaler.decision import Decision
from store import repo
from store.db import make_engine, session_factory, transaction
from store.repo.deployments import SeenDeployment
from tests.helpers.sqlite_store import copy_store, migrated

READ = "r" * 24
ADMIN = "a" * 24
NOW = 1_700_000_000.0


def _replica(name: str, t: float, finished: float, kv: float) -> ReplicaSample:
    return ReplicaSample(
        namespace="llm",
        deployment="chat",
        replica=name,
        node=f"node-{name[-1]}",
        engine="vllm",
        model="llama",
        timestamp=t,
        requests_waiting=2,
        requests_running=8,
        kv_usage=kv,
        prefix_queries=1000 + t,
        prefix_hits=500 + t,
        prompt_tokens=10 * t,
        generation_tokens=5 * t,
        requests_finished=finished,
    )


def fleet_state() -> FleetState:
    state = FleetState()
    for t, fin in ((NOW - 30, 100.0), (NOW, 160.0)):
        gpus = [
            GpuSample(
                node="node-0", index="0", uuid="GPU-0", model_name="H100", timestamp=t, utilisation=0.9, last_xid=79
            )
        ]
        state.observe([_replica("chat-0", t, fin, 0.5), _replica("chat-1", t, fin, 0.95)], gpus, now=t)
    return state


FINDING = Finding(
    "stuck_gpu",
    Severity.CRITICAL,
    Subject(deployment="llm/chat", node="node-0", gpu="GPU-0"),
    NOW,
    "XID 79 on node-0 GPU-0",
    {"xid": 79.0},
    "drain_node",
)
DECISION = Decision(
    "llm/chat",
    NOW,
    2,
    2,
    3,
    1,
    "predictive",
    "forecast rises",
    3,
    2,
    {"arrival_rate": 4.0, "arrival_rate_upper": 5.0, "mase_holt": 0.8},
)
TARGET = TargetInfo(url="http://10.0.0.1:8000/metrics", namespace="llm", deployment="chat", pod="chat-0")


@dataclass
class FakeRuntime:
    sessions: sessionmaker[Session]
    targets: StaticTargets = field(default_factory=StaticTargets)
    snap: Snapshot | None = None
    state: RuntimeHealth = field(default_factory=lambda: RuntimeHealth(True, True, 0, 0, None, NOW, True))
    settings_max_body_bytes: int = 4096
    drain_dry_run: bool = True
    drain_max_concurrent: int = 1
    drain_budget: int | None = None
    drain_budget_window_s: float = 86400.0

    def __post_init__(self) -> None:
        self.counters = LoopCounters()
        self.metrics = OwnMetrics(self.counters, self.snapshot, self.health)

    @property
    def registry(self):
        return self.metrics.registry

    def snapshot(self) -> Snapshot | None:
        return self.snap

    async def exposition(self) -> bytes:
        return await self.metrics.page()

    def health(self) -> RuntimeHealth:
        return self.state

    def now(self) -> float:
        return NOW + 1

    def set_health(self, **changes: object) -> None:
        self.state = replace(self.state, **changes)


@pytest.fixture(scope="session")
def _seeded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store every API test starts from, migrated and seeded once; each test gets its own copy."""
    path = tmp_path_factory.mktemp("api-template") / "api.db"
    engine = make_engine(migrated(path))
    with transaction(session_factory(engine)) as s:
        repo.upsert_findings(session=s, active=[FINDING], now=NOW)
        repo.record_decision(session=s, decision=DECISION)
        repo.upsert_deployments(session=s, seen=[SeenDeployment("llm/chat", "vllm", "llama")], now=NOW - 120)
        for t, rate in ((NOW - 120, 3.0), (NOW - 60, 4.0), (NOW - 50, 6.0)):
            repo.record_rollup(session=s, deployment="llm/chat", t=t, signals={"arrival_rate": rate})
    engine.dispose()
    return path


@pytest.fixture
def runtime(tmp_path: Path, _seeded_store: Path) -> Iterator[FakeRuntime]:
    engine = make_engine(copy_store(_seeded_store, tmp_path / "api.db"))
    rt = FakeRuntime(session_factory(engine))
    state = fleet_state()
    rt.snap = Snapshot(
        tick=2,
        t=NOW,
        deployments=state.deployments(),
        replicas=state.replicas(),
        gpus=state.gpus(),
        decisions={"llm/chat": DECISION},
        findings=[FINDING],
        targets=[TARGET],
        target_health={TARGET.url: TargetHealth(TARGET.url, False, "timed out after 2 s", NOW, 2.0, NOW - 5, 1, 9, 1)},
        node_drains={"node-0": "requested"},
        kv_time_to_exhaustion={("llm/chat", "chat-1"): 42.0},
    )
    yield rt
    engine.dispose()


def make_client(
    rt: FakeRuntime, *, read: tuple[str, ...] = (READ,), admin: tuple[str, ...] = (ADMIN,), anonymous_read: bool = False
) -> TestClient:
    return TestClient(create_app(rt, TokenAuth(read, admin, anonymous_read=anonymous_read)))


@pytest.fixture
def client(runtime: FakeRuntime) -> TestClient:
    return make_client(runtime)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
