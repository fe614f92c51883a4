"""The generated docs: every setting documented and reachable by the env name the page gives; the engine page says
"not exported" exactly where an adapter leaves a field unknown on a real page; the committed pages are current."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from collector.engines import ENGINES
from collector.engines._declarative import HISTOGRAM_FIELDS, SCALAR_FIELDS, DeclarativeAdapter
from collector.exposition import parse
from collector.samples import ReplicaSample, TargetInfo
from kvpilot import docs_engines, docs_fallbacks, docs_gen
from kvpilot.settings import FLAT_ALIASES, Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[3]
ROWS = [row for section in docs_gen.iter_sections() for row in section.rows]


def _leaf_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every leaf of the settings model, walked independently of the generator."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        sub, how = docs_gen._model_in(field.annotation)
        if sub is not None and how == "":
            out += _leaf_paths(sub, path)
            continue
        out.append(path)
        if sub is not None:
            out += _leaf_paths(sub, path + how)
    return out


def test_every_settings_field_is_a_row_and_on_the_page() -> None:
    page = docs_gen.configuration_reference()
    paths = {r.path for r in ROWS}
    for leaf in _leaf_paths(Settings):
        assert leaf in paths, leaf
        assert f"| `{leaf}` |" in page, leaf


def test_every_row_has_a_description_type_and_default() -> None:
    missing = [r.path for r in ROWS if not r.description]
    assert not missing, f"settings without a description (add a Field description or a comment): {missing}"
    assert all(r.type and r.default for r in ROWS)


def test_fallback_descriptions_are_not_stale() -> None:
    # a fallback must name a real row, and give way once the source documents the field itself
    by_path = {r.path: r for r in ROWS}
    stale = [p for p in docs_fallbacks.FALLBACK_DESCRIPTIONS if p not in by_path]
    assert not stale, f"FALLBACK_DESCRIPTIONS names no setting: {stale}"
    for section_model, prefix in _models_with_prefix(Settings, ""):
        comments = docs_gen.source_comments(section_model)
        for name, field in section_model.model_fields.items():
            path = f"{prefix}.{name}" if prefix else name
            if path in docs_fallbacks.FALLBACK_DESCRIPTIONS:
                assert not field.description, f"{path} has a Field description now"
                assert not comments.get(name), f"{path} has a source comment now"


def _models_with_prefix(model: type[BaseModel], prefix: str) -> list[tuple[type[BaseModel], str]]:
    out = [(model, prefix)]
    for name, field in model.model_fields.items():
        sub, how = docs_gen._model_in(field.annotation)
        if sub is not None:
            out += _models_with_prefix(sub, (f"{prefix}.{name}" if prefix else name) + how)
    return out


def test_every_validator_is_described_and_fallback_checks_name_real_validators() -> None:
    models = {m.__name__: m for m, _ in _models_with_prefix(Settings, "")}
    for key in docs_fallbacks.FALLBACK_CHECKS:
        model_name, _, validator = key.partition(".")
        assert validator in docs_gen.validator_names(models[model_name]), key
    for name, model in models.items():
        for validator in docs_gen.validator_names(model):
            decorators = model.__pydantic_decorators__
            dec = decorators.model_validators.get(validator) or decorators.field_validators[validator]
            assert dec.func.__doc__ or f"{name}.{validator}" in docs_fallbacks.FALLBACK_CHECKS, f"{name}.{validator}"


def _is_checked_scalar(tp: Any) -> bool:
    tp, _ = docs_gen._strip_optional(tp)
    return tp in (int, float, bool) or getattr(tp, "__origin__", None) is Literal


ENV_ROWS = [r for r in ROWS if r.env and _is_checked_scalar(r.python_type)]


@pytest.mark.parametrize("row", ENV_ROWS, ids=[r.path for r in ENV_ROWS])
def test_documented_env_variable_reaches_its_field(row: docs_gen.SettingRow, monkeypatch: pytest.MonkeyPatch) -> None:
    # a value no int, float, bool or enum accepts: the error must name the documented path
    assert row.env is not None
    monkeypatch.setenv(row.env, "not-a-valid-value")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert row.path in str(err.value)


@pytest.mark.parametrize(("env", "path"), [(e, ".".join(p)) for e, p in FLAT_ALIASES.items()])
def test_documented_flat_alias_reaches_its_field(env: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # every alias on the page sets the field the page says
    row = next(r for r in ROWS if r.path == path)
    assert row.flat_alias == env
    value = "http://db.example/x" if path == "store.database_url" else "12345"
    monkeypatch.setenv(env, value)
    node: Any = load_settings()
    for part in path.split("."):
        node = getattr(node, part)
    shown = [t.get_secret_value() for t in node] if isinstance(node, tuple) else node
    assert shown in (value, int(value) if value.isdigit() else value, [value])


def test_every_overridable_threshold_is_documented() -> None:
    page = docs_gen.configuration_reference()
    from detectors.thresholds import DEFAULT

    for section in docs_gen.THRESHOLD_SECTIONS:
        for f in dataclasses.fields(getattr(DEFAULT, section)):
            if not isinstance(getattr(getattr(DEFAULT, section), f.name), tuple):
                assert f"`detectors.{section}.{f.name}`" in page


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # trailing comment on the field's line
        ("class C:\n    a: int = 1  # the a\n", {"a": "the a"}),
        # comment lines just above join, in order
        ("class C:\n    # first\n    # second\n    a: int = 1\n", {"a": "first second"}),
        # a blank line cuts the comment off from the field
        ("class C:\n    # orphan\n\n    a: int = 1\n", {}),
        # a comment above the previous field belongs to it, not to the next one
        ("class C:\n    # of a\n    a: int = 1\n    b: int = 2\n", {"a": "of a"}),
    ],
)
def test_source_comments(source: str, expected: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kvpilot.docs_gen.inspect.getsource", lambda _cls: source)
    assert docs_gen.source_comments(type("C", (), {})) == expected


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (int, "int"),  # plain
        (int | None, "int or null"),  # optional says null, the YAML word
        (Literal["a", "b"], "one of `a`, `b`"),  # enums list their values
        (tuple[str, ...], "list of str"),  # tuples are YAML lists
        (dict[str, float], "map of str to float"),
        (Path | None, "path or null"),
    ],
)
def test_type_name(tp: Any, expected: str) -> None:
    assert docs_gen.type_name(tp) == expected


# -- engines page -------------------------------------------------------------------------------------------------


def test_every_engine_has_enable_notes_and_every_field_a_meaning() -> None:
    assert set(docs_engines.ENABLE) == set(ENGINES)
    identity = {"namespace", "deployment", "replica", "node", "engine", "model", "timestamp", "role"}
    canonical = {f.name for f in dataclasses.fields(ReplicaSample)} - identity
    assert set(docs_engines.MEANING) == canonical == set(SCALAR_FIELDS + HISTOGRAM_FIELDS)


def test_engines_page_names_every_series_an_adapter_reads() -> None:
    page = docs_engines.engines_page()
    for name, adapter in ENGINES.items():
        assert isinstance(adapter, DeclarativeAdapter)
        assert f"(`{name}`)" in page
        for field in adapter.fields.values():
            for series in field.sources:
                assert f"`{series}`" in page, (name, str(series))


# (engine, a real page of it): fields the page calls "not exported" must be unknown after adapting that page
FIXTURES = [
    ("vllm", "vllm__DataDog__integrations-core__vllm_metrics.txt"),
    ("sglang", "sglang__DataDog__integrations-core__sglang_metrics.txt"),
    ("tgi", "tgi__DataDog__integrations-core__payload__partial.txt"),
    ("trtllm", "trtllm-triton__triton-inference-server__tensorrtllm_backend__README.txt"),
    ("llamacpp", "llamacpp-with-kv__handwritten.txt"),
]


@pytest.mark.parametrize(("engine", "fixture"), FIXTURES)
def test_not_exported_means_unknown_on_a_real_page(metrics_fixtures: Path, engine: str, fixture: str) -> None:
    adapter = ENGINES[engine]
    assert isinstance(adapter, DeclarativeAdapter)
    sample = adapter.adapt(parse((metrics_fixtures / fixture).read_text()), TargetInfo(url="http://x"), 0.0)[0]
    for field, where in docs_engines.mapping_rows(adapter):
        if "not exported" in where:
            assert getattr(sample, field) is None, (engine, field)


def test_committed_pages_are_what_the_code_generates() -> None:
    for rel, content in docs_gen.files().items():
        assert (ROOT / rel).read_text() == content, f"{rel} is stale: run `make generate`"


# -- docs/README.md index -----------------------------------------------------------------------------------------


def _links(markdown: str) -> list[str]:
    import re

    return [m for m in re.findall(r"\]\(([^)#\s]+)", markdown) if "://" not in m]


def test_docs_index_links_resolve_and_cover_every_page() -> None:
    docs = ROOT / "docs"
    links = _links((docs / "README.md").read_text())
    broken = [link for link in links if not (docs / link).exists()]
    assert not broken, f"docs/README.md links to missing files: {broken}"
    linked = {(docs / link).resolve() for link in links}
    pages = {p.resolve() for p in docs.rglob("*.md") if p.name != "README.md"}
    unlisted = sorted(str(p.relative_to(docs.resolve())) for p in pages - linked)
    assert not unlisted, f"docs pages missing from docs/README.md: {unlisted}"


@pytest.mark.parametrize("page", ["quickstart.md", "scaling-large-fleets.md", "README.md"])
def test_hand_written_pages_link_only_to_what_exists(page: str) -> None:
    # relative links in the pages this suite owns must resolve (a renamed file breaks the test, not the reader)
    docs = ROOT / "docs"
    broken = [link for link in _links((docs / page).read_text()) if not (docs / link).exists()]
    assert not broken, f"{page}: {broken}"


TOP_LEVEL = ("alerts/", "api/", "bench/", "collector/", "dashboards/", "deploy/", "detectors/", "docs/", "kvpilot/",
             "scaler/", "simulator/", "store/", "tests/")  # fmt: skip


@pytest.mark.parametrize("page", ["quickstart.md", "scaling-large-fleets.md"])
def test_repository_paths_named_in_hand_written_pages_exist(page: str) -> None:
    # every `path/like/this` the page names, under one of the repository's folders, is there
    import re

    text = re.sub(r"```.*?```", "", (ROOT / "docs" / page).read_text(), flags=re.S)  # code blocks: not prose
    named = {m.split()[0].rstrip(",.:") for m in re.findall(r"`([^`]+)`", text) if m.strip()}
    paths = [p for p in named if p.startswith(TOP_LEVEL) and "{" not in p and "*" not in p]
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"{page} names paths that do not exist: {missing}"


@pytest.mark.parametrize(
    ("env", "value", "path", "expected"),
    [
        # a list of sections, as the page says: the whole list as JSON
        ("KVPILOT_COLLECTOR__DISCOVERY__STATIC_TARGETS", '[{"url": "http://a:1/metrics"}]',
         "collector.discovery.static_targets", 1),
        # a map of sections
        ("KVPILOT_SCALER__DEPLOYMENTS", '{"llm/chat": {"max_replicas": 3}}', "scaler.deployments", 1),
        # the detector override example the page gives
        ("KVPILOT_DETECTORS__KV", '{"near_full": 0.85}', "detectors.kv", 1),
    ],
)  # fmt: skip
def test_lists_and_maps_from_the_environment_as_json(
    env: str, value: str, path: str, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert any(r.env == env for r in ROWS)
    monkeypatch.setenv(env, value)
    node: Any = load_settings()
    for part in path.split("."):
        node = getattr(node, part)
    assert len(node) == expected
