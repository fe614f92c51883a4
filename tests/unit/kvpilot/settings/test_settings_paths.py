"""Relative file paths in the YAML configuration are read from the file's folder, not the working directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kvpilot.runtime.sources import build
from kvpilot.settings import load_settings


def test_static_file_beside_the_config_is_found_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "deploy"
    conf.mkdir()
    (conf / "targets.yaml").write_text("- http://10.0.0.1:8000/metrics\n")
    (conf / "kvpilot.yaml").write_text(
        "data_dir: state\n"
        "collector:\n  discovery:\n    kind: static\n    static_file: targets.yaml\n"
        "    simulator_trace: synthetic:rate=2\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = load_settings(conf / "kvpilot.yaml")
    assert s.collector.discovery.static_file == conf / "targets.yaml"
    assert s.data_dir == conf / "state"
    assert str(s.collector.discovery.simulator_trace) == "synthetic:rate=2"  # a built-in trace, not a file
    with build(s) as sources:  # the file loads: the working directory played no part
        found = asyncio.run(sources.discovery.targets())
    assert [t.url for t in found] == ["http://10.0.0.1:8000/metrics"]


def test_absolute_paths_and_environment_paths_are_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kvpilot.yaml").write_text("collector:\n  discovery:\n    static_file: /etc/kvpilot/targets.yaml\n")
    assert load_settings(tmp_path / "kvpilot.yaml").collector.discovery.static_file == Path("/etc/kvpilot/targets.yaml")
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__STATIC_FILE", "mine.yaml")
    assert load_settings(tmp_path / "kvpilot.yaml").collector.discovery.static_file == Path("mine.yaml")


@pytest.mark.parametrize("given_in", ["yaml", "environment"])
def test_a_path_from_home_is_read_from_home_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given_in: str
) -> None:
    # `data_dir: ~/kvpilot` was the folder `~/kvpilot` under the working directory: started from another folder,
    # kvpilot opened an empty store beside it
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)
    paths = {
        "data_dir": "~/kvpilot",
        "collector.discovery.static_file": "~/targets.yaml",
        "collector.discovery.simulator_trace": "~/trace.csv",
        "keda.tls_cert_file": "~/tls.crt",
        "keda.tls_key_file": "~/tls.key",
        "keda.tls_client_ca_file": "~/ca.crt",
    }
    conf = tmp_path / "kvpilot.yaml"
    if given_in == "yaml":
        conf.write_text(
            "data_dir: ~/kvpilot\n"
            "collector: {discovery: {static_file: ~/targets.yaml, simulator_trace: ~/trace.csv}}\n"
            "keda: {tls_cert_file: ~/tls.crt, tls_key_file: ~/tls.key, tls_client_ca_file: ~/ca.crt}\n"
        )
    else:
        conf.write_text("{}\n")
        for dotted, value in paths.items():
            monkeypatch.setenv("KVPILOT_" + dotted.upper().replace(".", "__"), value)
    s: object = load_settings(conf)
    for dotted, value in paths.items():
        read = s
        for part in dotted.split("."):
            read = getattr(read, part)
        assert read == home / value.removeprefix("~/"), dotted
    assert load_settings(conf).database_url == f"sqlite:///{home / 'kvpilot' / 'kvpilot.db'}"


@pytest.mark.parametrize("given_in", ["yaml", "environment"])
def test_an_empty_data_dir_is_the_default_folder_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given_in: str
) -> None:
    # KVPILOT_DATA_DIR="" (or `data_dir: ""`) was the working directory: the store opened wherever kvpilot started
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "kvpilot.yaml"
    conf.write_text('data_dir: ""\n' if given_in == "yaml" else "{}\n")
    if given_in == "environment":
        monkeypatch.setenv("KVPILOT_DATA_DIR", "")
    assert load_settings(conf).data_dir == tmp_path / "xdg" / "kvpilot"
