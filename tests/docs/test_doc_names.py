"""docs/decisions.md and docs/architecture.md name only what exists: every repository path in decisions.md, and every
dotted name in backticks in either page (a module, a module's attribute, or a settings key such as
`store.auto_migrate`). test_architecture.py checks architecture.md's paths."""

from __future__ import annotations

import importlib
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from kvpilot.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DECISIONS = REPO / "docs" / "decisions.md"
PAGES = [DECISIONS, REPO / "docs" / "architecture.md"]
# The same rule as test_architecture.py: segments joined by '/', a file with an extension or a folder ending in '/'.
_PATH = re.compile(r"(?<![\w/{.])((?:[A-Za-z_][\w.-]*/)+(?:[\w-]+\.(?:py|md|toml|yaml|proto|json))?)(?![\w/])")
_DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
# Where a dotted name can start: our import packages, and the settings' top-level sections.
_PACKAGES = {"collector", "detectors", "scaler", "store", "api", "simulator", "kvpilot", "alerts", "dashboards"}
ROOTS = _PACKAGES | set(Settings.model_fields)


def _paths(text: str) -> set[str]:
    return {m.group(1) for m in _PATH.finditer(text) if not m.group(1).startswith(("http", "v1/"))}


_FILE_ENDINGS = {"py", "md", "yaml", "json", "toml", "proto", "csv"}  # `api.py` is a file name, checked as a path


def _dotted(text: str) -> set[str]:
    return {
        name
        for name in _DOTTED.findall(text)
        if name.split(".")[0] in ROOTS and name.rsplit(".", 1)[1] not in _FILE_ENDINGS
    }


def _is_object(name: str) -> bool:
    """A module, or attributes reached from the longest importable module prefix."""
    parts = name.split(".")
    if parts[0] not in _PACKAGES:
        return False
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _is_setting(name: str) -> bool:
    """A key of the settings file, section by section (a mapping's own keys are free: scaler.deployments.<name>)."""
    model: type[BaseModel] = Settings
    parts = name.split(".")
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        if i == len(parts) - 1:
            return True
        inner = _model_in(field.annotation)
        if inner is None:
            return typing.get_origin(field.annotation) is dict
        model = inner
    return True


def _unresolved(names: set[str]) -> list[str]:
    return sorted(n for n in names if not (_is_object(n) or _is_setting(n)))


def test_every_path_in_decisions_exists() -> None:
    paths = _paths(DECISIONS.read_text())
    assert len(paths) > 10  # the pattern finds the page's paths at all
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/decisions.md names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_dotted_name_resolves(page: Path) -> None:
    names = _dotted(page.read_text())
    assert names  # the pattern finds the page's names at all
    missing = _unresolved(names)
    assert not missing, f"{page.name} names modules, attributes or settings that do not exist: {missing}"


def test_the_checks_catch_what_does_not_exist() -> None:
    text = "`scaler/nothing_here.py`, `scaler.planner.NoSuchThing`, `scaler.nothing_here`, `store.auto_migrat`"
    assert _paths(text) == {"scaler/nothing_here.py"}
    assert _unresolved(_dotted(text)) == ["scaler.nothing_here", "scaler.planner.NoSuchThing", "store.auto_migrat"]
    real = "`scaler.backtest.sim.rolled`, `collector.discovery.kind`, `store.auto_migrate`, `scaler.planner`"
    assert _unresolved(_dotted(real)) == []
