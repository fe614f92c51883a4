"""Static targets file: the documented format, errors that point at the target and field, re-reading."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from collector.discovery.static import StaticFileDiscovery, TargetFileError, parse_targets
from collector.samples import TargetInfo

GOOD_CASES = [
    # a plain list of mappings with every field
    (
        [
            {
                "url": "http://10.0.0.1:8000/metrics",
                "kind": "engine",
                "engine": "vllm",
                "namespace": "prod",
                "deployment": "llama",
                "pod": "llama-0",
                "node": "n1",
            }
        ],
        [TargetInfo("http://10.0.0.1:8000/metrics", "engine", "vllm", "prod", "llama", "llama-0", "n1")],
    ),
    # a bare URL is a target with defaults
    (["http://h:9400/metrics"], [TargetInfo("http://h:9400/metrics")]),
    # defaults apply to every target; a target's own field wins
    (
        {
            "defaults": {"namespace": "prod", "deployment": "d"},
            "targets": ["http://a/metrics", {"url": "http://b/metrics", "deployment": "e"}],
        },
        [
            TargetInfo("http://a/metrics", namespace="prod", deployment="d"),
            TargetInfo("http://b/metrics", namespace="prod", deployment="e"),
        ],
    ),
    # an empty file means no targets
    (None, []),
    # one pod name in two namespaces is two replicas; GPU pages and engine pages naming no pod are known by their URL
    (
        [
            {"url": "http://a/m", "pod": "p0", "namespace": "x"},
            {"url": "http://b/m", "pod": "p0", "namespace": "y"},
            {"url": "http://c/m", "pod": "p0", "namespace": "x", "kind": "gpu"},
            "http://d/m",
            "http://e/m",
        ],
        [
            TargetInfo("http://a/m", namespace="x", pod="p0"),
            TargetInfo("http://b/m", namespace="y", pod="p0"),
            TargetInfo("http://c/m", kind="gpu", namespace="x", pod="p0"),
            TargetInfo("http://d/m"),
            TargetInfo("http://e/m"),
        ],
    ),
]


@pytest.mark.parametrize(("data", "expected"), GOOD_CASES)
def test_parse_good(data: Any, expected: list[TargetInfo]) -> None:
    assert parse_targets(data) == expected


BAD_CASES = [
    # a scalar is not a list of targets
    ("just a string", "expected a list of targets"),
    # the index and the field are named
    ([{"url": "http://a/m"}, {"url": "ftp://b/m"}], "target 1: url: must be an http(s) URL"),
    # urlsplit's ValueErrors escaped: a traceback, and an edit to such a URL was then ignored without a word
    ([{"url": "http://[::1/m"}], "target 0: url: must be an http(s) URL with a host, got 'http://[::1/m'"),
    # a typo in a field name is caught, not ignored
    ([{"url": "http://a/m", "namesapce": "x"}], "target 0: unknown field 'namesapce'"),
    # kind must be engine or gpu
    ([{"url": "http://a/m", "kind": "dcgm"}], "target 0: kind: must be one of engine, gpu"),
    # a missing url
    ([{"pod": "p"}], "target 0: url: required"),
    # numbers where strings are expected (YAML turns `node: 1` into an int)
    ([{"url": "http://a/m", "node": 1}], "target 0: node: expected a string"),
    # the same URL twice would be scraped twice
    (["http://a/m", "http://a/m"], "target 1: url: http://a/m is already target 0"),
    # two pages under one pod were read as one replica, its counters from each page in turn (session 30 E)
    (
        [{"url": "http://a/m", "pod": "p0"}, {"url": "http://b/m", "pod": "p0"}],
        "target 1: pod: default/p0 is already target 0's (another URL)",
    ),
    (
        {
            "defaults": {"namespace": "prod"},
            "targets": ["http://z/m", {"url": "http://a/m", "pod": "p0"}, {"url": "http://b/m", "pod": "p0"}],
        },
        "target 2: pod: prod/p0 is already target 1's",
    ),
    # defaults cannot carry a url
    ({"defaults": {"url": "http://a/m"}, "targets": []}, "defaults: unknown field 'url'"),
    # unknown top-level key
    ({"target": []}, "unknown top-level key"),
    # an engine kvpilot has no adapter for is refused at load, naming the engines it knows
    ([{"url": "http://a/m", "engine": "vlm"}], "target 0: engine: unknown engine 'vlm'; known: vllm, sglang"),
]


@pytest.mark.parametrize(("data", "message"), BAD_CASES)
def test_parse_bad(data: Any, message: str) -> None:
    with pytest.raises(TargetFileError, match=re.escape(message)):
        parse_targets(data)


def _write(path: Path, data: Any) -> None:
    path.write_text(yaml.safe_dump(data))
    # force a visibly new stamp even on file systems with coarse mtimes
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


async def test_file_is_reread_when_changed_and_bad_edits_keep_previous(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    _write(path, ["http://a/metrics"])
    # changes applied at once (the settle rule: test_discovery_static_settle.py)
    disc = StaticFileDiscovery(path, settle_s=0.0)
    assert [t.url for t in await disc.targets()] == ["http://a/metrics"]
    _write(path, ["http://a/metrics", "http://b/metrics"])
    assert [t.url for t in await disc.targets()] == ["http://a/metrics", "http://b/metrics"]
    path.write_text("targets: [\n")  # a half-saved edit
    assert len(await disc.targets()) == 2
    assert disc.last_error is not None
    assert "invalid YAML" in disc.last_error
    _write(path, ["http://c/metrics"])
    assert [t.url for t in await disc.targets()] == ["http://c/metrics"]
    assert disc.last_error is None


def test_first_load_fails_fast(tmp_path: Path) -> None:
    with pytest.raises(TargetFileError, match="cannot read"):
        StaticFileDiscovery(tmp_path / "missing.yaml")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
        max_leaves=20,
    )
)
def test_any_yaml_value_is_accepted_or_rejected_with_target_file_error(data: Any) -> None:
    # whatever a file holds, the outcome is targets or TargetFileError, never another exception
    with contextlib.suppress(TargetFileError):
        parse_targets(data)


def test_prefix_field_is_read_and_checked() -> None:
    # prefix: text before the engine's names (Ray Serve LLM); "" stays "" (no search), absent stays None (search)
    got = parse_targets(
        [
            {"url": "http://ray:8080/metrics", "prefix": "ray_"},
            {"url": "http://b:1/metrics", "prefix": ""},
            "http://c:1/m",
        ]
    )
    assert [t.prefix for t in got] == ["ray_", "", None]
    with pytest.raises(TargetFileError, match="target 0: prefix: expected a string"):
        parse_targets([{"url": "http://ray:8080/metrics", "prefix": 3}])


def test_engine_is_matched_case_insensitively() -> None:
    # `engine: vLLM` is what people type: read as the adapter's name, not left as a target that is just down
    got = parse_targets([{"url": "http://a/m", "engine": "vLLM"}, {"url": "http://b/m", "engine": " SGLang "}])
    assert [t.engine for t in got] == ["vllm", "sglang"]


def test_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "defaults:\n"
        "  namespace: prod\n"
        "  kind: engine\n"
        "targets:\n"
        "  - url: http://10.0.3.17:8000/metrics\n"
        "    engine: vllm\n"
        "  - url: http://10.0.3.18:8000/metrics\n"
        "    pod: p1\n"
        "    engine: vlm\n"
    )
    with pytest.raises(TargetFileError) as e:
        StaticFileDiscovery(path)
    assert str(e.value).startswith(f"{path}:9: target 1: engine: unknown engine 'vlm'; known: vllm,")
    # a bare URL is pointed at by its own line; a field inherited from defaults at the defaults' line
    path.write_text("targets:\n  - http://a/m\n  - ftp://b/m\n")
    with pytest.raises(TargetFileError, match=re.escape(f"{path}:3: target 1: url: must be an http(s) URL")):
        StaticFileDiscovery(path)
    path.write_text("defaults:\n  engine: vlm\ntargets:\n  - http://a/m\n")
    with pytest.raises(TargetFileError, match=re.escape(f"{path}:2: target 0: engine: unknown engine 'vlm'")):
        StaticFileDiscovery(path)


async def test_a_bad_engine_in_an_edit_keeps_the_previous_targets(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    _write(path, [{"url": "http://a/metrics", "engine": "vllm"}])
    disc = StaticFileDiscovery(path)
    _write(path, [{"url": "http://a/metrics", "engine": "vlm"}])
    assert [t.engine for t in await disc.targets()] == ["vllm"]
    assert disc.last_error is not None
    assert "unknown engine 'vlm'" in disc.last_error


def _laughs(levels: int) -> str:
    """A target whose `kind` is an alias of 10**levels strings, built of anchors of aliases in its `role`."""
    anchors = ['&a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    anchors += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return f"- url: http://a/metrics\n  role: [{', '.join(anchors)}]\n  kind: *a{levels - 1}\n"


def test_small_aliases_are_read(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text("- {url: http://a/metrics, namespace: &ns prod}\n- {url: http://b/metrics, namespace: *ns}\n")
    assert [t.namespace for t in StaticFileDiscovery(path).current()] == ["prod", "prod"]


@pytest.mark.parametrize(
    ("content", "error"),
    [
        # before: a UnicodeDecodeError, then a RecursionError, escaped the discovery (kvpilot run: no file named)
        (b"- http://b/metrics\n- \xff\xfe\x00garbage\n", "{path}:2: not UTF-8 text (byte 0xff)"),
        (b"[" * 5000 + b"]" * 5000, "{path}: nested too deeply for a list of targets"),
        # a billion laughs, a million here: the error's repr expanded it (10 levels: 60 s and 4.6 GB, then killed)
        (_laughs(6).encode(), "{path}: its aliases expand to more than 100000 values"),
        # a ValueError traceback at start-up; on a re-read, out of the discovery every tick
        (
            b"- url: http://b/metrics\n  node: 2024-02-30\n",
            "{path}:2: '2024-02-30' cannot be read as timestamp (ValueError: day is out of range for month)",
        ),
        (
            b"- url: http://b/metrics\n  pod: !!int p-0\n",
            "{path}:2: 'p-0' cannot be read as int (ValueError: invalid literal for int() with base 10: 'p-0')",
        ),
    ],
)
async def test_an_edit_to_garbage_keeps_the_previous_targets_and_says_why(
    tmp_path: Path, content: bytes, error: str
) -> None:
    path = tmp_path / "targets.yaml"
    _write(path, ["http://a/metrics"])
    disc = StaticFileDiscovery(path)
    path.write_bytes(content)
    assert [t.url for t in await disc.targets()] == ["http://a/metrics"]
    assert disc.last_error == error.format(path=path)
    with pytest.raises(TargetFileError, match=re.escape(error.format(path=path))):
        StaticFileDiscovery(path)  # at start-up: refused with the same words


def test_an_endless_file_is_refused_by_size() -> None:
    with pytest.raises(TargetFileError, match=r"^/dev/zero: larger than 33554432 bytes: not a list of targets$"):
        StaticFileDiscovery("/dev/zero")  # was read until memory ran out (MemoryError)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        # before: the second url was kept silently (helper H, session 17: a careless edit pointed kvpilot elsewhere)
        (
            "- url: http://a/metrics\n  url: http://b/metrics\n",
            "{path}:2: 'url' is given twice in one mapping (lines 1 and 2)",
        ),
        (
            "targets:\n  - url: http://a/metrics\n    namespace: prod\n    namespace: dev\n",
            "{path}:4: 'namespace' is given twice in one mapping (lines 3 and 4)",
        ),
        (
            "targets: []\ntargets:\n  - url: http://a/metrics\n",
            "{path}:2: 'targets' is given twice in one mapping (lines 1 and 2)",
        ),
    ],
)
def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(content)
    with pytest.raises(TargetFileError, match=re.escape(error.format(path=path))):
        StaticFileDiscovery(path)


def test_an_alias_used_twice_and_a_merge_key_are_not_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "- &base {url: http://a/metrics, namespace: prod}\n"
        "- <<: *base\n  url: http://b/metrics\n"
        "- {url: http://c/metrics, namespace: prod}\n"
    )
    assert [(t.url, t.namespace) for t in StaticFileDiscovery(path).current()] == [
        ("http://a/metrics", "prod"),
        ("http://b/metrics", "prod"),
        ("http://c/metrics", "prod"),
    ]


def _urls(n: int, start: int = 0) -> str:
    return "".join(f"- http://10.0.0.{i}:8000/metrics\n" for i in range(start, start + n))


async def test_a_file_caught_mid_write_keeps_the_previous_targets(tmp_path: Path) -> None:
    # `gen-targets > targets.yaml`: the shell empties the file at once, the generator writes it later. Before, a
    # tick in between read no targets, and every replica was forgotten as departed (docs: "never empties the fleet")
    path = tmp_path / "targets.yaml"
    path.write_text(_urls(3))
    # changes applied at once (the settle rule: test_discovery_static_settle.py)
    disc = StaticFileDiscovery(path, settle_s=0.0)
    with path.open("w") as f:
        assert len(await disc.targets()) == 3
        assert (
            disc.last_error
            == f"{path}: empty (0 bytes), as while it is being written; a file of [] removes every target"
        )
        f.write(_urls(4))
    assert len(await disc.targets()) == 4
    assert disc.last_error is None
    path.write_text("[]\n")  # emptying the fleet on purpose
    assert await disc.targets() == []


async def test_a_file_written_while_it_is_read_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(_urls(3))
    disc = StaticFileDiscovery(path)
    path.write_text(_urls(1))  # the first part of a longer write...
    real_stat, looks = os.stat, []

    def stat_while_written(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looks.append(p)
        if len(looks) == 2:  # ...the rest lands between the read and the look after it
            with path.open("a") as f:
                f.write(_urls(2, start=1))
        return real_stat(p, *args, **kwargs)

    monkeypatch.setattr("collector.discovery.static.os.stat", stat_while_written)
    assert len(await disc.targets()) == 3  # not the one target read mid-write
    monkeypatch.setattr("collector.discovery.static.os.stat", real_stat)
    assert len(await disc.targets()) == 3
    assert len(looks) == 2


def test_a_fifo_in_place_of_the_file_is_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(_urls(2))
    disc = StaticFileDiscovery(path)
    path.unlink()
    os.mkfifo(path)
    done: list[list[TargetInfo]] = []
    reader = threading.Thread(target=lambda: done.append(disc.current()), daemon=True)
    reader.start()
    reader.join(10)
    waited = reader.is_alive()
    if waited:  # before: open() waited for a writer forever, on the event loop of `kvpilot run`
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let it go
        reader.join(10)
    assert not waited
    assert [len(d) for d in done] == [2]
    assert disc.last_error == f"{path}: not a regular file; not read"


async def test_a_reread_leaves_the_event_loop_free(tmp_path: Path) -> None:
    # 20,000 targets are some 10 s of YAML parsing, which held the API and KEDA (on the same loop) that long
    path = tmp_path / "targets.yaml"
    path.write_text(_urls(1))
    # changes applied at once (the settle rule: test_discovery_static_settle.py)
    disc = StaticFileDiscovery(path, settle_s=0.0)
    path.write_text("".join(f"- http://10.0.{i // 256}.{i % 256}:8000/metrics\n" for i in range(2000)))
    turn = asyncio.Event()
    asyncio.get_running_loop().call_soon(turn.set)
    assert len(await disc.targets()) == 2000
    assert turn.is_set()  # the loop had a turn while the file was read (before: not until it was parsed)


def test_a_fifo_at_start_is_refused_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    os.mkfifo(path)
    refused: list[str] = []

    def start() -> None:
        with pytest.raises(TargetFileError) as e:
            StaticFileDiscovery(path)
        refused.append(str(e.value))

    starting = threading.Thread(target=start, daemon=True)
    starting.start()
    starting.join(10)
    waited = starting.is_alive()
    if waited:  # before: `kvpilot run` waited here for a writer, before its first line and deaf to SIGTERM
        with open(path, "w") as w:  # let it go
            w.write("[]\n")
        starting.join(10)
    assert not waited
    assert refused == [f"{path}: not a regular file; not read"]


def test_a_terminal_at_start_is_refused_in_one_line_not_waited_on() -> None:
    # A device with nothing to read yet (a terminal: `static_file: /dev/stdin` in a shell): on 80010be it was waited
    # on, as a FIFO was; after 43d68f1 (opened without waiting) its read gave None, and the start-up ended in
    # "TypeError: object of type 'NoneType' has no len()" instead of a line naming the file.
    controller, terminal = os.openpty()
    path = Path(os.ttyname(terminal))
    refused: list[str] = []

    def start() -> None:
        try:
            StaticFileDiscovery(path)
        except Exception as e:  # what the start-up said, whatever it was
            refused.append(f"{type(e).__name__}: {e}")

    starting = threading.Thread(target=start, daemon=True)
    try:
        starting.start()
        starting.join(10)
        waited = starting.is_alive()
    finally:
        os.close(controller)  # lets a waiting read go (EIO)
        os.close(terminal)
    starting.join(10)
    assert not waited
    assert refused == [f"TargetFileError: {path}: not a regular file; not read"]
