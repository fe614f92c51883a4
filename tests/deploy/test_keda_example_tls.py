"""The example ScaledObject's gRPC trigger speaks what deploy/base serves: TLS exactly when the base's configuration
gives kvpilot a server certificate. KEDA dials with TLS when the trigger sets `enableTLS` or its TriggerAuthentication
gives a `caCert` or client certificate (kedacore/keda pkg/scalers/external_scaler.go), and a TLS handshake against a
plaintext server (or the reverse) fails every call, so KEDA holds the deployment at its `fallback` replicas. Until
session 31 the example set `enableTLS: "true"` and mutual TLS while deploy/base serves plaintext: the quick start's
step 3, followed as written, scaled nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
TLS_PARAMETERS = {"caCert", "tlsClientCert", "tlsClientKey"}  # the authentication parameters KEDA's scaler reads


def _base_serves_tls() -> bool:
    configmap = yaml.safe_load((REPO / "deploy" / "base" / "configmap.yaml").read_text())
    settings = yaml.safe_load(configmap["data"]["config.yaml"])
    return bool((settings.get("keda") or {}).get("tls_cert_file"))


def _dials_tls(trigger: dict[str, Any], authentications: dict[str, set[str]]) -> bool:
    enable = str((trigger.get("metadata") or {}).get("enableTLS", "false")).lower() == "true"
    ref = (trigger.get("authenticationRef") or {}).get("name")
    return enable or bool(authentications.get(ref, set()) & TLS_PARAMETERS)


def test_the_example_grpc_trigger_dials_as_the_base_serves() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "examples" / "scaledobject.yaml").read_text()) if d]
    authentications = {
        d["metadata"]["name"]: {t["parameter"] for t in d["spec"].get("secretTargetRef", [])}
        for d in docs
        if d["kind"] == "TriggerAuthentication"
    }
    grpc = [
        t
        for d in docs
        if d["kind"] == "ScaledObject"
        for t in d["spec"]["triggers"]
        if t["type"] in ("external", "external-push")
    ]
    assert grpc, "the example has a gRPC trigger"
    serves_tls = _base_serves_tls()
    assert [_dials_tls(t, authentications) for t in grpc] == [serves_tls] * len(grpc)
