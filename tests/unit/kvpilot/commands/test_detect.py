"""`kvpilot detect`: the detectors end to end over the simulator, through the real CLI; several URL sources."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from tests.conftest import FIXTURES
from tests.services.pages import serve_pages


def _events(args: list[str]) -> list[dict]:
    result = CliRunner().invoke(app, ["detect", "--source", "sim", "--json", *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]


def test_injected_xid_79_opens_a_drain_finding_within_two_ticks():
    # XID 79 at t=100 drops the GPU from its exporter: a critical drain_node finding opens by t=105 (2 ticks).
    fault = json.dumps({"type": "xid", "node": "node-0", "gpu": 1, "xid": 79})
    events = _events(["--duration-s", "150", "--inject", f"{fault}@100"])
    drains = [e for e in events if e["event"] == "opened" and e["action"] == "drain_node"]
    assert [(e["subject"]["node"], e["severity"]) for e in drains] == [("node-0", "critical")]
    assert drains[0]["t"] <= 105


def test_healthy_simulated_fleet_opens_nothing_that_drains():
    # Without faults, nothing asks for a drain.
    events = _events(["--duration-s", "300"])
    assert [e for e in events if e["action"] == "drain_node"] == []


def test_bad_injection_is_refused_by_name():
    # A malformed --inject names itself.
    result = CliRunner().invoke(app, ["detect", "--source", "sim", "--inject", "{not json}"])
    assert result.exit_code != 0
    assert "--inject" in result.output


def _scraped(stderr: str) -> list[str]:
    return sorted(line.split(" ")[1] for line in stderr.splitlines() if line.startswith("scrape "))


@pytest.mark.parametrize(
    "form",
    [
        # a comma list, as the README writes `--source URL…`
        lambda a, b: ["--source", f"{a},{b}"],
        # repeated --source
        lambda a, b: ["--source", a, "--source", b],
        # both, with spaces after the comma
        lambda a, b: ["--source", f"{a}, {b}", "--source", a],
    ],
)
def test_several_urls_are_each_scraped(form) -> None:
    # Two pages that fail (HTTP 500): each is named on its own line, so each URL was fetched on its own.
    with serve_pages({}, missing_status=500) as (host, port):
        a, b = f"http://{host}:{port}/a", f"http://{host}:{port}/b"
        result = CliRunner().invoke(app, ["detect", *form(a, b), "--interval-s", "0.05", "--json"])
    assert result.exit_code == 2, result.output  # no URL could be scraped, as `kvpilot scrape` exits
    # two rounds (rates need two samples), each URL once per round, one line each (no second line from httpx)
    assert _scraped(result.stderr) == [a, a, b, b]
    assert all(line.startswith("scrape ") for line in result.stderr.splitlines())


BAD_SOURCES = [
    # not a URL: named, with an example of one
    (["--source", "localhost:8000/metrics"], "--source 'localhost:8000/metrics' is neither 'sim' nor an http(s) URL"),
    # sim and URLs together
    (["--source", "sim,http://a:1/metrics"], "--source sim cannot be mixed with URLs"),
    # only commas
    (["--source", ","], "--source is empty"),
]


@pytest.mark.parametrize(("args", "message"), BAD_SOURCES)
def test_bad_sources_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["detect", *args])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {message}")


SIM_MISTAKES = [
    # a trace that is not there
    (["--trace", "/nonexistent/trace.csv"], "error: trace not found: /nonexistent/trace.csv"),
    # an unknown routing policy names the known ones
    (["--routing", "nope"], "error: fleet config: unknown routing 'nope' (known: round_robin"),
    # an unknown fault type names the known ones
    (["--inject", '{"type":"nope"}@5'], "error: unknown fault type 'nope' (known: xid"),
    # no @seconds: the expected form, with an example
    (["--inject", "{}"], 'error: --inject \'{}\': expected JSON@seconds, e.g. \'{"type":"xid"'),
    # a GPU the fleet does not have: the simulator's own words, as its HTTP API answers 400 (was a KeyError traceback)
    (
        ["--inject", '{"type":"xid","node":"node-9","gpu":99,"xid":79}@5'],
        "error: --inject at 5s: no GPU 99 on node 'node-9' (nodes: node-0)",
    ),
    # a negative, infinite or NaN duration or tick is refused (a negative one ran nothing and exited 0)
    (["--duration-s", "-5"], "error: --duration-s must be a finite number > 0, got -5.0"),
    (["--duration-s", "nan"], "error: --duration-s must be a finite number > 0, got nan"),
    (["--interval-s", "nan"], "error: --interval-s must be a finite number > 0, got nan"),
    (["--interval-s", "inf"], "error: --interval-s must be a finite number > 0, got inf"),
]


@pytest.mark.parametrize(("args", "start"), SIM_MISTAKES)
def test_sim_mistakes_exit_2_with_one_line(args: list[str], start: str) -> None:
    result = CliRunner().invoke(app, ["detect", "--source", "sim", "--duration-s", "10", *args])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(start)


def test_a_tick_longer_than_an_hour_runs() -> None:
    # the fleet state's memory of vanished GPUs (an hour) was shorter than three ticks: a ValueError traceback
    result = CliRunner().invoke(app, ["detect", "--source", "sim", "--interval-s", "2000", "--duration-s", "4000"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith("finding(s) open at the end")


def test_a_url_that_answers_once_is_not_a_failure() -> None:
    # one of two URLs scraped: the other is a target_down finding, not a failed command
    page = b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
    with serve_pages({"/ok": page}, missing_status=500) as (host, port):
        ok, bad = f"http://{host}:{port}/ok", f"http://{host}:{port}/bad"
        result = CliRunner().invoke(app, ["detect", "--source", f"{ok},{bad}", "--interval-s", "0.05", "--json"])
    assert result.exit_code == 0, result.output
    assert _scraped(result.stderr) == [bad, bad]


def test_url_sources_go_through_the_collector_and_its_page_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scrape loop's collector reads the pages (the second scraper, with no size cap, is gone): a page over the
    # cap is refused, named once per round, and the command goes on.
    from kvpilot.commands import detect

    monkeypatch.setattr(detect, "MAX_BODY_BYTES", 1024)
    big = b"# HELP x y\n# TYPE x gauge\n" + b"".join(b'x{i="%d"} 1\n' % i for i in range(400))
    with serve_pages({"/big": big}) as (host, port):
        url = f"http://{host}:{port}/big"
        result = CliRunner().invoke(app, ["detect", "--source", url, "--interval-s", "0.05"])
    assert result.exit_code == 2, result.output  # its only URL was never read
    lines = result.stderr.splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"scrape {url} failed: body exceeds 1024 bytes") for line in lines)
    # nothing was read, so no "0 finding(s) from 1 target(s)": an operator would read that as a healthy target
    assert result.stdout == ""


def test_a_one_shot_url_run_that_finds_nothing_says_so() -> None:
    page = b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
    with serve_pages({"/ok": page}, missing_status=500) as (host, port):
        url = f"http://{host}:{port}/ok"
        text = CliRunner().invoke(app, ["detect", "--source", url, "--interval-s", "0.05"])
        as_json = CliRunner().invoke(app, ["detect", "--source", url, "--interval-s", "0.05", "--json"])
    assert text.exit_code == as_json.exit_code == 0, text.output
    assert text.stdout.strip().splitlines()[-1] == "0 finding(s) from 1 target(s)"
    assert as_json.stdout == ""  # --json prints one object per finding and nothing else


def test_a_page_over_the_cap_names_detects_flag_and_the_flag_reads_it() -> None:
    # detect reads no settings, so the hint names its --max-body-bytes, not kvpilot run's collector.max_body_bytes;
    # given, the flag reads the page (the fixture is 21 KiB)
    page = (FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt").read_bytes()
    with serve_pages({"/vllm": page}) as (host, port):
        url = f"http://{host}:{port}/vllm"
        args = ["detect", "--source", url, "--interval-s", "0.05"]
        small = CliRunner().invoke(app, [*args, "--max-body-bytes", "4096"])
        large = CliRunner().invoke(app, [*args, "--max-body-bytes", "65536"])
    assert small.exit_code == 2, small.output
    lines = small.stderr.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith(f"scrape {url} failed: body exceeds 4096 bytes (")
        assert line.endswith("); raise --max-body-bytes to read it")
    assert large.exit_code == 0, large.output
    assert large.stderr == ""
    assert large.stdout.rstrip().endswith("finding(s) from 1 target(s)")


def test_a_page_cap_below_the_settings_floor_is_refused_by_flag() -> None:
    result = CliRunner().invoke(app, ["detect", "--source", "http://127.0.0.1:1/m", "--max-body-bytes", "512"])
    assert result.exit_code == 2
    assert "--max-body-bytes must be an integer >= 1024, got 512" in result.stderr
