"""deploy/gpu-agent: the NVML agent's DaemonSet is valid Kubernetes, runs the command kvpilot has, and the pods it
makes are what kvpilot's Kubernetes discovery scrapes as GPU exporters (docs/gpu-agent.md)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from collector.discovery.kubernetes import pod_target
from collector.gpus.agent import DEFAULT_PORT
from kvpilot.cli import COMMANDS
from tests.unit.collector.test_discovery_kubernetes import as_pod

pytestmark = pytest.mark.integration  # kubectl

REPO = Path(__file__).resolve().parents[2]
VERSIONS = (kubernetes_validate.utils.all_versions()[0], kubernetes_validate.utils.latest_version())


@pytest.fixture(scope="module")
def daemonset() -> dict[str, Any]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is installed by scripts/install-system-deps.sh"
    out = subprocess.run([kubectl, "kustomize", str(REPO / "deploy" / "gpu-agent")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    (doc,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert doc["kind"] == "DaemonSet"
    return doc


@pytest.mark.parametrize("version", VERSIONS)
def test_the_daemonset_matches_its_schema(daemonset: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(daemonset, version, strict=True)


def test_it_runs_the_agent_on_its_port(daemonset: dict[str, Any]) -> None:
    spec = daemonset["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (container,) = spec["template"]["spec"]["containers"]
    assert container["image"] == "kvpilot:0.1.0"  # the image `make image` builds; its entrypoint is `kvpilot`
    assert container["args"][0] in dict(COMMANDS)
    assert container["args"][1:] == ["--port", str(DEFAULT_PORT)]
    assert [p["containerPort"] for p in container["ports"]] == [DEFAULT_PORT]
    node_name = {e["name"]: e for e in container["env"]}["NODE_NAME"]
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_its_pods_are_discovered_as_gpu_exporters(daemonset: dict[str, Any]) -> None:
    template = copy.deepcopy(daemonset["spec"]["template"])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": "kvpilot-gpu-agent-x7k2p", "namespace": "kvpilot"},
        "spec": {**template["spec"], "nodeName": "gpu-node-3"},
        "status": {"phase": "Running", "podIP": "10.4.0.7", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    target = pod_target(as_pod(pod))
    assert target is not None
    assert (target.url, target.kind, target.node) == (f"http://10.4.0.7:{DEFAULT_PORT}/metrics", "gpu", "gpu-node-3")
