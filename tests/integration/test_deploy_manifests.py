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
        ("", "pods", "list"), ("", "pods", "watch"),
        ("", "nodes", "get"), ("", "nodes", "list"),
        ("", "nodes", "update"),  # NodeDrainer cordons with replace_node (PUT): the verb is update
        ("", "pods/eviction", "create"),
        ("apps", "deployments", "get"), ("apps", "deployments", "list"),
        ("apps", "statefulsets", "get"),
        ("apps", "replicasets", "get"),  # a drain's last-ready-replica check: Pod -> ReplicaSet -> Deployment
        ("apps", "deployments/scale", "get"), ("apps", "deployments/scale", "update"),
    }  # fmt: skip
    assert grants == expected
    assert ("", "pods", "delete") not in grants, "pods leave through the Eviction API only, honouring PDBs"
    lease_role = _one(rendered, "Role", "kvpilot-leader-election")
    assert lease_role["rules"] == [  # list: a sharded instance reads its group's Leases in one call
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "create", "update"]}
    ]


# The packages `kvpilot run` imports (the image's, less the simulator, which talks to no API server).
_SHIPPED = ("collector", "detectors", "scaler", "store", "api", "kvpilot")
_APIS = ("CoreV1Api", "AppsV1Api", "CoordinationV1Api", "PolicyV1Api")
# HTTP method -> the RBAC verb on one named object, and on a collection
_VERBS = {
    "GET": ("get", "list"), "POST": ("create", "create"), "PUT": ("update", "update"), "PATCH": ("patch", "patch"),
    "DELETE": ("delete", "deletecollection"),
}  # fmt: skip


def _client_calls() -> dict[str, tuple[str, str, str]]:
    """Every Kubernetes client method -> (API group, resource[/subresource], RBAC verb), read from the request each
    one builds (its `_<name>_serialize`: HTTP method and path)."""
    import inspect
    import re

    import kubernetes.client

    calls: dict[str, tuple[str, str, str]] = {}
    for api in _APIS:
        cls = getattr(kubernetes.client, api)
        for name, fn in vars(cls).items():
            if not (name.startswith("_") and name.endswith("_serialize")):
                continue
            src = inspect.getsource(fn)
            method = re.search(r"method='(\w+)'", src)
            path = re.search(r"resource_path='([^']+)'", src)
            assert method, f"{api}.{name}: no HTTP method in its request"
            assert path, f"{api}.{name}: no path in its request"
            parts = [p for p in path.group(1).split("/") if p]
            group = "" if parts[0] == "api" else parts[1]
            rest = parts[2:] if parts[0] == "api" else parts[3:]
            if rest[:2] == ["namespaces", "{namespace}"]:
                rest = rest[2:]
            if not rest or rest[0] == "watch" or method.group(1) not in _VERBS:
                continue  # discovery (/api/v1/), the deprecated /watch/ paths, a proxy's HEAD and OPTIONS
            named = len(rest) > 1 and rest[1] == "{name}"
            resource = rest[0] + (f"/{rest[2]}" if named and len(rest) > 2 else "")
            verb = _VERBS[method.group(1)][0 if named else 1]
            calls[name.removeprefix("_").removesuffix("_serialize")] = (group, resource, verb)
    return calls


def _grants_the_code_needs() -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every client method the shipped code names; a list method in a module that also
    streams with `watch.Watch` needs watch too (collector.discovery.kubernetes)."""
    import ast

    calls = _client_calls()
    needed: set[tuple[str, str, str]] = set()
    for package in _SHIPPED:
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
            watches = "Watch" in names
            for name in names & calls.keys():
                group, resource, verb = calls[name]
                needed.add(calls[name])
                if watches and verb == "list":
                    needed.add((group, resource, "watch"))
    return needed


def test_the_roles_grant_exactly_the_calls_the_code_makes(rendered):
    """Least privilege held against the code, not a copy of the manifest: every Kubernetes call of the shipped
    packages is granted (else it fails with 403 in a cluster), and nothing is granted that no code calls (a
    compromised kvpilot could otherwise do it: scale any StatefulSet, say)."""
    granted: set[tuple[str, str, str]] = set()
    for kind, name in (("ClusterRole", "kvpilot"), ("Role", "kvpilot-leader-election")):
        for rule in _one(rendered, kind, name)["rules"]:
            granted |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    needed = _grants_the_code_needs()
    assert ("", "pods/eviction", "create") in needed  # the scan sees the calls at all
    assert ("coordination.k8s.io", "leases", "update") in needed
    assert sorted(needed - granted) == [], "called by the code but not granted: a 403 in a real cluster"
    assert sorted(granted - needed) == [], "granted but called by no code: not least privilege"
    leases = {(g, r, v) for g, r, v in needed if r == "leases"}
    assert {(g, r, v) for rule in _one(rendered, "Role", "kvpilot-leader-election")["rules"]
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]} == leases  # fmt: skip


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
