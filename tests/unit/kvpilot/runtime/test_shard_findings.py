"""Sharded instances on one store: which live findings each may close (``ControlLoop._closes``). A finding names a
deployment, else a node, else a GPU whose node is unknown, else nothing; each is one instance's to close. Before,
one with neither deployment nor node was closed by every instance that read anything without a node, so one
instance closed what another had open, and that one opened it again the next tick as a new episode, its
acknowledgement gone (as 19dcc84 found for other shards' deployments)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kvpilot.runtime.loop import ControlLoop
from kvpilot.runtime.shards import Held, shard_of

SHARDS = 3
NOBODY = shard_of("", SHARDS)  # the shard whose holder closes a finding with no subject at all


def _gpu(node: str, uuid: str) -> Any:
    return SimpleNamespace(sample=SimpleNamespace(node=node, uuid=uuid, index="0"))


def _replica(node: str) -> Any:
    return SimpleNamespace(sample=SimpleNamespace(node=node))


def _closes(held: Held, gpus: list[Any], replicas: list[Any]) -> Any:
    state = SimpleNamespace(gpus=lambda: gpus, replicas=lambda: replicas)
    return ControlLoop._closes(SimpleNamespace(state=state), held.owns)  # type: ignore[arg-type]


def test_a_finding_without_deployment_or_node_is_one_instances_to_close() -> None:
    # Both instances read replicas and GPUs without a node (dcgm-exporter without NODE_NAME): a reads GPU-a, b GPU-b.
    a = _closes(Held(SHARDS, frozenset({NOBODY})), [_gpu("", "GPU-a")], [_replica("")])
    b = _closes(Held(SHARDS, frozenset(set(range(SHARDS)) - {NOBODY})), [_gpu("", "GPU-b")], [_replica("")])
    # a node-less GPU exporter down: the holder of the empty name's shard alone
    assert (a("", "", ""), b("", "", "")) == (True, False)
    # a GPU whose node is unknown: the instance that reads that GPU alone
    assert (a("", "", "GPU-a"), b("", "", "GPU-a")) == (True, False)
    assert (a("", "", "GPU-b"), b("", "", "GPU-b")) == (False, True)
    assert (a("", "", "GPU-c"), b("", "", "GPU-c")) == (False, False)  # read by neither: not theirs


def test_deployments_and_nodes_are_closed_where_they_are_read() -> None:
    held = Held(SHARDS, frozenset({0}))
    mine = next(f"ns/d{i}" for i in range(100) if shard_of(f"ns/d{i}", SHARDS) == 0)
    theirs = next(f"ns/d{i}" for i in range(100) if shard_of(f"ns/d{i}", SHARDS) != 0)
    closes = _closes(held, [_gpu("n1", "GPU-1")], [_replica("n2"), _replica("")])
    assert (closes(mine, "", ""), closes(theirs, "n1", "GPU-1")) == (True, False)
    assert (closes("", "n1", "GPU-1"), closes("", "n2", ""), closes("", "n3", "")) == (True, True, False)
