"""Every settings file the pages show loads as `kvpilot run --config` would load it: a ```yaml block whose keys are
all top-level settings (`collector:`, `scaler:`, …) goes through `kvpilot config show`'s own path, with the secrets
a production file takes from the environment set, so an example cannot drift from the settings model."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from kvpilot.commands.config import effective
from kvpilot.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOP = set(Settings.model_fields) | {"environment"}
# Production refuses to start without an admin token; the pages say to take it from a Secret (docs/configuration.md).
ENV = {"KVPILOT_ADMIN_TOKENS": "3f9c0e51a7d24b6e8c1f0a9d2b7e4c6a5d8f1e3b9c0a7d2e"}


def _examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in re.findall(r"^```ya?ml\n(.*?)^```", page.read_text(), re.S | re.M):
            doc = yaml.safe_load(block)
            if isinstance(doc, dict) and doc and set(doc) <= TOP:
                found.append((f"{page.relative_to(REPO)}:{doc and next(iter(doc))}", block))
    return found


EXAMPLES = _examples()


def test_the_pages_have_settings_examples() -> None:
    assert len(EXAMPLES) >= 8, [name for name, _ in EXAMPLES]  # the blocks were found at all


@pytest.mark.parametrize(("name", "block"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_every_settings_example_loads(name: str, block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("KVPILOT_")]:
        monkeypatch.delenv(key)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "kvpilot.yaml"
    config.write_text(block)
    (tmp_path / "targets.yaml").write_text("targets: []\n")  # the static_file the examples name, beside them
    effective(config)  # raises SettingsError naming the path and line when the example is stale


def _target_files() -> list[tuple[str, dict[str, object]]]:
    found = []
    for page in PAGES:
        for block in re.findall(r"^```ya?ml\n(.*?)^```", page.read_text(), re.S | re.M):
            doc = yaml.safe_load(block)
            if isinstance(doc, dict) and "targets" in doc and set(doc) <= {"defaults", "targets"}:
                found.append((str(page.relative_to(REPO)), doc))
    return found


def test_every_targets_file_example_loads() -> None:
    # A static targets file (collector.discovery.static_file) as the pages show it is one kvpilot reads.
    from collector.discovery.static import parse_targets

    examples = _target_files()
    assert len(examples) >= 2, [name for name, _ in examples]
    for name, doc in examples:
        assert parse_targets(doc, source=name), name


def _keda_triggers() -> list[tuple[str, dict[str, object]]]:
    """(page, trigger) of every KEDA trigger in the pages' YAML: a ScaledObject's `spec.triggers` or a bare
    `triggers:` excerpt."""
    found = []
    for page in PAGES:
        for block in re.findall(r"^```ya?ml\n(.*?)^```", page.read_text(), re.S | re.M):
            for doc in yaml.safe_load_all(block):
                if not isinstance(doc, dict):
                    continue
                spec = doc.get("spec")
                triggers = doc.get("triggers") or (spec.get("triggers") if isinstance(spec, dict) else None) or []
                found += [(str(page.relative_to(REPO)), t) for t in triggers]
    return found


def test_every_keda_trigger_example_is_one_kvpilot_answers() -> None:
    # The external scaler's metadata parses as kvpilot's servicer parses it; a metrics-api URL is the route it serves.
    from scaler.keda.target import parse_target

    triggers = _keda_triggers()
    assert len(triggers) >= 4, triggers
    for page, trigger in triggers:
        metadata = {str(k): str(v) for k, v in dict(trigger["metadata"]).items()}
        if trigger["type"] in ("external", "external-push"):
            assert parse_target("chat", "llm", metadata), page
        elif trigger["type"] == "metrics-api":
            assert re.fullmatch(r"https?://[\w.-]+:8080/v1/keda/[\w-]+/[\w@-]+", metadata["url"]), (page, metadata)
            assert metadata["valueLocation"] == "replicas", page
