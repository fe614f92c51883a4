"""A misspelt key in the settings file is refused naming the key meant (or the keys its mapping holds), at any depth:
models, mappings of models (deployments, GPU types), lists of them (static targets). Until session 31 it said "Extra
inputs are not permitted" and nothing more, while a misspelt KVPILOT_* section got a "did you mean"."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvpilot.settings import load_settings
from kvpilot.settings.sources import SettingsError

EXTRA = "Extra inputs are not permitted"
TARGETS = "collector:\n  discovery:\n    static_targets: [{url: 'http://a:1/m', deploymnt: x}]\n"


@pytest.mark.parametrize(
    ("text", "where", "hint"),
    [
        # a key of a section
        ("collector:\n  intervl_s: 5\n", "collector.intervl_s (k.yaml:2)", "did you mean collector.interval_s?"),
        # a section itself
        ("colector:\n  interval_s: 5\n", "colector (k.yaml:1)", "did you mean collector?"),
        # below a mapping keyed by the operator's names (a deployment)
        (
            "scaler:\n  deployments:\n    llm/chat: {min_replica: 2}\n",
            "scaler.deployments.llm/chat.min_replica (k.yaml:3)",
            "did you mean scaler.deployments.llm/chat.min_replicas?",
        ),
        # in an item of a list (a static target)
        (
            TARGETS,
            "collector.discovery.static_targets.0.deploymnt (k.yaml:3)",
            "did you mean collector.discovery.static_targets.0.deployment?",
        ),
        # nothing close: the keys there are
        (
            "drains:\n  zzz: 1\n",
            "drains.zzz (k.yaml:2)",
            "drains holds: breaker_share, budget, budget_window_s, dry_run, max_concurrent, require_approval",
        ),
    ],
)
def test_a_misspelt_key_is_refused_naming_the_key_meant(tmp_path: Path, text: str, where: str, hint: str) -> None:
    config = tmp_path / "k.yaml"
    config.write_text(text)
    with pytest.raises(SettingsError) as refused:
        load_settings(config)
    assert f"  {where}: {EXTRA}; {hint}" in str(refused.value).splitlines(), str(refused.value)
