"""Hostile settings files: null where a threshold takes None (and only there), bytes that are not UTF-8, a key
given twice. Each is read or refused in words that name the field and its line, never with a traceback."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvpilot.settings import SettingsError, load_settings


def _load(tmp_path: Path, text: str | bytes) -> object:
    path = tmp_path / "k.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return load_settings(path)


def _refusal(tmp_path: Path, text: str | bytes) -> list[str]:
    with pytest.raises(SettingsError) as e:
        _load(tmp_path, text)
    return str(e.value).splitlines()


@pytest.mark.parametrize(
    ("yaml_text", "field", "value"),
    [
        # the runbook's advice: demand_load off, projected_usage on (the union had no None: four lines of errors)
        ("detectors: {kv: {projected_usage: 0.6, demand_load: null}}\n", "demand_load", None),
        ("detectors: {kv: {demand_min_rise: null}}\n", "demand_min_rise", None),  # the rising-demand test off
        ("detectors: {kv: {projected_usage: null}}\n", "projected_usage", None),  # its default, spelt out
        ("detectors:\n  kv:\n    demand_load: ~\n", "demand_load", None),  # YAML's other null
    ],
)
def test_null_turns_off_a_rule_that_takes_none(tmp_path: Path, yaml_text: str, field: str, value: object) -> None:
    settings = _load(tmp_path, yaml_text)
    assert getattr(settings.detectors.thresholds(tick_s=5.0).kv, field) is value  # type: ignore[attr-defined]


def test_null_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_DETECTORS__KV", '{"demand_load": null}')
    assert load_settings().detectors.thresholds(tick_s=5.0).kv.demand_load is None


@pytest.mark.parametrize(
    ("variable", "text", "section", "field", "value"),
    [
        # every KVPILOT_* variable is text: a threshold read from one takes its own type (a number was refused)
        ("KVPILOT_DETECTORS__PREFIX__LOST_AFFINITY_DROP", "0.3", "prefix", "lost_affinity_drop", 0.3),
        ("KVPILOT_DETECTORS__PREFIX__LOST_AFFINITY_DROP", "null", "prefix", "lost_affinity_drop", None),
        ("KVPILOT_DETECTORS__KV__NEAR_FULL", " 0.85 ", "kv", "near_full", 0.85),
        ("KVPILOT_DETECTORS__KV__MIN_TREND_SAMPLES", "4", "kv", "min_trend_samples", 4),
    ],
)
def test_one_threshold_from_its_own_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, section: str, field: str, value: object
) -> None:
    monkeypatch.setenv(variable, text)
    settings = load_settings()
    applied = getattr(getattr(settings.detectors.thresholds(tick_s=5.0), section), field)
    assert applied == value
    assert type(applied) is type(value)
    assert getattr(settings.detectors, section)[field] == value  # what `kvpilot config show` prints


@pytest.mark.parametrize(
    ("variable", "text", "message"),
    [
        ("KVPILOT_DETECTORS__KV__NEAR_FULL", "ninety", "KvThresholds.near_full must be a number, got 'ninety'"),
        ("KVPILOT_DETECTORS__KV__MIN_TREND_SAMPLES", "4.5",
         "KvThresholds.min_trend_samples must be a whole number, got '4.5'"),
        ("KVPILOT_DETECTORS__KV__NEAR_FULL", "nan", "KvThresholds.near_full must be a finite number, got nan"),
        ("KVPILOT_DETECTORS__KV__NEAR_FULL", "null", "KvThresholds.near_full must be a number, got 'null'"),
    ],
)  # fmt: skip
def test_a_bad_threshold_variable_is_refused_in_words(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, message: str
) -> None:
    monkeypatch.setenv(variable, text)
    with pytest.raises(SettingsError, match=re.escape(message)):
        load_settings()


@pytest.mark.parametrize(
    ("yaml_text", "line"),
    [
        # a threshold that needs a number: the field and its line, in one line
        ("log_level: INFO\ndetectors:\n  kv:\n    near_full: null\n",
         "  detectors.kv.near_full (k.yaml:4): must be a number, not null (in detectors.kv only demand_load, "
         "demand_min_rise, projected_usage take null)"),
        # a section where nothing takes null says so
        ("detectors:\n  gpu:\n    busy_utilisation: null\n",
         "  detectors.gpu.busy_utilisation (k.yaml:3): must be a number, not null (in detectors.gpu none of its "
         "fields takes null)"),
        # a list where a number goes: one line, not one per branch of the union
        ("detectors:\n  kv:\n    near_full: [1]\n",
         "  detectors.kv.near_full (k.yaml:3): must be a number, a string, true/false or null, not list"),
    ],
)  # fmt: skip
def test_null_or_a_list_where_a_number_goes_is_one_line(tmp_path: Path, yaml_text: str, line: str) -> None:
    lines = _refusal(tmp_path, yaml_text)
    assert lines[1:] == [line]


def test_a_long_list_written_the_wrong_way_is_named_by_its_first_items_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # session 26 E: 100,000 targets as bare URLs (not `url:` entries) were refused in 100,001 lines, one per item
    urls = "".join(f"    - http://10.0.{i // 250}.{i % 250}:8000/metrics\n" for i in range(500))
    lines = _refusal(tmp_path, "collector:\n  discovery:\n    static_targets:\n" + urls)
    item = "Input should be a valid dictionary or instance of StaticTarget"
    assert lines[1:] == [
        *(f"  collector.discovery.static_targets.{i} (k.yaml:{4 + i}): {item}" for i in range(20)),
        "  ... and 480 more",
    ]
    # the same from the environment
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__STATIC_TARGETS", "[" + ",".join(['"http://a:1/m"'] * 25) + "]")
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert str(e.value).splitlines()[-1] == "  ... and 5 more"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # not UTF-8 (a UnicodeDecodeError traceback): the file and the line of the first bad byte
        (b"\xff\xfe", "config file {path} is not UTF-8 text: byte 0xff on line 1"),
        (b"collector:\n  interval_s: 5\n# caf\xe9\n", "config file {path} is not UTF-8 text: byte 0xe9 on line 3"),
        # a key given twice (the last one won, silently): both lines
        ("collector:\n  interval_s: 10\ncollector:\n  interval_s: 6\n",
         "config file {path}: collector is given twice (lines 1 and 3); keep one"),
        ("collector:\n  interval_s: 10\n  timeout_s: 2\n  interval_s: 6\n",
         "config file {path}: collector.interval_s is given twice (lines 2 and 4); keep one"),
        ("collector:\n  discovery:\n    static_targets:\n      - {url: 'http://a:1/m', url: 'http://b:1/m'}\n",
         "config file {path}: collector.discovery.static_targets[0].url is given twice (lines 4 and 4); keep one"),
        # nested past PyYAML's recursion (a RecursionError traceback): the line it got to
        ("collector:\n  x: " + "[" * 5000 + "]" * 5000 + "\n", "config file {path}: nested too deeply near line 2"),
        # scalars PyYAML's constructors fail on (a ValueError, AttributeError or KeyError traceback, exit 1): the line
        ("collector:\n  interval_s: 2024-02-30\n",
         "config file {path}, line 2: '2024-02-30' cannot be read as timestamp (ValueError: day is out of range for "
         "month)"),
        ("collector:\n  timeout_s: 1\n  interval_s: !!bool maybe\n",
         "config file {path}, line 3: 'maybe' cannot be read as bool (KeyError: 'maybe')"),
        ("api:\n  http_port: !!timestamp soon\n",
         "config file {path}, line 2: 'soon' cannot be read as timestamp (AttributeError: 'NoneType' object has no "
         "attribute 'groupdict')"),
        ("collector:\n  interval_s: 1" + "0" * 5000 + "\n",
         "config file {path}, line 2: '1" + "0" * 39 + "...' cannot be read as int (ValueError: Exceeds the limit "
         "(4300 digits) for integer string conversion: value has 5001 digits)"),
    ],
)  # fmt: skip
def test_unreadable_or_ambiguous_files_are_refused_by_line(tmp_path: Path, content: str | bytes, message: str) -> None:
    assert _refusal(tmp_path, content) == [message.format(path=tmp_path / "k.yaml")]


def test_merge_keys_and_aliases_are_not_duplicates(tmp_path: Path) -> None:
    # `<<: *base` then a key of its own overrides the merged one, as YAML means; a self-referencing alias ends
    text = "x-common: &base {interval_s: 10, timeout_s: 2}\ncollector:\n  <<: *base\n  interval_s: 6\n"
    with pytest.raises(SettingsError) as e:  # x-common is an unknown key, but that is the only complaint
        _load(tmp_path, text)
    assert "x-common" in str(e.value)
    assert "given twice" not in str(e.value)
    assert _refusal(tmp_path, "a: &a [*a]\n")[1].startswith("  a (k.yaml:1):")


def test_aliases_that_expand_past_a_bound_are_refused(tmp_path: Path) -> None:
    # a billion laughs, a million here: the settings library's dump of the file expanded the shared lists (10 levels:
    # 60 s and 6.7 GB, then killed); a million loaded in a second and was refused as six unknown keys
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 6)]
    path = tmp_path / "k.yaml"
    assert _refusal(tmp_path, "\n".join(lines) + "\n") == [
        f"config file {path}: its aliases expand to more than 100000 values"
    ]


def test_a_config_given_through_a_pipe_is_read_not_ignored(tmp_path: Path) -> None:
    # `kvpilot run -c <(...)` and `-c /dev/stdin` name a pipe: the settings library skips what is not a regular file,
    # and kvpilot ran on its defaults without a word
    fifo = tmp_path / "k.yaml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=("collector:\n  interval_s: 7\n",))
    writer.start()
    try:
        assert load_settings(fifo).collector.interval_s == 7.0
    finally:
        writer.join(5)


def test_an_endless_config_is_refused_by_size() -> None:
    with pytest.raises(SettingsError, match=r"^config file /dev/zero is larger than 4194304 bytes"):
        load_settings(Path("/dev/zero"))  # was read until memory ran out


def _in_a_thread(fn: Callable[[], object]) -> list[object]:
    """``fn()``'s result or exception, or [] when it has not returned in 10 s (a read waiting for a writer)."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    return out


def test_a_pipe_whose_writer_is_done_before_the_check_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `cat k.yaml > fifo & kvpilot run -c fifo`: the writer writes and closes at once; a reader that opened the pipe
    # to check it and closed it after that lost what was written, and the read that followed waited forever
    fifo = tmp_path / "k.yaml"
    os.mkfifo(fifo)
    written = threading.Event()

    def write() -> None:
        with fifo.open("w") as f:
            f.write("collector:\n  interval_s: 7\n")
        written.set()

    opened = Path.open

    def reader_after_writer(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = opened(self, mode, *args, **kwargs)
        if self == fifo and "r" in mode:
            written.wait(5)  # the writer is done before this reader goes on
        return f

    monkeypatch.setattr(Path, "open", reader_after_writer)
    threading.Thread(target=write, daemon=True).start()
    got = _in_a_thread(lambda: load_settings(fifo).collector.interval_s)
    assert got == [7.0]


def test_a_bad_value_in_a_pipe_is_told_not_waited_on(tmp_path: Path) -> None:
    # the error's line numbers came from reading the file again: a pipe, read once already, waited for a new writer
    fifo = tmp_path / "k.yaml"
    os.mkfifo(fifo)
    threading.Thread(target=fifo.write_text, args=("collector:\n  interval_s: -1\n",), daemon=True).start()
    (got,) = _in_a_thread(lambda: load_settings(fifo)) or ["still waiting after 10 s"]
    assert isinstance(got, SettingsError)
    assert "collector.interval_s" in str(got)


@pytest.mark.parametrize(
    ("name", "value", "key"),
    [
        ("KVPILOT_COLLECTOR", '{"interval_s": 5, "interval_s": 6}', "interval_s"),  # 6 was taken, in silence
        ("KVPILOT_COLLECTOR__DISCOVERY", '{"static_targets": [{"url": "http://a:1/m", "url": "http://b:1/m"}]}', "url"),
    ],
)
def test_a_key_given_twice_in_a_variables_json_is_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, key: str
) -> None:
    # as the settings file (above) and the API (api.json_body) refuse it
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=f"the key '{key}' is given more than once in one object"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("KVPILOT_COLLECTOR", "[" * 20_000 + "]" * 20_000),  # arrays past json.loads' recursion
        ("KVPILOT_SCALER__PLANNER", '{"a":' * 10_000 + "1" + "}" * 10_000),  # objects, a nested section's variable
    ],
)
def test_a_variables_json_nested_too_deeply_is_refused_in_words(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    # was a RecursionError traceback, exit 1; the settings file's own nesting is refused by line (above)
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match="its JSON is nested too deeply"):
        load_settings()


def test_a_variables_json_is_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_COLLECTOR", '{"interval_s": 6, "timeout_s": 2}')
    settings: Any = load_settings()
    assert (settings.collector.interval_s, settings.collector.timeout_s) == (6, 2)


def test_a_static_target_url_listed_twice_is_refused(tmp_path: Path) -> None:
    # session 30 E: was accepted, and the second dropped in silence (StaticTargets keeps a URL once): deployment b
    # had no replica and no word said; the targets file refuses it the same way
    lines = _refusal(
        tmp_path,
        "collector:\n  discovery:\n    static_targets:\n"
        "      - {url: 'http://10.0.0.1:8000/metrics', deployment: a}\n"
        "      - {url: 'http://10.0.0.2:8000/metrics', deployment: a}\n"
        "      - {url: 'http://10.0.0.1:8000/metrics', deployment: b}\n",
    )
    assert lines[1:] == [
        "  collector.discovery.static_targets (k.yaml:3): target 2: url http://10.0.0.1:8000/metrics is already "
        "target 0"
    ]


def test_two_static_targets_of_one_pod_are_refused(tmp_path: Path) -> None:
    # session 30 E: two pages under one pod were read as one replica, its counters from each page in turn (a fleet at
    # rest read at 9.8 requests/s, two replicas counted as one); the targets file refuses them the same way
    lines = _refusal(
        tmp_path,
        "collector:\n  discovery:\n    static_targets:\n"
        "      - {url: 'http://10.0.0.1:8000/metrics', namespace: inference, pod: llama-0}\n"
        "      - {url: 'http://10.0.0.2:8000/metrics', namespace: inference, pod: llama-0}\n",
    )
    assert lines[1].startswith(
        "  collector.discovery.static_targets (k.yaml:3): target 1: pod inference/llama-0 is already target 0's"
    )
