"""A default the pages state in prose is the code's: "`collector.interval_s`, 5 s by default", "`api.http_port`
(default 8080", "`collector.max_body_bytes` (8 MiB by default", "`drains.dry_run`, the default", "`runtime.event_loop:
asyncio` (the default)". docs/configuration-reference.md is generated with every default; this keeps the sentences
elsewhere from citing an old one. Detector thresholds are read from `detectors.thresholds.DEFAULT` (the settings
hold only overrides)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from detectors.thresholds import DEFAULT
from kvpilot.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PAGES.remove(REPO / "docs" / "configuration-reference.md")  # generated from the defaults themselves

# Not a product: "(6 × `collector.interval_s`, 30 s by default)" states the product's default.
_KEY = r"(?<!× )`(?P<key>[a-z_]+(?:\.[a-z_0-9]+)+)(?:: (?P<set>[^`]+))?`"
_VALUE = r"(?P<value>[\w.]+(?: (?:s|MiB|ms))?)"
_STATED = [
    re.compile(_KEY + r" \(default " + _VALUE + r"[,)]"),  # `api.http_port` (default 8080, …
    re.compile(_KEY + r"(?:, | \()" + _VALUE + r" by default\b"),  # `collector.interval_s`, 5 s by default
    re.compile(_KEY + r"(?:,| \() ?(?P<the>the default)\b"),  # `drains.dry_run`, the default / `x: y` (the default)
]
_UNITS = {"s": 1.0, "ms": 0.001, "MiB": 1024.0 * 1024.0}


def _stated(text: str) -> list[tuple[str, str]]:
    """(key, value as written) for every default the text states."""
    flat = " ".join(text.split())
    found = []
    for pattern in _STATED:
        for m in pattern.finditer(flat):
            value = m.group("set") if m.groupdict().get("the") else m.groupdict().get("value")
            found.append((m.group("key"), value if value is not None else "true"))
    return found


def _default(key: str) -> Any:
    """The default of a settings path, or of a detector threshold (`detectors.kv.near_full`)."""
    section, _, rest = key.partition(".")
    if section == "detectors" and "." in rest:
        group, _, name = rest.partition(".")
        return getattr(getattr(DEFAULT, group), name)
    value: Any = Settings().model_dump(mode="python")
    for part in key.split("."):
        value = value[part]
    return value


def _same(written: str, default: Any) -> bool:
    if isinstance(default, bool) or default is None:
        words = {"true": True, "on": True, "false": False, "off": None if default is None else False, "null": None}
        return written in words and words[written] == default
    if isinstance(default, int | float):
        number, _, unit = written.partition(" ")
        return float(number) * _UNITS.get(unit, 1.0) == pytest.approx(float(default))
    return written == str(getattr(default, "value", default))


def test_the_check_reads_what_the_pages_write() -> None:
    text = (
        "`collector.interval_s`, 5 s by default; `api.http_port` (default 8080, …); `collector.max_body_bytes` (8 "
        "MiB by default); `drains.dry_run`, the default; `runtime.event_loop: asyncio` (the default); "
        "`detectors.kv.projected_usage`, off by default"
    )
    stated = sorted(_stated(text))
    assert stated == [
        ("api.http_port", "8080"),
        ("collector.interval_s", "5 s"),
        ("collector.max_body_bytes", "8 MiB"),
        ("detectors.kv.projected_usage", "off"),
        ("drains.dry_run", "true"),
        ("runtime.event_loop", "asyncio"),
    ]
    assert all(_same(value, _default(key)) for key, value in stated)
    assert not _same("30 s", _default("collector.interval_s"))
    assert not _same("uvloop", _default("runtime.event_loop"))
    assert _stated("(6 × `collector.interval_s`, 30 s by default)") == []


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("KVPILOT_")]:
        monkeypatch.delenv(key)


def test_every_default_the_pages_state_is_the_codes() -> None:
    stated = [(page, key, value) for page in PAGES for key, value in _stated(page.read_text())]
    assert len(stated) >= 8, stated  # the patterns find the pages' defaults at all
    wrong = [
        f"{page.relative_to(REPO)}: `{key}` stated {value!r}, default {_default(key)!r}"
        for page, key, value in stated
        if not _same(value, _default(key))
    ]
    assert not wrong, "defaults the pages state that the code does not have:\n" + "\n".join(wrong)


def test_the_detectors_table_opens_and_closes_as_the_hysteresis_does() -> None:
    # docs/detectors.md, "Thresholds": the last column of each detector's row is its HysteresisPolicy.
    section = (REPO / "docs" / "detectors.md").read_text().split("## Thresholds", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \|.*\| (\d+ / \d+)(?: ticks)? \|$", section, re.M))
    assert len(rows) >= 6, rows
    for kind, opens_closes in rows.items():
        policy = DEFAULT.hysteresis[kind]
        assert opens_closes == f"{policy.open_after_ticks} / {policy.close_after_ticks}", kind
