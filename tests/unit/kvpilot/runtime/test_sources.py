"""The embedded simulator's discovery: what it lists as not ready is not a scrape target."""

from __future__ import annotations

import asyncio
import json

from kvpilot.runtime.sources import SimulatorTargets
from tests.services.pages import serve_pages

LISTING = [
    # ready engine replica: a target
    {"url": "http://h/replicas/a/metrics", "kind": "engine", "engine": "vllm", "namespace": "inference",
     "deployment": "llama", "pod": "a", "node": "node-0", "ready": True},
    # loading weights: not a target yet (a pod before its readiness probe passes)
    {"url": "http://h/replicas/b/metrics", "kind": "engine", "engine": "vllm", "namespace": "inference",
     "deployment": "llama", "pod": "b", "node": "node-0", "ready": False},
    # an older simulator without the field: taken as ready
    {"url": "http://h/nodes/node-0/metrics", "kind": "dcgm", "engine": "", "namespace": "inference",
     "deployment": "dcgm-exporter", "pod": "dcgm-exporter-node-0", "node": "node-0"},
]  # fmt: skip


def test_not_ready_replicas_are_left_out_and_dcgm_pages_are_gpu_targets():
    async def fetch(base: str):
        source = SimulatorTargets(base)
        try:
            return await source.targets()
        finally:
            await source.aclose()

    with serve_pages({"/targets": json.dumps(LISTING).encode()}) as (host, port):
        targets = asyncio.run(fetch(f"http://{host}:{port}"))
    assert [(t.pod, t.kind, t.engine) for t in targets] == [
        ("a", "engine", "vllm"),
        ("dcgm-exporter-node-0", "gpu", None),
    ]
