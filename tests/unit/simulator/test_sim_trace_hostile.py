"""Hostile trace files given to `kvpilot backtest`/`simulate`/`demo --trace`: a pipe, a FIFO, bytes that are not UTF-8
past the first chunk, a byte-order mark, JSON nested past the recursion limit, a sparse file, a ServeGen directory
whose chunk is a directory, is cut short, or whose windows run for years. Each is a ValueError naming the file (and
line, where there is one) that the commands print in one line with exit 2, or a documented tolerance; never a
traceback, a hang, or requests silently lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvpilot.cli import app
from simulator import load_trace
from simulator.trace import servegen
from simulator.trace.model import MAX_LINE

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _mooncake(n: int) -> str:
    # 128 bytes a line: the format sniff's 8 KiB read ends on a line's end, so a pipe read twice loses whole requests.
    rows = (
        f'{{"timestamp": {i * 100}, "input_length": 600, "output_length": 20, "hash_ids": [{i}]}}' for i in range(n)
    )
    return "".join(r[:-1].ljust(126) + "}\n" for r in rows)


def _azure(n: int) -> str:
    return AZURE_HEADER + "".join(
        f"2023-11-16 18:{i // 60 % 60:02d}:{i % 60:02d}.5,{100 + i % 50},10\n" for i in range(n)
    )


def _burstgpt(n: int) -> str:
    return BURST_HEADER + "".join(f"{i},ChatGPT,{100 + i % 50},10,{110 + i % 50},Conversation log\n" for i in range(n))


def _servegen_rows(n: int) -> str:
    return "".join(f"{w * 600},1.5,1.0,Exponential,0,0\n" for w in range(n))


def test_a_pipe_is_refused_not_read_short() -> None:
    # `--trace <(zcat t.jsonl.gz)`: the format sniff took the first 8 KiB and the loader the rest: 236 of 300 requests,
    # without a word.
    r, w = os.pipe()
    os.write(w, _mooncake(300).encode())
    os.close(w)
    try:
        with pytest.raises(ValueError, match=rf"/dev/fd/{r}: not a regular file \(a pipe, FIFO or device\)"):
            load_trace(f"/dev/fd/{r}")
    finally:
        os.close(r)


@pytest.mark.timeout(20)
def test_a_fifo_with_no_writer_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"trace.csv: not a regular file"):
        load_trace(fifo)  # was waited on for good


@pytest.mark.timeout(20)
def test_the_commands_refuse_a_fifo_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(fifo), "--virtual", "--json"])  # was a hang
    assert result.exit_code == 2, result.output
    assert "t.jsonl: not a regular file" in result.output


@pytest.mark.parametrize(
    ("name", "content"), [("a.csv", _azure(2000)), ("b.csv", _burstgpt(2000)), ("m", _mooncake(400))]
)
def test_bytes_not_utf8_past_the_first_chunk_name_their_line(tmp_path: Path, name: str, content: str) -> None:
    # The text reader decodes 8 KiB ahead: the error said "'utf-8' codec can't decode byte 0xff in position 5799",
    # naming neither the file nor the line.
    p = tmp_path / name
    lines = content.encode().splitlines(keepends=True)
    p.write_bytes(b"".join(lines) + lines[-1][:-1] + b"\xff\n")
    with pytest.raises(ValueError, match=rf"{name}:{len(lines) + 1}: not UTF-8 text"):
        load_trace(p)


def test_bytes_not_utf8_in_the_first_chunk_are_the_loaders_not_an_unknown_format(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_bytes(_azure(3).encode() + b"2023-11-16 18:00:09.5,1\xff0,3\n")
    with pytest.raises(ValueError, match=r"a.csv:5: not UTF-8 text"):  # was "unknown trace format" for the file
        load_trace(p)


def test_a_json_line_nested_past_the_recursion_limit_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "deep.jsonl"
    deep = '{"timestamp": 0, "input_length": 10, "output_length": 3, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    p.write_text(_mooncake(2) + deep)
    with pytest.raises(ValueError, match=r"deep.jsonl:3: RecursionError"):  # was a RecursionError traceback
        load_trace(p)


@pytest.mark.parametrize(("name", "content"), [("a.csv", _azure(3)), ("m.jsonl", _mooncake(3))])
def test_a_sparse_file_is_refused_at_its_long_line_not_read_whole(tmp_path: Path, name: str, content: str) -> None:
    # A header, then a run of NULs (a file `truncate`d to 20 GB): the line was read whole, 2 bytes of memory a byte.
    p = tmp_path / name
    p.write_text(content)
    with p.open("r+b") as f:
        f.truncate(len(content) + 3 * MAX_LINE)
    long_line = len(content.splitlines()) + 1
    with pytest.raises(ValueError, match=rf"{name}:{long_line}: a line longer than {MAX_LINE} characters"):
        load_trace(p)


def test_a_byte_order_mark_is_allowed_in_every_format(tmp_path: Path) -> None:
    # The format sniff and the CSV loaders allowed it; Mooncake refused its first line and ServeGen its first window.
    bom = b"\xef\xbb\xbf"
    (tmp_path / "m.jsonl").write_bytes(bom + _mooncake(3).encode())
    assert len(load_trace(tmp_path / "m.jsonl").columns) == 3
    (tmp_path / "sg").mkdir()
    (tmp_path / "sg" / "chunk-0-trace.csv").write_bytes(bom + _servegen_rows(2).encode())
    assert load_trace(tmp_path / "sg").duration_s == 1200


def test_a_servegen_chunk_that_is_no_regular_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "chunk-0-trace.csv").mkdir()  # was an IsADirectoryError traceback from `kvpilot backtest`
    (tmp_path / "chunk-1-trace.csv").write_text(_servegen_rows(1))
    with pytest.raises(ValueError, match=r"chunk-0-trace.csv: not a regular file"):
        load_trace(tmp_path)
    result = CliRunner().invoke(app, ["backtest", "--trace", str(tmp_path), "--json", "--no-frontier"])
    assert result.exit_code == 2, result.output
    assert "chunk-0-trace.csv: not a regular file" in result.output


def test_servegen_windows_past_the_longest_trace_are_refused_by_line(tmp_path: Path) -> None:
    # 60,000 windows (416 days) were read into 54 million expected requests; a request-level trace stops at 400 days.
    (tmp_path / "chunk-0-trace.csv").write_text(_servegen_rows(60_000))
    with pytest.raises(ValueError, match=r"chunk-0-trace.csv:57601: window start past 400 days"):
        load_trace(tmp_path)


def test_servegen_clients_times_windows_are_bounded_while_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Thousands of one-window files and one long one filled a (client, window) matrix each: 32 bytes a pair.
    monkeypatch.setattr(servegen, "MAX_CELLS", 1000)
    for c in range(10):
        (tmp_path / f"chunk-{c}-trace.csv").write_text(_servegen_rows(101 if c == 9 else 1))
    with pytest.raises(ValueError, match=r"chunk-9-trace.csv:101: 10 clients × 101 windows is more than 1,000"):
        load_trace(tmp_path)


@pytest.mark.parametrize("rows", [0, 2])
def test_a_servegen_file_cut_short_is_refused_not_read_as_idle(tmp_path: Path, rows: int) -> None:
    # Every client file holds every window (an idle one as zeros); one with fewer rows (an interrupted copy, or empty)
    # had its missing windows read as no arrivals: a third of the requests gone from the replay, without a word.
    (tmp_path / "chunk-0-trace.csv").write_text(_servegen_rows(4))
    (tmp_path / "chunk-1-trace.csv").write_text(_servegen_rows(rows))
    words = rf"chunk-1-trace.csv: {rows} windows where chunk-0-trace.csv has 4: a file cut short"
    with pytest.raises(ValueError, match=words):
        load_trace(tmp_path)
    result = CliRunner().invoke(app, ["backtest", "--trace", str(tmp_path), "--json", "--no-frontier"])
    assert result.exit_code == 2, result.output
    assert "a file cut short" in result.output
    assert "Traceback" not in result.output


def test_servegen_files_without_a_window_say_so(tmp_path: Path) -> None:
    (tmp_path / "chunk-0-trace.csv").write_text("\n")
    with pytest.raises(ValueError, match=r"no windows"):  # was "start_s=0.0 is past the end of the trace (0 s)"
        load_trace(tmp_path)


def test_servegen_window_order_is_checked_by_line(tmp_path: Path) -> None:
    (tmp_path / "chunk-0-trace.csv").write_text(_servegen_rows(3) + "600,1,1,Exponential,0,0\n")
    with pytest.raises(ValueError, match=r"chunk-0-trace.csv:4: window 3 starts at 600.0, expected 1800.0"):
        load_trace(tmp_path)


_ROW = st.lists(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(str),
        st.integers(-(10**6), 10**7).map(str),
        st.sampled_from(["", "Gamma", "Weibull", "Exponential", "Pareto", " Gamma"]),
        st.text(max_size=5),
    ),
    min_size=5,
    max_size=7,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(_ROW, max_size=4), min_size=1, max_size=3))
def test_servegen_reader_never_fails_uncontrolled(
    tmp_path_factory: pytest.TempPathFactory, clients: list[list[list[str]]]
) -> None:
    d = tmp_path_factory.mktemp("sg")
    for c, rows in enumerate(clients):
        (d / f"chunk-{c}-trace.csv").write_text("".join(",".join(r) + "\n" for r in rows))
    error = _refusal(d)
    if error is not None:
        assert str(d) in error
        return
    trace = load_trace(d)
    assert trace.duration_s > 0
    assert trace.expected_requests() >= 0


def _refusal(path: Path) -> str | None:
    try:
        load_trace(path)
    except ValueError as e:
        return str(e)
    return None


_PREFIXES = [_azure(2).encode(), _burstgpt(2).encode(), _mooncake(2).encode(), b""]


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(_PREFIXES), st.binary(max_size=300))
def test_raw_bytes_after_any_header_are_refused_naming_the_file(
    tmp_path_factory: pytest.TempPathFactory, prefix: bytes, tail: bytes
) -> None:
    p = tmp_path_factory.mktemp("bytes") / "t.trace"
    p.write_bytes(prefix + tail)
    error = _refusal(p)
    assert error is None or str(p) in error, error  # a decode error named neither the file nor its line
