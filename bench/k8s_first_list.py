"""Time to Kubernetes discovery's first targets: N realistic pods (a vLLM container with ports, env, GPU limits, four
conditions, a container status, a ReplicaSet owner) on tests/fakekube, then ``KubernetesDiscovery.targets()`` (its
first list). Prints the seconds and the process's peak RSS (fakekube's store and server are in the same process).
``targets()`` waits 30 s for the first list; past that it says so and the bench waits for the list itself. Run it in
a tree (``PYTHONPATH=<tree>``, from inside the tree) to compare (session 20, helper H).

    .venv/bin/python bench/k8s_first_list.py 5000
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))

from collector.discovery.kubernetes import KubernetesDiscovery
from tests.fakekube import FakeKube


def pod(i: int) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "chat-7d9f8c", "uid": "u", "controller": True}
    container = {
        "name": "engine",
        "image": "vllm/vllm-openai:v0.6",
        "ports": [{"containerPort": 8000, "name": "http"}],
        "args": ["--model", "meta-llama/Llama-3-8B", "--max-num-seqs", "256"],
        "env": [{"name": f"E{j}", "value": "x" * 20} for j in range(10)],
        "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}},
    }
    at = "2026-12-06T00:00:00Z"
    return {
        "metadata": {
            "name": f"chat-7d9f8c-{i:06d}",
            "namespace": "prod",
            "labels": {"kvpilot.io/scrape": "true", "app": "chat", "pod-template-hash": "7d9f8c"},
            "annotations": {"kvpilot.io/port": "8000", "kvpilot.io/engine": "vllm"},
            "ownerReferences": [owner],
        },
        "spec": {
            "nodeName": f"gpu-{i // 8}",
            "containers": [container],
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": at}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "engine",
                    "ready": True,
                    "restartCount": 0,
                    "image": "vllm",
                    "imageID": "sha256:" + "a" * 64,
                    "containerID": "containerd://" + "b" * 64,
                    "started": True,
                    "state": {"running": {"startedAt": at}},
                }
            ],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pods", type=int)
    n = ap.parse_args().pods
    with FakeKube() as kube:
        t0 = time.perf_counter()
        for i in range(n):
            kube.create("pods", pod(i), namespace="prod")
        print(f"created {n} pods in {time.perf_counter() - t0:.1f} s", flush=True)
        disc = KubernetesDiscovery(kube.api_client(), namespace="prod")
        t0 = time.perf_counter()
        try:
            got = asyncio.run(disc.targets())
            print(f"first targets(): {len(got)} targets after {time.perf_counter() - t0:.1f} s")
        except RuntimeError as e:
            print(f"first targets() raised after {time.perf_counter() - t0:.1f} s: {e}")
            while disc.lists == 0 and time.perf_counter() - t0 < 600:
                time.sleep(0.5)
            print(f"list done after {time.perf_counter() - t0:.1f} s ({len(disc.snapshot())} targets)")
        print(f"maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        disc.stop()


if __name__ == "__main__":
    main()
