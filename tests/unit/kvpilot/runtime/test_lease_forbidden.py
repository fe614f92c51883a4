"""kvpilot's Lease where its Role is (review G9, session 21): a kustomize overlay that moved kvpilot to another
namespace moved the Role granting Leases with it but left the ConfigMap's ``ha.lease_namespace: kvpilot``, so every
Lease call was forbidden: no replica led, no drain or direct scaling ran, and the log said only "cannot renew (HTTP
403 Forbidden)" every round. Now the Lease's namespace defaults to kvpilot's own, and a 403 says once which namespace
needs which Role. Against the fake API server (tests/fakekube), answering 403 as an RBAC-enforcing one does."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.lease import LeaseElector, Leases
from kvpilot.settings import ha
from tests.fakekube import FakeKube
from tests.fakekube.store import ApiError
from tests.unit.kvpilot.runtime.test_shards_takeover import _coordinator

ROLE = "kvpilot-leader-election"


def _forbid_leases(kube: FakeKube) -> None:
    def forbidden(method: str, path: str) -> ApiError | None:
        if "/leases" not in path:
            return None
        return ApiError(403, "Forbidden", f'leases is forbidden: User "system:serviceaccount:obs:kvpilot" ({method})')

    kube.intercept = forbidden


def _said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level and r.name.startswith("kvpilot.runtime")]


def test_a_forbidden_lease_is_explained_once_with_the_fix(
    kube: FakeKube, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.runtime")
    elector = LeaseElector(
        Leases(kube.api_client()), name="kvpilot-leader", namespace="kvpilot", identity="a", clock=clock
    )
    _forbid_leases(kube)
    for _ in range(6):
        assert not elector.try_acquire_or_renew()
        clock.advance(5.0)
    (said,) = _said(caplog, logging.WARNING)  # one line for six refused rounds (was a warning each)
    assert "namespace 'kvpilot'" in said
    assert ROLE in said
    assert "ha.lease_namespace" in said
    assert "no drain and no direct scaling" in said
    assert elector.lease_failure == "HTTP 403 Forbidden"  # still what the service reads each round

    kube.intercept = None  # the Role granted: it leads, and a later refusal is explained again
    assert elector.try_acquire_or_renew()
    caplog.clear()
    _forbid_leases(kube)
    elector.try_acquire_or_renew()
    assert [m for m in _said(caplog, logging.ERROR) if ROLE in m]


def test_shards_explain_a_forbidden_list_once(
    kube: FakeKube, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.runtime")
    coordinator = _coordinator(kube, clock, "a", 6.0)
    _forbid_leases(kube)
    for _ in range(6):
        assert not coordinator.round()
        clock.advance(2.0)
    listing = [m for m in _said(caplog, logging.WARNING) if m.startswith("shards: cannot list")]
    (said,) = listing
    assert ROLE in said
    assert "namespace 'kv'" in said


def test_the_lease_namespace_defaults_to_kvpilots_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    account = tmp_path / "namespace"
    monkeypatch.setattr(ha, "SERVICE_ACCOUNT_NAMESPACE", account)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.delenv("KVPILOT_HA__LEASE_NAMESPACE", raising=False)
    assert ha.HaSettings().lease_namespace == "kvpilot"  # outside a pod, without POD_NAMESPACE: the manifests'
    monkeypatch.setenv("POD_NAMESPACE", "from-env")
    assert ha.HaSettings().lease_namespace == "from-env"
    account.write_text("observability\n")  # in a pod: its service account's namespace, first
    assert ha.HaSettings().lease_namespace == "observability"
    assert ha.HaSettings(lease_namespace="elsewhere").lease_namespace == "elsewhere"  # set: as set


def test_the_lease_namespace_is_read_when_the_settings_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings without an `ha` section read kvpilot's namespace as they are built, not once as kvpilot.settings is
    imported: a POD_NAMESPACE (or service account) that appears later in the process, as in a test or a program that
    embeds kvpilot, is honoured (it was the value at import, whatever came after)."""
    from kvpilot.settings import load_settings

    monkeypatch.chdir(tmp_path)  # no kvpilot.yaml of the checkout's
    for name in ("KVPILOT_HA__LEASE_NAMESPACE", "KVPILOT_CONFIG", "KVPILOT_HA"):
        monkeypatch.delenv(name, raising=False)
    account = tmp_path / "namespace"
    monkeypatch.setattr(ha, "SERVICE_ACCOUNT_NAMESPACE", account)
    monkeypatch.setenv("POD_NAMESPACE", "set-after-import")
    assert load_settings().ha.lease_namespace == "set-after-import"
    monkeypatch.setenv("POD_NAMESPACE", "set-later-still")
    assert load_settings().ha.lease_namespace == "set-later-still"  # each build reads it
    account.write_text("observability\n")
    assert load_settings().ha.lease_namespace == "observability"
    assert load_settings(ha={"enabled": False}).ha.lease_namespace == "observability"  # a section given: the same


def test_the_manifests_leave_the_lease_namespace_to_kvpilot() -> None:
    import yaml

    base = Path(__file__).resolve().parents[4] / "deploy" / "base" / "configmap.yaml"
    config = yaml.safe_load(yaml.safe_load(base.read_text())["data"]["config.yaml"])
    assert config["ha"]["enabled"]
    assert "lease_namespace" not in config["ha"]  # an overlay's namespace: moves with the Role (kustomize cannot)
