"""`kvpilot scrape URL...` against real pages on loopback: samples out, failures named, exit status 2."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.commands.scrape import replica_names
from tests.conftest import FIXTURES
from tests.services.pages import serve_pages
from tests.services.ports import free_port

PAGES = {
    "/vllm": FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt",
    "/dcgm": FIXTURES / "metrics" / "dcgm__DataDog__integrations-core__metrics.txt",
    "/ray": FIXTURES / "metrics" / "ray-serve-vllm__DataDog__integrations-core__ray_vllm_metrics__trimmed.txt",
}


@pytest.fixture
def base() -> Iterator[str]:
    with serve_pages(PAGES, missing_status=500) as (host, port):
        yield f"http://{host}:{port}"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["scrape", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_has_replicas_and_gpus(base: str) -> None:
    code, out, _ = run(f"{base}/vllm", f"{base}/dcgm", "--json")
    assert code == 0
    doc = json.loads(out)
    (replica,) = doc["replicas"]
    assert replica["engine"] == "vllm"
    assert replica["model"] == "facebook/opt-125m"
    assert len(doc["gpus"]) >= 1


def test_kind_gpu_reads_gpus_only(base: str) -> None:
    code, out, _ = run(f"{base}/dcgm", "--kind", "gpu", "--json")
    assert code == 0
    assert json.loads(out)["replicas"] == []


def test_table_output(base: str) -> None:
    code, out, _ = run(f"{base}/vllm")
    assert code == 0
    assert "vllm" in out


FAILURES = [
    # HTTP error: the URL and the status are named, exit 2
    ("/broken", "HTTP 500"),
    # nothing listens: connection failure, exit 2
    (None, "connection failed"),
]


@pytest.mark.parametrize(("path", "reason"), FAILURES)
def test_failures_exit_2_naming_the_target(base: str, path: str | None, reason: str) -> None:
    url = f"{base}{path}" if path else f"http://127.0.0.1:{free_port()}/metrics"
    code, out, err = run(f"{base}/vllm", url, "--json")
    assert code == 2
    assert f"{url}: {reason}" in err
    assert err.count(url) == 1  # said once (not also by the scrape loop's "target is down" log line)
    assert len(json.loads(out)["replicas"]) == 1  # the good target is still printed


def test_a_page_over_the_cap_names_the_flag_that_raises_it(base: str) -> None:
    # scrape reads no settings: the hint names its own --max-body-bytes (collector.max_body_bytes is kvpilot run's),
    # and the flag reads the page (the fixture is 21 KiB)
    url = f"{base}/vllm"
    code, out, err = run(url, "--json", "--max-body-bytes", "4096")
    assert code == 2
    assert json.loads(out) == {"replicas": [], "gpus": []}
    assert f"{url}: body exceeds 4096 bytes" in err
    assert err.rstrip().endswith("raise --max-body-bytes to read it"), err
    assert "collector.max_body_bytes" not in err
    code, out, _ = run(url, "--json", "--max-body-bytes", "65536")
    assert code == 0
    assert json.loads(out)["replicas"][0]["engine"] == "vllm"


@pytest.mark.parametrize("value", ["1023", "0", "-1"])
def test_a_page_cap_below_the_settings_floor_is_refused_by_flag(value: str) -> None:
    code, _, err = run("http://127.0.0.1:1/metrics", "--max-body-bytes", value)
    assert code == 2
    assert f"--max-body-bytes must be an integer >= 1024, got {value}" in err


def test_not_a_url_is_refused() -> None:
    code, _, err = run("localhost:8000/metrics")
    assert code == 2
    assert "not an http(s) URL" in err


NAME_CASES = [
    # the simulator: every replica under its own path on one port; the differing part first, so a narrow column
    # still tells them apart
    (
        ["http://h:1/replicas/llama-0/metrics", "http://h:1/replicas/llama-1/metrics", "http://g:2/metrics"],
        ["llama-0@h:1", "llama-1@h:1", "g:2"],
    ),
    # one URL's path is the other's plus a segment: the shorter is named by its whole path
    (["http://h:1/a/metrics", "http://h:1/a/b/metrics"], ["/a/metrics@h:1", "b@h:1"]),
    # two ports on one host: the ports tell them apart
    (["http://h:8000/metrics", "http://h:8001/metrics"], ["h:8000", "h:8001"]),
]


@pytest.mark.parametrize(("urls", "names"), NAME_CASES)
def test_replica_names_differ(urls: list[str], names: list[str]) -> None:
    assert replica_names(urls) == names


def test_two_replicas_on_one_port_print_different_columns() -> None:
    page = FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt"
    with serve_pages({"/replicas/llama-0/metrics": page, "/replicas/llama-1/metrics": page}) as (host, port):
        base = f"http://{host}:{port}/replicas"
        code, out, _ = run(f"{base}/llama-0/metrics", f"{base}/llama-1/metrics", f"{base}/llama-0/metrics", "--json")
        assert code == 0
        assert [r["replica"] for r in json.loads(out)["replicas"]] == [
            f"llama-0@{host}:{port}",
            f"llama-1@{host}:{port}",
        ]  # and the URL given twice is scraped once
        code, out, _ = run(f"{base}/llama-0/metrics", f"{base}/llama-1/metrics")
    header = next(line for line in out.splitlines() if "field" in line)
    assert "llama-0@" in header
    assert "llama-1@" in header


def test_engine_option_in_any_case(base: str) -> None:
    # `--engine vLLM` is what people type: read as vllm, not refused
    code, out, _ = run(f"{base}/vllm", "--engine", "vLLM", "--json")
    assert code == 0
    assert json.loads(out)["replicas"][0]["engine"] == "vllm"


NOT_A_GPU_PAGE = [
    # the adapter named on a page without its families is an error naming what the page holds, as in `kvpilot parse`
    # (issue 12: `--engine dcgm` on a vLLM page exited 0 and printed nothing)
    ("--engine", "dcgm"),
    # a GPU exporter's page asked for (`--kind gpu`) on an engine's page: the same
    ("--kind", "gpu"),
]


@pytest.mark.parametrize(("option", "value"), NOT_A_GPU_PAGE)
def test_gpu_page_asked_for_on_an_engine_page_exits_2(base: str, option: str, value: str) -> None:
    code, out, err = run(f"{base}/vllm", option, value, "--json")
    assert code == 2
    assert f"{base}/vllm: unreadable page: page has none of the GPU exporters' families" in err
    assert "starting with `vllm:`" in err
    assert json.loads(out) == {"replicas": [], "gpus": []}


def test_engine_named_on_another_engines_page_exits_2(base: str) -> None:
    code, _, err = run(f"{base}/vllm", "--engine", "sglang")
    assert code == 2
    assert "page has none of the sglang families" in err
    assert "try `--engine vllm`" in err


def test_engine_dcgm_reads_a_gpu_page(base: str) -> None:
    code, out, _ = run(f"{base}/dcgm", "--engine", "dcgm", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["replicas"] == []
    assert len(doc["gpus"]) >= 1


def test_prefix_option_as_the_error_suggests(base: str) -> None:
    # the search for a prefix turned off: the error suggests `--prefix ray_`, which scrape takes, as parse does
    code, _, err = run(f"{base}/ray", "--prefix", "")
    assert code == 2
    assert "try `--prefix ray_`" in err
    code, out, _ = run(f"{base}/ray", "--prefix", "ray_", "--engine", "vllm", "--json")
    assert code == 0
    (replica,) = json.loads(out)["replicas"]
    assert (replica["engine"], replica["model"]) == ("vllm", "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8")
