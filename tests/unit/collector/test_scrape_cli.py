"""`kvpilot scrape URL...` against real pages on loopback: samples out, failures named, exit status 2."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from tests.conftest import FIXTURES
from tests.services.pages import serve_pages
from tests.services.ports import free_port

PAGES = {
    "/vllm": FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt",
    "/dcgm": FIXTURES / "metrics" / "dcgm__DataDog__integrations-core__metrics.txt",
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
    assert len(json.loads(out)["replicas"]) == 1  # the good target is still printed


def test_not_a_url_is_refused() -> None:
    code, _, err = run("localhost:8000/metrics")
    assert code == 2
    assert "not an http(s) URL" in err
