"""Scenes several reliability tests set up alike: a cluster whose only eviction a PodDisruptionBudget refuses, and
the store taken away and brought back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube

if TYPE_CHECKING:
    from tests.reliability.conftest import Store


def pdb_blocked_cluster() -> FakeKube:
    """Nodes n0 and n1; on n0 the only pod of an app whose PDB needs one available: every eviction is a 429."""
    kube = install(FakeKube()).start()
    for node in ("n0", "n1"):
        kube.create("nodes", {"metadata": {"name": node}, "spec": {}})
    kube.create(
        "pods",
        {
            "metadata": {"name": "chat-0", "namespace": "llm", "labels": {"app": "chat"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "c", "uid": "u"}]},
            "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
        namespace="llm",
    )  # fmt: skip
    kube.create(
        "poddisruptionbudgets",
        {"metadata": {"name": "chat"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "chat"}}}},
        namespace="llm",
    )
    return kube


@contextlib.contextmanager
def store_away(store: Store) -> Iterator[None]:
    """The store away, then back: PostgreSQL stopped (fast shutdown) and started again; a SQLite file's folder moved
    aside, so that no connection can open the file (SQLite creates no folder; an empty file in its place would be a
    store without a schema, another case), then moved back."""
    if store.server is not None:
        store.server.stop()
        try:
            yield
        finally:
            store.server.start()
        return
    folder = Path(str(make_url(store.url).database)).parent
    aside = folder.with_name(folder.name + ".aside")
    os.rename(folder, aside)
    try:
        yield
    finally:
        os.rename(aside, folder)
