"""Hostile HA settings (hostile input round 7, session 22): the Lease's name and namespace are names Kubernetes
takes, and an instance's identity is not blank, or kvpilot refuses to start in words. Before, any text was taken:
with `ha.lease_name: Kvpilot_Leader` or a namespace `team/a` the API server refused every Lease call (422 Invalid for
the name; no namespace of that name can exist), logged each round, and no instance ever led (no drain, no direct
scaling); with an empty identity (a variable set to nothing) an instance wrote holderIdentity "", which every instance
reads as no holder: the Lease was anyone's to take at each round."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("ha", "field"),
    [
        ({"lease_name": "Kvpilot_Leader"}, "ha.lease_name"),  # upper case and an underscore: 422 Invalid
        ({"lease_name": "kvpilot-"}, "ha.lease_name"),  # ends with a dash
        ({"lease_name": "a" * 64}, "ha.lease_name"),  # a label value (sharding's group) holds 63
        ({"lease_name": ""}, "ha.lease_name"),
        ({"lease_namespace": "team/a"}, "ha.lease_namespace"),  # a path of its own in the Lease's URL
        ({"lease_namespace": "Team-A"}, "ha.lease_namespace"),
        ({"lease_namespace": "team.a"}, "ha.lease_namespace"),  # a namespace is a label: no dot
        ({"lease_namespace": "n" * 64}, "ha.lease_namespace"),
        ({"lease_namespace": ""}, "ha.lease_namespace"),
        ({"identity": ""}, "ha.identity"),
        ({"identity": " \t"}, "ha.identity"),
    ],
)
@pytest.mark.parametrize("on", ["ha", "sharding"])
def test_a_lease_kubernetes_would_refuse_is_refused_at_start(ha: dict[str, Any], field: str, on: str) -> None:
    sections: dict[str, Any] = {"ha": {**ha, "enabled": on == "ha"}}
    if on == "sharding":
        sections["sharding"] = {"shards": 2}
    with pytest.raises(SettingsError) as caught:
        load_settings(**sections)
    message = str(caught.value)
    assert field in message
    assert "Traceback" not in message


@pytest.mark.parametrize(
    "ha",
    [
        {},  # the defaults
        {"lease_name": "kvpilot.leader-2", "lease_namespace": "team-a", "identity": "kvpilot-0"},
        {"lease_name": "a" * 63, "lease_namespace": "n" * 63, "identity": "any text: a Lease's holder is free text"},
    ],
)
def test_names_kubernetes_takes_are_taken(ha: dict[str, Any]) -> None:
    settings = load_settings(ha={**ha, "enabled": True})
    for name, value in ha.items():
        assert getattr(settings.ha, name) == value


def test_with_ha_and_sharding_off_the_lease_settings_are_not_read() -> None:
    # `kvpilot backtest`, `demo` and a single instance never make a Lease: a value there stops nothing
    settings = load_settings(ha={"lease_name": "Kvpilot_Leader", "lease_namespace": "team/a", "identity": ""})
    assert settings.ha.lease_name == "Kvpilot_Leader"


@pytest.mark.parametrize(("pod_namespace", "code"), [("Team_A", 2), ("team-a", 0)])
def test_a_namespace_from_pod_namespace_is_held_to_the_same_rule(tmp_path: Path, pod_namespace: str, code: int) -> None:
    # In a process of its own: the namespace kvpilot runs in is read as its settings module is imported (here outside
    # a pod: no service account's namespace file, so POD_NAMESPACE's).
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVPILOT_")}
    env.update(POD_NAMESPACE=pod_namespace, KVPILOT_HA__ENABLED="true", XDG_DATA_HOME=str(tmp_path))
    script = (
        "import sys\nfrom kvpilot.settings import load_settings, SettingsError\n"
        "try:\n    print(load_settings().ha.lease_namespace)\n"
        "except SettingsError as e:\n    print(e); sys.exit(2)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    if code:
        assert re.search(r"ha\.lease_namespace.*'Team_A'.*POD_NAMESPACE", done.stdout)
    else:
        assert done.stdout.strip() == "team-a"


def test_kvpilot_run_refuses_it_in_words_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("KVPILOT_HA__ENABLED", "true")
    monkeypatch.setenv("KVPILOT_HA__LEASE_NAME", "Kvpilot_Leader")
    result = CliRunner().invoke(app, ["run", "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "ha.lease_name" in result.output
    assert "Traceback" not in result.output
