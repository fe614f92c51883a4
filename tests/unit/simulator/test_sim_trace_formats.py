"""The trace formats beyond the shared ones: Azure 2024, BurstGPT, Mooncake's real traces. Excerpts in
tests/fixtures/traces (README: sources, commits, licences); formats are told apart by content, not by file name."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import load_trace
from simulator.trace.azure import parse_ts
from simulator.trace.model import MAX_SPAN_S

EXCERPTS = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.mark.parametrize(
    ("name", "rows", "arrivals", "prompts", "outputs", "last"),
    [
        # 2024 code week: 6 fractional digits and +00:00; the last row is 6 d 23:59:59.919571 after the first.
        (
            "azure2024_code_head_tail.csv",
            10,
            [0.0, 0.007405, 0.012384, 0.027915, 0.07396],
            [2162, 2399, 76, 2376, 7670],
            [5, 6, 15, 1, 8],
            (604799.919571, 4725, 8),
        ),
        (
            "azure2024_conv_head_tail.csv",
            10,
            [0.0, 0.04052, 0.156825, 0.157769, 0.247116],
            [1452, 584, 862, 1569, 617],
            [3, 3, 38, 3, 104],
            (604799.994297, 2688, 366),
        ),
        # BurstGPT: seconds from the first day's midnight, rebased to the first request (5 s).
        ("burstgpt_1_head.csv", 3, [0.0, 40.0, 113.0], [472, 1087, 417], [18, 230, 276], None),
        # Mooncake FAST'25 conversation trace: milliseconds, ten requests at 0, then 3000, ..., 12000 ms.
        ("mooncake_conversation_head.jsonl", 40, [0.0] * 10 + [3.0], [6758, 7322], [500, 490], (12.0, 2038, 524)),
        # Mooncake arXiv trace excerpt: starts at 1,178,625 ms, rebased to 0; the next batch is 3.053 s later.
        ("mooncake_arxiv_excerpt.jsonl", 20, [0.0] * 9 + [3.053], [2105, 9456], [650, 560], (3.053, 5501, 559)),
    ],
)
def test_excerpts_load_with_relative_arrivals_and_tokens(
    name: str,
    rows: int,
    arrivals: list[float],
    prompts: list[int],
    outputs: list[int],
    last: tuple[float, int, int] | None,
) -> None:
    cols = load_trace(EXCERPTS / name).columns
    assert len(cols) == rows
    assert cols.arrival_s[: len(arrivals)].tolist() == pytest.approx(arrivals, abs=1e-6)
    assert cols.prompt_tokens[: len(prompts)].tolist() == prompts
    assert cols.output_tokens[: len(outputs)].tolist() == outputs
    if last is not None:
        assert float(cols.arrival_s[-1]) == pytest.approx(last[0], abs=1e-6)
        assert (int(cols.prompt_tokens[-1]), int(cols.output_tokens[-1])) == last[1:]
    assert np.all(np.diff(cols.arrival_s) >= 0)


def test_mooncake_arxiv_hash_ids_are_the_shared_prefix_blocks() -> None:
    requests = load_trace(EXCERPTS / "mooncake_arxiv_excerpt.jsonl").requests
    # Rows 6 and 8 of the excerpt share the 12-block prefix 46..57, then diverge.
    assert requests[5].prefix_blocks == (*range(46, 58), 77614)
    assert requests[7].prefix_blocks[:12] == requests[5].prefix_blocks[:12]
    assert requests[7].prefix_blocks[12:] == (77617, 77618, 77619)


@pytest.mark.parametrize(
    ("text", "utc", "zoned"),
    [
        ("2024-05-12 00:00:00+00:00", datetime(2024, 5, 12, tzinfo=UTC), True),  # zero microseconds: no fraction
        ("2024-05-10 00:00:00.009930+00:00", datetime(2024, 5, 10, 0, 0, 0, 9930, tzinfo=UTC), True),  # 6 digits
        ("2023-11-16 18:17:03.9799600", datetime(2023, 11, 16, 18, 17, 3, 979960, tzinfo=UTC), False),  # naive: UTC
        ("2024-05-12 02:00:00.25+02:00", datetime(2024, 5, 12, 0, 0, 0, 250000, tzinfo=UTC), True),  # offset taken off
        ("2024-05-11 17:00:00-07:00", datetime(2024, 5, 12, tzinfo=UTC), True),  # negative offset, across midnight
        ("2024-05-12T00:00:00Z", datetime(2024, 5, 12, tzinfo=UTC), True),  # ISO `T` and `Z`
        ("2024-05-12 05:30:00+0530", datetime(2024, 5, 12, tzinfo=UTC), True),  # offset without a colon
    ],
)
def test_timestamps_of_both_azure_years(text: str, utc: datetime, zoned: bool) -> None:
    seconds, has_offset = parse_ts(text)
    assert seconds == pytest.approx(utc.timestamp(), abs=1e-6)
    assert has_offset is zoned


@settings(max_examples=200, deadline=None)
@given(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31)),
    st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m))),
)
def test_timestamps_agree_with_datetime_isoformat(local: datetime, zone: timezone) -> None:
    # Oracle: whatever datetime writes (and pandas' to_csv of the 2024 trace wrote), parse_ts reads to the same instant.
    aware = local.replace(tzinfo=zone)
    assert parse_ts(aware.isoformat(sep=" "))[0] == pytest.approx(aware.timestamp(), abs=1e-6)
    assert parse_ts(local.isoformat(sep=" "))[0] == pytest.approx(local.replace(tzinfo=UTC).timestamp(), abs=1e-6)


@pytest.mark.parametrize(
    ("body", "arrivals", "prompts", "outputs"),
    [
        # Failed requests (0 response tokens, BurstGPT's definition) are skipped; a 0-token prompt counts as 1.
        (
            BURST_HEADER + "5,ChatGPT,472,18,490,Conversation log\n7,GPT-4,300,0,300,API log\n"
            "9,ChatGPT,0,0,0,API log\n12,ChatGPT,0,40,40,API log\n",
            [0.0, 7.0],
            [472, 1],
            [18, 40],
        ),
        # BurstGPT_3 (release v2.0) inserts Session ID and Elapsed time after Timestamp: columns go by name.
        (
            "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "10,3f1c,1.5,ChatGPT,100,50,150,Conversation log\n20,,,GPT-4,300,40,340,API log\n",
            [0.0, 10.0],
            [100, 300],
            [50, 40],
        ),
        # A span where 1e-9 s is below the spacing of floats (3.7e-9 at 347 days) still keeps its last request.
        (BURST_HEADER + "0,GPT-4,10,2,12,API log\n30000000,GPT-4,20,3,23,API log\n", [0.0, 3e7], [10, 20], [2, 3]),
        # Fractional seconds and rows out of order are accepted; arrivals come out sorted.
        (BURST_HEADER + "8.5,GPT-4,10,2,12,API log\n2.25,ChatGPT,20,3,23,API log\n", [0.0, 6.25], [20, 10], [3, 2]),
    ],
)
def test_burstgpt_rows(
    tmp_path: Path, body: str, arrivals: list[float], prompts: list[int], outputs: list[int]
) -> None:
    p = tmp_path / "burst.csv"
    p.write_text(body)
    cols = load_trace(p).columns
    assert cols.arrival_s.tolist() == pytest.approx(arrivals)
    assert cols.prompt_tokens.tolist() == prompts
    assert cols.output_tokens.tolist() == outputs


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("trace.txt", (EXCERPTS / "burstgpt_1_head.csv").read_text()),  # BurstGPT under any name
        ("requests.csv", (EXCERPTS / "mooncake_arxiv_excerpt.jsonl").read_text()),  # JSON lines named .csv
        ("AzureLLMInferenceTrace_code_1week", (EXCERPTS / "azure2024_code_head_tail.csv").read_text()),  # no suffix
        ("bom.csv", "\ufeff" + BURST_HEADER + "5,ChatGPT,472,18,490,Conversation log\n"),  # a byte-order mark
    ],
)
def test_format_is_recognised_by_content_not_name(tmp_path: Path, name: str, content: str) -> None:
    p = tmp_path / name
    p.write_text(content)
    assert len(load_trace(p).columns) >= 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (BURST_HEADER + "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,x,230,1317,API log\n", r"burst.csv:3: "),
        (BURST_HEADER + "-5,ChatGPT,472,18,490,Conversation log\n", r":2: timestamp must be finite and >= 0"),
        (BURST_HEADER + "nan,ChatGPT,472,18,490,Conversation log\n", r":2: timestamp must be finite"),
        (BURST_HEADER + "5,ChatGPT,472,18,490\n", r":2: expected 6 fields, got 5"),
        (BURST_HEADER + "5,ChatGPT,-1,18,17,API log\n", r":2: negative token count"),
        (BURST_HEADER + "5,GPT-4,300,0,300,API log\n", r"no requests \(1 failed requests"),  # every row failed
        (BURST_HEADER + "5,ChatGPT,99999999999999999999,18,17,API log\n", r":2: token count above 1e\+09"),
        (AZURE_HEADER + "2024-05-10 00:00:00.1+25:00,5,3\n", r":2: bad UTC offset"),
        (AZURE_HEADER + "2024-05-10 00:00:00+00:00,5,3\n2024-05-10 00:00:01,5,3\n", r":3: timestamps mix"),
        (AZURE_HEADER + "2024-13-10 00:00:00+00:00,5,3\n", r":2: "),  # month 13
        (AZURE_HEADER + "2024-05-10 00:00:61+00:00,5,3\n", r":2: bad timestamp"),
        ('{"timestamp": 0, "input_length": 10000000000, "output_length": 1}\n', r":1: ValueError: length above"),
        ('{"timestamp": 0, "input_length": Infinity, "output_length": 1}\n', r":1: OverflowError: cannot convert"),
        # A corrupt timestamp that would stretch the trace to centuries (its rate series took 21 GB): the row's line
        # and the line it is that far from, whichever of the two is the corrupt one.
        (
            AZURE_HEADER + "2024-05-10 00:00:00+00:00,5,3\n2999-05-10 00:00:00+00:00,5,3\n",
            r"burst.csv:3: timestamp is 356,1\d\d days from line 2's; a trace spans at most 400 days",
        ),
        (BURST_HEADER + "1e300,ChatGPT,4,1,5,API log\n5,ChatGPT,4,1,5,API log\n", r":3: timestamp is 1.2e\+295 days"),
        (
            '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
            '{"timestamp": 99000000000, "input_length": 1, "output_length": 1}\n',
            r":2: ValueError: timestamp is 1,146 days from line 1's",
        ),
        ("", r"no requests \(empty file\)"),
        # An unknown header: the message lists every accepted one.
        (
            "time,prompt,output\n1,2,3\n",
            r"burst.csv:1: unknown trace format.*TIMESTAMP,ContextTokens,GeneratedTokens.*Timestamp,Model,Request",
        ),
    ],
)
def test_bad_files_name_the_file_line_and_problem(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "burst.csv"
    p.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_trace(p)


def test_an_unknown_header_says_how_to_write_requests_of_ones_own_and_that_loads(tmp_path: Path) -> None:
    # A user's own log, as such logs come: other column names, milliseconds. The refusal names a header to write
    # instead and the unit; written that way, the same requests load with their spacing in seconds.
    own = tmp_path / "mine.csv"
    own.write_text("timestamp_ms,prompt_tokens,output_tokens\n0,400,50\n1500,800,20\n4000,100,10\n")
    with pytest.raises(ValueError, match=r"Requests of your own: a CSV with the header `([^`]+)`") as refused:
        load_trace(own)
    message = str(refused.value)
    header = message.split("Requests of your own: a CSV with the header `")[1].split("`")[0]
    assert "Timestamp in seconds from any origin, none below 0" in message  # the loader refuses a negative one
    rows = [line.split(",") for line in own.read_text().splitlines()[1:]]
    own.write_text(header + "\n" + "".join(f"{int(t) / 1000},my-model,{p},{o}\n" for t, p, o in rows))
    trace = load_trace(own)
    assert trace.columns.arrival_s.tolist() == [0.0, 1.5, 4.0]
    assert trace.columns.prompt_tokens.tolist() == [400, 800, 100]
    assert trace.columns.output_tokens.tolist() == [50, 20, 10]


@pytest.mark.parametrize(("stamp", "numeric"), [("1700000000", True), ("1500.25", True), ("16/11/2023 18:17", False)])
def test_a_number_in_azures_timestamp_column_points_to_the_seconds_layout(
    tmp_path: Path, stamp: str, numeric: bool
) -> None:
    p = tmp_path / "azure.csv"
    p.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n{stamp},400,50\n")
    with pytest.raises(ValueError, match=r"azure.csv:2: bad timestamp") as refused:
        load_trace(p)
    pointed = "under the BurstGPT header `Timestamp,Model,Request tokens,Response tokens`" in str(refused.value)
    assert pointed is numeric


def test_binary_file_is_refused_as_unknown(tmp_path: Path) -> None:
    p = tmp_path / "trace.csv.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\x00")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        load_trace(p)


def test_a_first_line_without_end_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    # /dev/zero (or a dump with no newline) was read as one line until memory ran out: a MemoryError traceback
    p = tmp_path / "zeros.csv"
    p.write_bytes(b"\0" * (2 << 20))
    with pytest.raises(ValueError, match=r"zeros.csv:1: unknown trace format: a line longer than 1048576 characters"):
        load_trace(p)


def test_missing_file_of_any_name_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"BurstGPT_1\.csv"):
        load_trace(tmp_path / "BurstGPT_1.csv")


_FIELD = st.one_of(
    st.integers(-3, 10**6).map(str), st.floats(allow_nan=True).map(str), st.text(max_size=4), st.just("")
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(_FIELD, min_size=0, max_size=7), max_size=5))
def test_burstgpt_parser_never_fails_uncontrolled(
    tmp_path_factory: pytest.TempPathFactory, rows: list[list[str]]
) -> None:
    _loads_bounded_or_refuses(tmp_path_factory, BURST_HEADER + "\n".join(",".join(r) for r in rows))


def _loads_bounded_or_refuses(tmp_path_factory: pytest.TempPathFactory, content: str) -> None:
    """A fuzzed file is refused with a ValueError, or loads into rows a replay can take."""
    p = tmp_path_factory.mktemp("fuzz") / "t.trace"
    p.write_text(content)
    with contextlib.suppress(ValueError):
        cols = load_trace(p).columns
        assert np.all(cols.prompt_tokens >= 1)
        assert np.all(cols.output_tokens >= 1)
        assert cols.arrival_s[-1] <= MAX_SPAN_S  # a replay and its rate series stay bounded


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=200))
def test_sniffing_never_fails_uncontrolled(tmp_path_factory: pytest.TempPathFactory, body: str) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "t.dat"
    p.write_text(body)
    with contextlib.suppress(ValueError):
        load_trace(p)


_STAMP = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)).map(str),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat(sep=" ")),
    st.text(max_size=30),
)
_TOKENS = st.one_of(st.integers(-5, 2 * 10**9).map(str), st.floats().map(str), st.text(max_size=4))
_NUMBER = st.one_of(st.integers(-(10**15), 10**15), st.floats(), st.text(max_size=6), st.none(), st.booleans())


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_STAMP, _TOKENS, _TOKENS), max_size=5))
def test_azure_parser_never_fails_uncontrolled(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, str, str]]
) -> None:
    _loads_bounded_or_refuses(tmp_path_factory, AZURE_HEADER + "\n".join(",".join(r) for r in rows))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"timestamp": _NUMBER, "input_length": _NUMBER, "output_length": _NUMBER},
            optional={"hash_ids": st.lists(_NUMBER, max_size=3) | _NUMBER},
        ),
        min_size=1,
        max_size=5,
    )
)
def test_mooncake_parser_never_fails_uncontrolled(
    tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, object]]
) -> None:
    _loads_bounded_or_refuses(tmp_path_factory, "\n".join(json.dumps(r) for r in rows))


def test_a_folder_of_ones_own_traces_names_a_file_to_give_instead(tmp_path: Path) -> None:
    # A folder of daily logs is not a trace; the refusal names a file in it, which replays.
    days = tmp_path / "logs"
    days.mkdir()
    (days / "day-2.csv").write_text("Timestamp,Model,Request tokens,Response tokens\n0,m,400,50\n2,m,300,20\n")
    (days / "notes.txt").write_text("not a trace\n")
    with pytest.raises(ValueError, match=r"not a ServeGen directory\); a trace file is given by its own path") as no:
        load_trace(days)
    named = str(no.value).split("e.g. ")[1].split(" (one file a replay)")[0]
    assert named == str(days / "day-2.csv")
    assert len(load_trace(named).columns) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"empty: no chunk-<N>-trace.csv files \(not a ServeGen directory\)$"):
        load_trace(empty)
