"""kvpilot's recording rules (alerts/recording.py): generated from the PromQL source's own expressions, valid for
real promtool, and their `promtool test rules` cases pass (recorded values, the ad-hoc query, the selections)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts import recording
from collector.promql import expressions

REPO = Path(__file__).resolve().parents[2]


def test_committed_files_are_what_the_code_generates() -> None:
    for rel, content in recording.generate().items():
        assert (REPO / rel).read_text() == content, f"{rel} is stale: run `make generate`"


def test_every_signal_is_recorded_once_with_its_label() -> None:
    # One rule per signal the source decodes, each naming its signal, so the rules and ad-hoc answers read alike.
    rules = recording.rule_groups()["groups"][0]["rules"]
    assert [r["labels"][expressions.SIGNAL_LABEL] for r in rules] == [s.name for s in expressions.SIGNALS]
    assert len({r["record"] for r in rules}) == len(rules)
    assert all(r["record"].startswith(expressions.RECORD_PREFIX) for r in rules)
    manifest = yaml.safe_load((REPO / recording.MANIFEST_PATH).read_text())
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["spec"] == recording.rule_groups()


@pytest.mark.integration
def test_promtool_checks_and_tests_the_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not installed: run `make system-deps`")
    for rel, content in recording.generate().items():
        (tmp_path / Path(rel).name).write_text(content)
    for argv in (
        ["check", "rules", "kvpilot-recording-rules.yaml"],
        ["test", "rules", "kvpilot-recording-rules.test.yaml"],
    ):
        run = subprocess.run([promtool, *argv], capture_output=True, text=True, cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.integration
def test_promtool_fails_a_wrong_expectation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cases have teeth: one expected figure off and promtool says so.
    monkeypatch.setitem(recording.EXPECTED, "arrival_rate", 3.5)
    for rel, content in recording.generate().items():
        (tmp_path / Path(rel).name).write_text(content)
    run = subprocess.run(
        ["promtool", "test", "rules", "kvpilot-recording-rules.test.yaml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode != 0
    assert "arrival" in run.stdout + run.stderr


@pytest.mark.integration
def test_promtool_fails_an_amd_gpu_selected_wrongly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The AMD selection's case has teeth too: expecting the GPU of a replica that makes progress (node-2's GPU 1)
    # fails, so the case shows that a busy, healthy GPU is not read.
    busy = next(s for s, _ in recording._AMD_INPUT if 'gpu_id="1"' in s and "gfx_activity" in s)
    monkeypatch.setattr(recording, "EXPECTED_AMD", [*recording.EXPECTED_AMD, busy])
    for rel, content in recording.generate().items():
        (tmp_path / Path(rel).name).write_text(content)
    run = subprocess.run(
        ["promtool", "test", "rules", "kvpilot-recording-rules.test.yaml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode != 0
    assert 'gpu_id=\\"1\\"' in run.stdout + run.stderr or 'gpu_id="1"' in run.stdout + run.stderr
