"""The pages name only what exists: every repository path in docs/decisions.md, and every dotted name in backticks in
README.md and every page under docs/ (a module, a module's attribute, a settings key such as `store.auto_migrate` or
`scaler.pools.decode.gpu_type`, or a field of the API's deployment view such as `cost.problem`).
test_architecture.py checks architecture.md's paths."""

from __future__ import annotations

import importlib
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from api.schemas import CostOut
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


def _mapping_keys(annotation: object) -> tuple[object, ...] | None:
    """The keys a mapping field allows: () for any (`dict[str, …]`), the values of a Literal key type
    (`dict[Literal["prefill", "decode"], …]`); None when the field is not a mapping."""
    if typing.get_origin(annotation) is dict:
        key = typing.get_args(annotation)[0]
        return typing.get_args(key) if typing.get_origin(key) is typing.Literal else ()
    for arg in typing.get_args(annotation):  # Optional[dict[…]]
        found = _mapping_keys(arg)
        if found is not None:
            return found
    return None


def _is_setting(name: str) -> bool:
    """A key of the settings file, section by section; a mapping's own keys are free (scaler.deployments.<name>)
    unless its key type lists them (scaler.pools.decode), and the model of its values goes on from there."""
    model: type[BaseModel] = Settings
    parts = name.split(".")
    i = 0
    while i < len(parts):
        field = model.model_fields.get(parts[i])
        if field is None:
            return False
        if i == len(parts) - 1:
            return True
        inner = _model_in(field.annotation)
        keys = _mapping_keys(field.annotation)
        if keys is not None:
            if keys and parts[i + 1] not in keys:
                return False
            if inner is None or i + 1 == len(parts) - 1:
                return True
            i += 1  # the key; the value's model goes on
        elif inner is None:
            return False
        model = inner
        i += 1
    return True


# The API's deployment view (GET /v1/deployments/{ns}/{name}) as the pages write its fields: `cost.problem`.
_API_VIEWS: dict[str, type[BaseModel]] = {"cost": CostOut}
# Dotted words in backticks that are neither code nor settings, and what they are.
_NOT_NAMES = {
    "kvpilot.db": "the SQLite file's name",
    "kvpilot.kvpilot.svc.cluster.local": "the Service's name in the cluster's DNS",
}


def _is_api_field(name: str) -> bool:
    view, _, field = name.partition(".")
    return view in _API_VIEWS and field in _API_VIEWS[view].model_fields


def _unresolved(names: set[str]) -> list[str]:
    return sorted(n for n in names if n not in _NOT_NAMES and not (_is_object(n) or _is_setting(n) or _is_api_field(n)))


def test_every_path_in_decisions_exists() -> None:
    paths = _paths(DECISIONS.read_text())
    assert len(paths) > 10  # the pattern finds the page's paths at all
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/decisions.md names paths that do not exist: {missing}"


ALL_PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_pattern_finds_the_pages_names(page: Path) -> None:
    assert _dotted(page.read_text())


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_dotted_name_resolves(page: Path) -> None:
    missing = _unresolved(_dotted(page.read_text()))
    assert not missing, f"{page.name} names modules, attributes or settings that do not exist: {missing}"


def test_the_checks_catch_what_does_not_exist() -> None:
    text = "`scaler/nothing_here.py`, `scaler.planner.NoSuchThing`, `scaler.nothing_here`, `store.auto_migrat`"
    assert _paths(text) == {"scaler/nothing_here.py"}
    assert _unresolved(_dotted(text)) == ["scaler.nothing_here", "scaler.planner.NoSuchThing", "store.auto_migrat"]
    real = "`scaler.backtest.sim.rolled`, `collector.discovery.kind`, `store.auto_migrate`, `scaler.planner`"
    assert _unresolved(_dotted(real)) == []
    keyed = "`scaler.pools.decode.gpu_type`, `scaler.pools.both`, `scaler.deployments.chat.max_replicas`"
    assert _unresolved(_dotted(keyed + ", `scaler.deployments.chat.max_replica`, `cost.problem`, `cost.problems`")) == [
        "cost.problems",
        "scaler.deployments.chat.max_replica",
        "scaler.pools.both",
    ]


def _env_names(model: type[BaseModel] = Settings, prefix: str = "KVPILOT_") -> set[str]:
    """Every KVPILOT_* variable the settings read: a section's fields below it, joined by `__`."""
    names = set()
    for name, field in model.model_fields.items():
        env = prefix + name.upper()
        names.add(env)
        inner = _model_in(field.annotation)
        if (
            inner is not None
            and _mapping_keys(field.annotation) is None
            and typing.get_origin(field.annotation) is not tuple
        ):
            names |= _env_names(inner, env + "__")
    return names


# KVPILOT_* names the pages write that are not settings, and what reads them.
_OTHER_ENV = {
    "KVPILOT_PURE": "collector/__init__.py: ignore a compiled build",
    "KVPILOT_DOCS_SLOW": "tests/docs/test_docs_run.py: run the minutes-long commands too",
    "KVPILOT_KEDA_TOKEN": "deploy/examples/scaledobject.yaml: a variable of the scale target KEDA reads the token from",
}


def test_every_environment_variable_the_pages_name_is_read() -> None:
    from kvpilot.settings import FLAT_ALIASES

    known = _env_names() | set(FLAT_ALIASES) | set(_OTHER_ENV)
    assert "KVPILOT_COLLECTOR__DISCOVERY__PROMQL_URL" in known
    texts = {p: p.read_text() for p in [*ALL_PAGES, *sorted((REPO / "deploy").rglob("*.yaml"))]}
    named = {(p, n) for p, text in texts.items() for n in re.findall(r"\bKVPILOT_[A-Z0-9_]*[A-Z0-9]", text)}
    assert len(named) > 50  # the pattern finds the names at all
    unknown = sorted(f"{p.relative_to(REPO)}: {n}" for p, n in named if n not in known)
    assert not unknown, "KVPILOT_* variables nothing reads:\n" + "\n".join(unknown)
    for name, why in _OTHER_ENV.items():
        assert name in (REPO / why.split(":")[0]).read_text(), why
