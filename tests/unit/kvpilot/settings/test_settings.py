"""Settings: YAML + KVPILOT_* environment, precedence, flat aliases, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("KVPILOT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_defaults_are_the_zero_config_demo(tmp_path: Path) -> None:
    s = load_settings()
    assert s.collector.interval_s == 5
    assert s.collector.discovery.kind == "simulator"
    assert s.database_url == f"sqlite:///{tmp_path / 'xdg' / 'kvpilot' / 'kvpilot.db'}"
    assert s.drains.dry_run is True
    assert s.scaler.mode == "advisory"
    assert not s.auth_enabled


@pytest.mark.parametrize(
    ("env", "path", "value"),
    [
        # the flat alias operators expect
        ({"KVPILOT_HTTP_PORT": "9000"}, "api.http_port", 9000),
        # the database URL alias
        ({"KVPILOT_DATABASE_URL": "postgresql://db/kv"}, "store.database_url", "postgresql://db/kv"),
        # nested variables with __
        ({"KVPILOT_COLLECTOR__INTERVAL_S": "2.5"}, "collector.interval_s", 2.5),
        # deeper nesting
        ({"KVPILOT_COLLECTOR__DISCOVERY__KIND": "static"}, "collector.discovery.kind", "static"),
        # the nested form wins over the flat alias
        ({"KVPILOT_HTTP_PORT": "9000", "KVPILOT_API__HTTP_PORT": "9001"}, "api.http_port", 9001),
    ],
)
def test_environment(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], path: str, value: object) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    obj: object = load_settings()
    for part in path.split("."):
        obj = getattr(obj, part)
    assert obj == value


def test_tokens_are_comma_separated_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_READ_TOKENS", " r1-aaaaaaaaaaaaaaaa , r2-bbbbbbbbbbbbbbbb,,")
    monkeypatch.setenv("KVPILOT_ADMIN_TOKENS", "a1-cccccccccccccccc")
    s = load_settings()
    assert [t.get_secret_value() for t in s.api.read_tokens] == ["r1-aaaaaaaaaaaaaaaa", "r2-bbbbbbbbbbbbbbbb"]
    assert "cccc" not in repr(s)  # secrets stay out of reprs and logs
    assert s.auth_enabled


def test_yaml_then_environment_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "k.yaml"
    cfg.write_text(
        "collector:\n  interval_s: 10\n  timeout_s: 3\n"
        "scaler:\n  deployments:\n    llm/chat: {min_replicas: 2, max_replicas: 8}\n"
    )
    monkeypatch.setenv("KVPILOT_COLLECTOR__INTERVAL_S", "20")
    s = load_settings(cfg)
    assert s.collector.interval_s == 20  # environment over file
    assert s.collector.timeout_s == 3  # file over default, and the rest of the section kept
    assert s.scaler.deployments["llm/chat"].max_replicas == 8
    assert s.scaler.default.max_replicas == 100  # KEDA's maxReplicaCount
    assert load_settings(cfg, api={"http_port": 1234}).api.http_port == 1234  # --port over all


@pytest.mark.parametrize(
    ("yaml_text", "env", "named"),
    [
        ("collector: {interval_s: 0}\n", {}, "collector.interval_s"),  # must be > 0
        ("collector: {interval_s: 2, timeout_s: 3}\n", {}, "timeout_s"),  # a scrape must fit in a tick
        ("collector: {interval_s: 120}\n", {}, "collector.stale_after_s"),  # readiness outlasts a tick's scrapes
        ("collector: {intervall_s: 2}\n", {}, "collector.intervall_s"),  # typos are refused, not ignored
        ("scaler: {mode: yolo}\n", {}, "scaler.mode"),  # only advisory|keda|direct
        ("scaler: {deployments: {chat: {}}}\n", {}, "namespace/name"),  # keys must be namespaced
        ("scaler: {default: {min_replicas: 5, max_replicas: 2}}\n", {}, "min_replicas"),  # ordered bounds
        ("detectors: {kv: {near_full: 2}}\n", {}, "detectors.kv"),  # detector thresholds validated by detectors
        ("detectors: {gpu: {nonsense: 1}}\n", {}, "nonsense"),  # unknown detector field
        ("ha: {lease_duration_s: 5, renew_every_s: 10}\n", {}, "renew_every_s"),  # renew inside the lease
        ("collector: {discovery: {kind: promql}}\n", {}, "promql_url"),  # promql needs a URL
        # ... an http(s) one: each was accepted and failed every tick (`http://[::1`, a port past 65535: tracebacks)
        ("collector: {discovery: {kind: promql, promql_url: prometheus}}\n", {}, "promql_url (k.yaml:1): must be"),
        ("collector: {discovery: {kind: promql, promql_url: 'http://[::1'}}\n", {}, "promql_url (k.yaml:1): must"),
        ("collector: {discovery: {kind: promql, promql_url: 'http://h:99999'}}\n", {}, "promql_url (k.yaml:1): must"),
        ("- a list\n", {}, "mapping"),  # the file must be a mapping
        ("Collector: {interval_s: 3}\n", {}, "Collector (k.yaml:1): Extra inputs"),  # keys as written, case too
        ("1: a\n", {}, "1 (k.yaml:1): Extra inputs"),  # a key that is no string is an unknown key, not a crash
        ("a: [unclosed\n", {}, "not valid YAML"),  # syntax errors name the file
        ("", {"KVPILOT_API__HTTP_PORT": "http"}, "api.http_port"),  # env values are validated too
        ("environment: production\n", {}, "api.admin_tokens"),  # production needs an admin token
        ("environment: production\n", {"KVPILOT_ADMIN_TOKENS": "changeme"}, "well-known"),  # and not a default one
        ("environment: production\n", {"KVPILOT_ADMIN_TOKENS": "x" * 30, "KVPILOT_READ_TOKENS": "short"},
         "api.read_tokens[0]"),  # read tokens too
        ("environment: production\n", {"KVPILOT_ADMIN_TOKENS": "a" * 40}, "too predictable"),  # long but no entropy
        ("environment: production\nsharding: {shards: 3}\ndrains: {dry_run: false}\n",
         {"KVPILOT_ADMIN_TOKENS": "9d1f0c3b7e5a2f84c6d0e1"}, "KVPILOT_DATABASE_URL"),  # drain claims in one store
        ("environment: production\nsharding: {shards: 3}\ndrains: {dry_run: false}\n",
         {"KVPILOT_ADMIN_TOKENS": "9d1f0c3b7e5a2f84c6d0e1", "KVPILOT_DATABASE_URL": ""},
         "KVPILOT_DATABASE_URL"),  # set but empty is the default SQLite (review H, session 19)
        ("environment: production\nsharding: {shards: 3}\ndrains: {dry_run: false}\n",
         {"KVPILOT_ADMIN_TOKENS": "9d1f0c3b7e5a2f84c6d0e1", "KVPILOT_DATABASE_URL": "sqlite:///data/k.db"},
         "KVPILOT_DATABASE_URL"),  # a SQLite file named outright is still one file per instance
        ("", {"KVPILOT_ADMIN_TOKENS": "9d1f0c3b7e5a2f84c6d0", "KVPILOT_READ_TOKENS": "9d1f0c3b7e5a2f84c6d0"},
         "also a read token"),  # read must not equal admin, in any environment
        ("collector: {discovery: {static_targets: [{url: 'http://u:pw@h:1/'}]}}\n", {}, "credentials"),  # no userinfo
        ("collector: {discovery: {static_targets: [{url: 'http://h:99999/'}]}}\n", {}, "port"),  # port range
        ("collector: {discovery: {static_targets: [{url: 'http://h:1/', engine: bogus}]}}\n", {}, "unknown engine"),
        ("collector: {discovery: {static_targets: [{url: 'http://h:1/', deployment: 'probe/a/b'}]}}\n", {},
         "not a Kubernetes name"),  # the name that once crashed every restart
        ("detectors: {only: [stuck_gpu, kv_exhaustoin]}\n", {}, "detectors.only (k.yaml:1): unknown "
         "detector(s) ['kv_exhaustoin']"),  # a typo once failed every tick's detect stage, after a clean start
    ],
)  # fmt: skip
def test_invalid_settings_name_the_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, yaml_text: str, env: dict[str, str], named: str
) -> None:
    cfg = tmp_path / "k.yaml"
    cfg.write_text(yaml_text)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SettingsError) as e:
        load_settings(cfg)
    assert named in str(e.value)


def test_sharded_drains_that_act_load_with_a_database_url_or_in_dry_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the refusal above is for the default SQLite only: one PostgreSQL, or drains that only record, start
    cfg = tmp_path / "k.yaml"
    cfg.write_text("environment: production\nsharding: {shards: 3}\ndrains: {dry_run: false}\n")
    monkeypatch.setenv("KVPILOT_ADMIN_TOKENS", "9d1f0c3b7e5a2f84c6d0e1")
    monkeypatch.setenv("KVPILOT_DATABASE_URL", "postgresql+psycopg://kvpilot@db/kvpilot")
    assert load_settings(cfg).database_url == "postgresql+psycopg://kvpilot@db/kvpilot"
    monkeypatch.delenv("KVPILOT_DATABASE_URL")
    monkeypatch.setenv("KVPILOT_DRAINS__DRY_RUN", "true")
    assert load_settings(cfg).drains.dry_run


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    # the YAML source of pydantic-settings skips a missing file; one named on the command line must be there
    with pytest.raises(SettingsError, match=r"cannot read config file .*nope\.yaml: No such file"):
        load_settings(tmp_path / "nope.yaml")
    with pytest.raises(SettingsError, match=r"cannot read config file .*: Is a directory"):
        load_settings(tmp_path)


def test_the_file_of_one_load_does_not_reach_the_next(tmp_path: Path) -> None:
    cfg = tmp_path / "k.yaml"
    cfg.write_text("collector: {interval_s: 10, timeout_s: 3}\n")
    assert load_settings(cfg).collector.interval_s == 10
    assert load_settings().collector.interval_s == 5
    (tmp_path / "bad.yaml").write_text("collector: {interval_s: 0}\n")
    with pytest.raises(SettingsError):
        load_settings(tmp_path / "bad.yaml")
    assert load_settings().collector.interval_s == 5  # not even after a load that failed


def test_production_with_strong_tokens_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_ENVIRONMENT", "production")
    monkeypatch.setenv("KVPILOT_ADMIN_TOKENS", "3f9c1e7a5b2d8064c1fe93a7d5b0e8264a1c7f3e9b5d2a60")
    assert load_settings().environment == "production"


@given(st.dictionaries(st.sampled_from(["collector", "scaler", "api", "store", "drains", "ha", "bogus"]),
                       st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5),
                                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                                        max_size=3),
                                    max_leaves=8), max_size=4))  # fmt: skip
@settings(max_examples=150, deadline=None)
def test_arbitrary_config_documents_load_or_fail_with_settings_error(doc: dict) -> None:
    # Whatever a config file holds, loading either succeeds or raises SettingsError (never anything else).
    message = "loaded"
    try:
        load_settings(**doc)
    except SettingsError as e:
        message = str(e)
    assert message == "loaded" or message.startswith("invalid configuration")


def test_the_shipped_configmap_is_a_valid_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # deploy/base/configmap.yaml must load with the Secret's variables set, or every install would crash-loop.
    import yaml

    repo = Path(__file__).resolve().parents[4]
    configmap = yaml.safe_load((repo / "deploy" / "base" / "configmap.yaml").read_text())
    cfg = tmp_path / "config.yaml"
    cfg.write_text(configmap["data"]["config.yaml"])
    monkeypatch.setenv("KVPILOT_ADMIN_TOKENS", "3f9c1e7a5b2d8064c1fe93a7d5b0e8264a1c7f3e9b5d2a60")
    monkeypatch.setenv("KVPILOT_DATABASE_URL", "postgresql://kvpilot:pw@db/kvpilot")
    monkeypatch.setenv("KVPILOT_HA__IDENTITY", "kvpilot-7d9f-abcde")
    s = load_settings(cfg)
    assert (s.environment, s.collector.discovery.kind, s.ha.enabled) == ("production", "kubernetes", True)
    assert s.ha.identity == "kvpilot-7d9f-abcde"
