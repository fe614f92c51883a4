"""deploy/ against the Kubernetes schemas, offline, and every object it points at is created or documented.

`kubectl kustomize` renders deploy/base as `kubectl apply -k` would; `kubernetes-validate` checks each object
strictly (unknown fields are errors) against the schemas it ships for the oldest and newest Kubernetes it knows.
Then each reference a pod or a KEDA object makes (Secret, ConfigMap, ServiceAccount, TriggerAuthentication, image)
must be satisfied by the manifests themselves, by `make image`, or by a `kubectl create secret` line in
docs/quickstart.md, in the namespace it is looked up in.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
# Custom resources: kubernetes-validate ships only the built-in kinds' schemas. PrometheusRule's rules are checked
# by promtool (tests/integration/test_alerts_rules.py); the KEDA objects field by field in docs/keda.md.
CUSTOM_KINDS = {"PrometheusRule", "ServiceMonitor", "ScaledObject", "TriggerAuthentication"}
VERSIONS = (kubernetes_validate.utils.all_versions()[0], kubernetes_validate.utils.latest_version())

Ref = tuple[str, str, str]  # (kind, namespace, name)


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is installed by scripts/install-system-deps.sh"
    return kubectl


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    out = subprocess.run([_kubectl(), "kustomize", str(REPO / "deploy" / "base")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def examples() -> list[dict[str, Any]]:
    return [d for f in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _validate(doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_built_in_object_matches_its_schema(
    base: list[dict[str, Any]], examples: list[dict[str, Any]], version: str
) -> None:
    unchecked: set[str] = set()
    for doc in base + examples:
        if doc["kind"] in CUSTOM_KINDS:
            unchecked.add(doc["kind"])
            continue
        _validate(doc, version)  # raises with the field's path and the schema's complaint
    assert unchecked <= CUSTOM_KINDS


def test_the_validator_rejects_what_the_api_server_would(base: list[dict[str, Any]]) -> None:
    # The check above is only worth something if it fails: a misspelt field, a port as a string, a wrong apiVersion.
    deployment = next(d for d in base if d["kind"] == "Deployment")
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    port_as_text = copy.deepcopy(deployment)
    port_as_text["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8080"
    wrong_api = copy.deepcopy(deployment)
    wrong_api["apiVersion"] = "apps/v2"
    for broken in (misspelt, port_as_text):
        with pytest.raises(kubernetes_validate.ValidationError):
            _validate(broken, VERSIONS[-1])
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        _validate(wrong_api, VERSIONS[-1])


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def _references(doc: dict[str, Any]) -> Iterator[Ref | tuple[str, str]]:
    """What ``doc`` needs to exist: (kind, namespace, name), or ("image", ref)."""
    ns = doc["metadata"].get("namespace", "default")
    for node in _walk(doc.get("spec", {})):
        if "containers" in node:  # a pod spec
            yield "ServiceAccount", ns, node.get("serviceAccountName", "default")
            for c in node.get("initContainers", []) + node["containers"]:
                yield "image", c["image"]
                for src in c.get("envFrom", []):
                    for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                        if key in src and not src[key].get("optional", False):
                            yield kind, ns, src[key]["name"]
                for var in c.get("env", []):
                    for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                        ref = var.get("valueFrom", {}).get(key)
                        if ref and not ref.get("optional", False):
                            yield kind, ns, ref["name"]
            for vol in node.get("volumes", []):
                if "configMap" in vol:
                    yield "ConfigMap", ns, vol["configMap"]["name"]
                if "secret" in vol:
                    yield "Secret", ns, vol["secret"]["secretName"]
    if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
        for subject in doc["subjects"]:
            if subject["kind"] == "ServiceAccount":
                yield "ServiceAccount", subject["namespace"], subject["name"]
        yield doc["roleRef"]["kind"], ns if doc["roleRef"]["kind"] == "Role" else "", doc["roleRef"]["name"]
    if doc["kind"] == "ScaledObject":
        for trigger in doc["spec"]["triggers"]:
            if "authenticationRef" in trigger:
                yield "TriggerAuthentication", ns, trigger["authenticationRef"]["name"]
    if doc["kind"] == "TriggerAuthentication":
        for ref in doc["spec"].get("secretTargetRef", []):
            yield "Secret", ns, ref["name"]


def _created(docs: list[dict[str, Any]]) -> set[Ref]:
    made: set[Ref] = set()
    for d in docs:
        cluster_scoped = d["kind"] in ("Namespace", "ClusterRole", "ClusterRoleBinding")
        ns = "" if cluster_scoped else d["metadata"].get("namespace", "default")
        made.add((d["kind"], ns, d["metadata"]["name"]))
    return made


def _quickstart_secrets() -> set[Ref]:
    """Secrets a `kubectl [-n NS] create secret TYPE NAME` line in docs/quickstart.md's shell blocks creates."""
    text = (REPO / "docs" / "quickstart.md").read_text()
    made: set[Ref] = set()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] != ["kubectl"] or "create" not in words or "secret" not in words:
                continue
            ns = "default"
            for flag in ("-n", "--namespace"):
                if flag in words:
                    ns = words[words.index(flag) + 1]
            name = words[words.index("secret") + 2]
            made.add(("Secret", ns, name))
    return made


def _make_image_tag() -> str:
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "-p", "-n", "image"], cwd=REPO, capture_output=True, text=True
    )
    version = re.search(r"^VERSION := (.+)$", out.stdout, re.M)
    image = re.search(r"^IMAGE \?= (.+)$", out.stdout, re.M) or re.search(r"^IMAGE = (.+)$", out.stdout, re.M)
    assert version, "Makefile: VERSION"
    assert image, "Makefile: IMAGE"
    return image.group(1).replace("$(VERSION)", version.group(1))


def test_every_reference_is_created_or_documented(base: list[dict[str, Any]], examples: list[dict[str, Any]]) -> None:
    # What the base needs is created by the base, or by the quickstart before `kubectl apply -k`; each example
    # (one ScaledObject file, applied in the inference deployment's namespace) may also use what the base creates.
    created = _created(base) | _created(examples) | _quickstart_secrets()
    created |= {("ServiceAccount", ns, "default") for _, ns, _ in created}  # every namespace has one
    missing = []
    images = set()
    for doc in base + examples:
        for ref in _references(doc):
            if len(ref) == 2:
                images.add(ref[1])
            elif ref not in created:
                missing.append(f"{doc['kind']} {doc['metadata']['name']} needs {ref[0]} {ref[1]}/{ref[2]}")
    assert not missing, "neither in deploy/ nor in a quickstart `kubectl create secret` line:\n" + "\n".join(missing)
    assert images == {_make_image_tag()}, "every container runs the image `make image` builds"


def test_the_base_requires_the_secret_the_quickstart_creates(base: list[dict[str, Any]]) -> None:
    # Guards the check above from passing vacuously: the Deployment does need kvpilot-secrets, not optionally.
    deployment = next(d for d in base if d["kind"] == "Deployment")
    refs = set(_references(deployment))
    assert ("Secret", "kvpilot", "kvpilot-secrets") in refs
    assert ("Secret", "kvpilot", "kvpilot-secrets") in _quickstart_secrets()
    assert ("ConfigMap", "kvpilot", "kvpilot-config") in refs


def _matches(selector: dict[str, str], labels: dict[str, str] | None) -> bool:
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


def test_every_selector_selects_what_it_is_meant_to(base: list[dict[str, Any]]) -> None:
    # A selector that matches nothing is valid YAML and a silent outage: a ServiceMonitor that selected no Service
    # meant no kvpilot series in Prometheus, so no alert and no dashboard.
    def one(kind: str) -> dict[str, Any]:
        return next(d for d in base if d["kind"] == kind)

    deployment, service, monitor, policy = (
        one("Deployment"),
        one("Service"),
        one("ServiceMonitor"),
        one("NetworkPolicy"),
    )
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert _matches(deployment["spec"]["selector"]["matchLabels"], pod_labels), "Deployment → its pods"
    assert _matches(service["spec"]["selector"], pod_labels), "Service → kvpilot's pods"
    assert _matches(policy["spec"]["podSelector"]["matchLabels"], pod_labels), "NetworkPolicy → kvpilot's pods"
    assert _matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]), (
        "ServiceMonitor → Service"
    )
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports, "ServiceMonitor scrapes a named Service port"


def test_the_service_monitor_is_selected_where_the_rules_are(base: list[dict[str, Any]]) -> None:
    # kube-prometheus-stack's Prometheus selects ServiceMonitors and PrometheusRules alike by its `release` label
    # (serviceMonitorSelectorNilUsesHelmValues, ruleSelectorNilUsesHelmValues: true by default). The rules carried
    # it and the ServiceMonitor did not: the alerts were loaded over series never scraped, silent, and every
    # dashboard empty. One overlay setting `release` for both must find the same label on each.
    monitor = next(d for d in base if d["kind"] == "ServiceMonitor")
    rules = [d for d in base if d["kind"] == "PrometheusRule"]
    assert rules
    for rule in rules:
        release = rule["metadata"]["labels"].get("release")
        assert release, f"{rule['metadata']['name']}: no release label"
        assert monitor["metadata"]["labels"].get("release") == release, "ServiceMonitor and PrometheusRule"


def test_the_base_runs_one_replica_on_its_default_sqlite_store(base: list[dict[str, Any]]) -> None:
    # The quickstart's Secret holds no KVPILOT_DATABASE_URL unless one is given, so the base runs on SQLite in the
    # pod's emptyDir. It ran two HA replicas that way: each kept its own store, only the Lease holder's had the
    # findings and drains, and a drain approved through the Service on the other never reached the holder (review
    # G, F2). One replica by default; two or three with one PostgreSQL (docs/scaling-large-fleets.md).
    deployment = next(d for d in base if d["kind"] == "Deployment")
    config = yaml.safe_load(next(d for d in base if d["metadata"]["name"] == "kvpilot-config")["data"]["config.yaml"])
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "database_url" not in config
    assert "KVPILOT_DATABASE_URL" not in {e["name"] for e in container["env"]}
    assert config["ha"]["enabled"], "a second replica with a database URL needs no other change"
    assert deployment["spec"]["replicas"] == 1


def test_a_pod_still_starting_is_not_killed_by_its_liveness_probe(base: list[dict[str, Any]]) -> None:
    # The HTTP API serves only once the start is done, and the start scores every deployment's restored history
    # (45bcc72): ~0.15 s a deployment-day on a loaded 2-core VM (session 19, H), ~146 s for 1,000 deployments. With
    # the liveness probe alone (initial delay 10 s, 6 x 10 s) kubelet killed such a pod after ~70 s, and each restart
    # began the history again: a crash loop. A startup probe holds the liveness probe off for 10 minutes.
    deployment = next(d for d in base if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    startup = container.get("startupProbe")
    assert startup is not None, "no startupProbe: liveness kills a pod still starting after ~70 s"
    assert startup["httpGet"] == container["livenessProbe"]["httpGet"]
    assert startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) >= 600
