"""deploy/base renders with the real `kubectl kustomize`, and what it renders is least-privilege and probe-complete."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dashboards.definitions import DASHBOARDS

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is installed by scripts/install-system-deps.sh"
    out = subprocess.run([kubectl, "kustomize", str(REPO / "deploy" / "base")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def test_renders_every_piece_in_the_kvpilot_namespace(rendered):
    kinds = sorted({d["kind"] for d in rendered})
    for kind in (
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Namespace",
        "NetworkPolicy",
        "PrometheusRule",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ):
        assert kind in kinds, f"{kind} missing from the rendered base"
    for d in rendered:
        if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "kvpilot", f"{d['kind']} {d['metadata']['name']} outside kvpilot"
    dashboards = [d for d in rendered if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    assert len(dashboards) == len(DASHBOARDS)  # every generated dashboard is in the kustomization


def test_cluster_role_grants_exactly_what_kvpilot_uses(rendered):
    role = _one(rendered, "ClusterRole", "kvpilot")
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert not any("*" in g for grant in grants for g in grant), "no wildcards"
    expected = {
        ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
        ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"), ("", "nodes", "patch"),
        ("", "nodes", "update"),  # NodeDrainer cordons with replace_node (PUT): the verb is update
        ("", "pods/eviction", "create"),
        ("policy", "poddisruptionbudgets", "get"), ("policy", "poddisruptionbudgets", "list"),
        ("apps", "deployments", "get"), ("apps", "deployments", "list"),
        ("apps", "statefulsets", "get"), ("apps", "statefulsets", "list"),
        ("apps", "replicasets", "get"),  # a drain's last-ready-replica check: Pod -> ReplicaSet -> Deployment
        ("apps", "deployments/scale", "get"), ("apps", "deployments/scale", "patch"),
        ("apps", "deployments/scale", "update"),
        ("apps", "statefulsets/scale", "get"), ("apps", "statefulsets/scale", "patch"),
        ("apps", "statefulsets/scale", "update"),
    }  # fmt: skip
    assert grants == expected
    assert ("", "pods", "delete") not in grants, "pods leave through the Eviction API only, honouring PDBs"
    lease_role = _one(rendered, "Role", "kvpilot-leader-election")
    assert lease_role["rules"] == [  # list: a sharded instance reads its group's Leases in one call
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "create", "update"]}
    ]


def test_deployment_runs_non_root_with_probes_resources_and_matching_ports(rendered):
    dep = _one(rendered, "Deployment", "kvpilot")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service = _one(rendered, "Service", "kvpilot")
    for sp in service["spec"]["ports"]:
        assert sp["targetPort"] in ports, f"service port {sp['name']} targets an unnamed container port"
    from kvpilot.settings import ApiSettings

    assert ports == {"http": ApiSettings().http_port, "grpc": ApiSettings().grpc_port}


def test_config_map_is_a_valid_kvpilot_configuration(rendered, tmp_path, monkeypatch):
    from kvpilot.settings import load_settings

    config = _one(rendered, "ConfigMap", "kvpilot-config")["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(config)
    # Production refuses to start without admin tokens: the Secret provides them.
    monkeypatch.setenv("KVPILOT_ADMIN_TOKENS", "0123456789abcdef0123456789abcdef")
    settings = load_settings(path)
    assert settings.environment == "production"
    assert settings.drains.dry_run is True
    assert settings.collector.discovery.kind == "kubernetes"
