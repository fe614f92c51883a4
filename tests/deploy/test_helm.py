"""deploy/helm/kvpilot rendered by Helm's own engine (Helm v4's Go SDK through helm-python-sdk; the `helm` command
is on no registry reachable here): with its defaults it renders the objects `kubectl kustomize deploy/base` does,
values change what they say, the result is valid against the Kubernetes schemas, and `helm lint` is clean.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is a dev dependency (pyproject.toml)")

pytestmark = pytest.mark.integration  # kubectl

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kvpilot"
CUSTOM_KINDS = {"PrometheusRule", "ServiceMonitor"}

Docs = dict[tuple[str, str], dict[str, Any]]


def _render(values: dict[str, Any] | None = None, *, name: str = "kvpilot", namespace: str = "kvpilot") -> Docs:
    helm.disable_logging()
    chart = helm.Chart.load(str(CHART))
    rendered = chart.render(values, name=name, namespace=namespace, is_install=True)
    docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    keyed = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(keyed) == len(docs), "two objects of one kind share a name"
    return keyed


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """The object with its config file parsed: the chart re-serialises it (same settings, no comments)."""
    if doc["kind"] == "ConfigMap" and "config.yaml" in doc.get("data", {}):
        doc = {**doc, "data": {**doc["data"], "config.yaml": yaml.safe_load(doc["data"]["config.yaml"])}}
    return doc


@pytest.fixture(scope="module")
def kustomized() -> Docs:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is installed by scripts/install-system-deps.sh"
    out = subprocess.run([kubectl, "kustomize", str(REPO / "deploy" / "base")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}


def test_defaults_render_what_kustomize_renders(kustomized: Docs) -> None:
    chart = _render()
    expected = {k: v for k, v in kustomized.items() if k[0] != "Namespace"}  # `helm install --create-namespace`
    assert sorted(chart) == sorted(expected)
    for key, doc in expected.items():
        assert _comparable(chart[key]) == _comparable(doc), f"{key}: the chart and deploy/base disagree"


def test_the_chart_version_is_kvpilots() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert version
    assert meta["appVersion"] == version.group(1), "the image tag the chart runs by default"


def test_values_move_the_release_and_make_the_secret() -> None:
    admin, read = "9f" * 12 + "a1b2c3d4e5f60718293a4b5c", "0e" * 12 + "f1e2d3c4b5a69788796a5b4c"
    values = {
        "image": {"repository": "registry.example.com/kvpilot", "tag": "0.1.0-rc1"},
        "replicas": 3,
        "config": {"collector": {"interval_s": 10}},
        "secret": {"create": True, "name": "kvp-tokens", "adminTokens": admin, "readTokens": read},
        "serviceMonitor": {"enabled": False},
        "dashboards": {"enabled": False},
    }
    docs = _render(values, name="kvp", namespace="inference-ops")
    namespaced = [d for (kind, _), d in docs.items() if kind not in ("ClusterRole", "ClusterRoleBinding")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"inference-ops"}
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        (subject,) = next(d for (k, _), d in docs.items() if k == kind)["subjects"]
        assert subject["namespace"] == "inference-ops", f"{kind} binds the ServiceAccount where it runs"
    deployment = docs["Deployment", "kvpilot"]
    assert deployment["spec"]["replicas"] == 3
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/kvpilot:0.1.0-rc1"
    assert container["envFrom"] == [{"secretRef": {"name": "kvp-tokens", "optional": False}}]
    config = yaml.safe_load(docs["ConfigMap", "kvpilot-config"]["data"]["config.yaml"])
    assert config["collector"]["interval_s"] == 10
    assert config["collector"]["discovery"]["kind"] == "kubernetes", "values merge over deploy/base's config"
    assert "lease_namespace" not in config["ha"], "unset: kvpilot's own namespace, where the Role is (ha.py)"
    assert ("ServiceMonitor", "kvpilot") not in docs
    assert not [k for k in docs if k[1].startswith("kvpilot-dashboard-")]
    secret = docs["Secret", "kvp-tokens"]
    assert secret["stringData"] == {"KVPILOT_ADMIN_TOKENS": admin, "KVPILOT_READ_TOKENS": read}
    for (kind, _), doc in docs.items():
        if kind not in CUSTOM_KINDS:
            kubernetes_validate.validate(doc, kubernetes_validate.utils.latest_version(), strict=True)


def test_values_set_the_label_the_prometheus_stack_selects_by() -> None:
    """kube-prometheus-stack picks ServiceMonitors and PrometheusRules by `release: <its release>`: under another
    release name the chart must say so on all three, or Prometheus ignores them (no scrape, no alert)."""
    labels = {"release": "monitoring"}
    docs = _render({"serviceMonitor": {"labels": labels}, "prometheusRule": {"labels": labels}})
    selected = [d for (kind, _), d in docs.items() if kind in CUSTOM_KINDS]
    assert len(selected) == 3, "the ServiceMonitor and both PrometheusRules"
    for doc in selected:
        assert doc["metadata"]["labels"]["release"] == "monitoring", doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kvpilot", "the base's labels are kept"
    others = {k: d for k, d in _render().items() if k[0] not in CUSTOM_KINDS}
    assert {k: d for k, d in docs.items() if k[0] not in CUSTOM_KINDS} == others, "nothing else changes"


def test_the_made_secret_needs_an_admin_token() -> None:
    with pytest.raises(helm.HelmError, match=r"secret\.adminTokens"):
        _render({"secret": {"create": True}})


def test_helm_lint_is_clean() -> None:
    report = helm.lint(str(CHART), strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems
    assert not report["errors"]


def test_the_gpu_agent_is_off_by_default_and_renders_deploy_gpu_agent_when_on() -> None:
    assert not [k for k in _render() if k[0] == "DaemonSet"]
    kubectl = shutil.which("kubectl")
    assert kubectl
    out = subprocess.run([kubectl, "kustomize", str(REPO / "deploy" / "gpu-agent")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    (expected,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert _render({"gpuAgent": {"enabled": True}})["DaemonSet", "kvpilot-gpu-agent"] == expected
    values = {
        "gpuAgent": {"enabled": True, "nodeSelector": {"pool": "gpu"}, "runtimeClassName": ""},
        "image": {"repository": "registry.example.com/kvpilot", "tag": "0.2.0"},
    }
    moved = _render(values, namespace="inference-ops")["DaemonSet", "kvpilot-gpu-agent"]
    spec = moved["spec"]["template"]["spec"]
    assert moved["metadata"]["namespace"] == "inference-ops"
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert "runtimeClassName" not in spec
    assert spec["containers"][0]["image"] == "registry.example.com/kvpilot:0.2.0"
    kubernetes_validate.validate(moved, kubernetes_validate.utils.latest_version(), strict=True)
