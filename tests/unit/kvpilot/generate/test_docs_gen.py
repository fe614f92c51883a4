"""The generated docs: every setting documented (a description on every field, rendered from the settings' JSON
schema with its default) and reachable by the env name the page gives; the engine page says "not exported" exactly
where an adapter leaves a field unknown on a real page; the committed pages are current."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, SecretStr, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from collector.engines import ENGINES
from collector.engines._declarative import HISTOGRAM_FIELDS, SCALAR_FIELDS, DeclarativeAdapter
from collector.exposition import parse
from collector.samples import ReplicaSample, TargetInfo
from kvpilot.generate import engines_doc as docs_engines
from kvpilot.generate import markdown as md
from kvpilot.generate import settings_doc as docs_gen
from kvpilot.settings import FLAT_ALIASES, Settings, SettingsError, load_settings
from kvpilot.settings.cost import default_gpus

ROOT = Path(__file__).resolve().parents[4]
ROWS = [row for section in docs_gen.iter_sections() for row in section.rows]


def _models_in(tp: Any) -> tuple[type[BaseModel], str] | None:
    """The model a field annotation holds, walked from the Python types (not the schema the generator reads), and
    how: "" (directly, or optional), "[]" (tuple items) or "{}" (dict values)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp, ""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        models = [m for m in map(_models_in, args) if m is not None]
        return models[0] if models else None
    if origin is tuple and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], "[]"
    if origin is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
        return args[1], "{}"
    return None


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, FieldInfo, bool]]:
    """(YAML path, field, is a leaf) for every field of the settings, sections included."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        held = _models_in(field.annotation)
        out.append((path, field, held is None or held[1] != ""))
        if held is not None:
            out += _fields(held[0], path + held[1])
    return out


FIELDS = _fields(Settings)
LEAVES = [(path, field) for path, field, leaf in FIELDS if leaf]


def _page_rows(page: str) -> dict[str, list[str]]:
    """YAML path -> the cells of its row in the settings tables of the reference."""
    rows = {}
    for line in page.splitlines():
        if line.startswith("| `") and line.count(" | ") == 5:
            cells = [c.strip() for c in line.strip("| ").split(" | ")]
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_settings_field_has_a_description() -> None:
    # sections too: the schema (and editors that read it) carry it, and the page shows a model's without a docstring
    missing = [path for path, field, _ in FIELDS if not (field.description or "").strip()]
    assert not missing, f"settings fields without Field(description=...): {missing}"
    assert len(FIELDS) > 100  # the walk reached every section


def _expected_default(field: FieldInfo) -> str:
    """The default the page must give, from the field itself."""
    value: Any
    if field.default_factory is not None:
        if field.default_factory in (dict, list, tuple, default_gpus):  # none depends on the host
            value = field.default_factory()
        else:
            return "computed at start"
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return f"`{docs_gen.yaml_value(TypeAdapter(Any).dump_python(value, mode='json'))}`"


def test_the_reference_lists_every_field_with_its_default_type_and_description() -> None:
    rows = _page_rows(docs_gen.configuration_reference())
    for path, field in LEAVES:
        assert path in rows, f"{path} is not on the page"
        _, _, type_, default, _, description = rows[path]
        assert default == _expected_default(field), path
        assert type_, path
        assert description == md.md_cell(field.description or ""), path
    assert set(rows) == {path for path, _ in LEAVES}, "a row names no settings field"


@pytest.mark.parametrize(
    ("path", "default"),
    [
        ("collector.interval_s", "`5.0`"),  # a plain default
        ("collector.discovery.static_targets", "`[]`"),  # an empty tuple is a YAML list
        ("detectors.kv", "`{}`"),  # a default_factory=dict is shown, not "computed"
        ("cost.gpus", "`{H100: {price_per_hour_usd: 2.69, power_w: 700.0}, "),  # so is the price table, as declared
        ("data_dir", "computed at start"),  # host-dependent: the description says how
        ("ha.identity", "computed at start"),
        ("scaler.default.profile.kv_tokens", "required"),  # required inside an optional section
    ],
)
def test_defaults_as_the_page_gives_them(path: str, default: str) -> None:
    rows = _page_rows(docs_gen.configuration_reference())
    assert rows[path][3].startswith(default)


def test_every_validator_says_what_it_checks() -> None:
    # the "Checked at start" line of each section is the validators' docstrings
    models: dict[str, type[BaseModel]] = {"Settings": Settings}
    for _, field, _ in FIELDS:
        if (held := _models_in(field.annotation)) is not None:
            models[held[0].__name__] = held[0]
    for name, model in models.items():
        for validator in docs_gen.validator_names(model):
            decorators = model.__pydantic_decorators__
            dec = decorators.model_validators.get(validator) or decorators.field_validators[validator]
            assert (dec.func.__doc__ or "").strip(), f"{name}.{validator} has no docstring"


def _is_checked_scalar(schema: dict[str, Any]) -> bool:
    node, _ = docs_gen._without_null(schema)
    return node.get("type") in ("integer", "number", "boolean") or "enum" in node


ENV_ROWS = [r for r in ROWS if r.env and _is_checked_scalar(r.schema)]


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


def test_threshold_descriptions_are_their_fields_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    # the page renders what each dataclass field declares, as pydantic's Field(description=...) for the settings;
    # no source is read for them (with getsource failing, descriptions read from comments would all be blank)
    from detectors.thresholds import DEFAULT

    def unreadable(_obj: object) -> str:
        raise OSError("no source")

    monkeypatch.setattr("kvpilot.generate.markdown.inspect.getsource", unreadable)
    described = 0
    for section in docs_gen.THRESHOLD_SECTIONS:
        fields = {f.name: f for f in dataclasses.fields(getattr(DEFAULT, section))}
        for path, _type, _default, description in docs_gen.threshold_rows(section):
            assert description == fields[path.rsplit(".", 1)[1]].metadata.get("description", "")
            described += bool(description)
    assert described == 39  # every overridable threshold


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
    monkeypatch.setattr("kvpilot.generate.markdown.inspect.getsource", lambda _cls: source)
    assert md.source_comments(type("C", (), {})) == expected


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (int, "int"),  # plain
        (float, "float"),  # JSON's "number" in the operator's word
        (int | None, "int or null"),  # optional says null, the YAML word
        (Literal["a", "b"], "one of `a`, `b`"),  # enums list their values
        (Literal["a", "b"] | None, "one of `a`, `b` or null"),
        (tuple[str, ...], "list of str"),  # tuples are YAML lists
        (tuple[SecretStr, ...], "list of secret string"),  # secrets say so
        (dict[str, float], "map of str to float"),
        (dict[Literal["x", "y"], int], "map of one of `x`, `y` to int"),  # restricted keys
        (dict[str, float | str], "map of str to float or str"),  # unions of several
        (Path | None, "path or null"),
    ],
)
def test_schema_type(tp: Any, expected: str) -> None:
    assert docs_gen.schema_type(TypeAdapter(tp).json_schema()) == expected


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
    for rel, content in {**docs_gen.files(), **docs_engines.files()}.items():
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
