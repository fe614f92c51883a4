"""docs/quickstart.md's table of what `kvpilot demo --json` prints names exactly the keys it prints, so a key added,
renamed or dropped in `DemoSummary.to_json` cannot leave the table describing another object."""

from __future__ import annotations

import re
from pathlib import Path

from kvpilot.demo.replay import DemoSummary

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def _documented() -> list[str]:
    table = PAGE.read_text().split("`kvpilot demo --json` runs as fast as possible", 1)[1].split("\n### ", 1)[0]
    keys = []
    for first, meaning in re.findall(r"^\| ([^|]+) \| ([^\n]+) \|$", table, re.M):
        if first.strip() == "extras":
            keys += re.findall(r"`(\w+)`", meaning)
        elif first.startswith("`"):
            keys.append(first.strip("` "))
    return keys


def test_the_table_names_every_key_the_summary_prints() -> None:
    printed = list(DemoSummary().to_json())  # without --rollout-at: no `rollout`, described below the table
    assert len(_documented()) > 10  # the table was found at all
    assert sorted(_documented()) == sorted(printed)
