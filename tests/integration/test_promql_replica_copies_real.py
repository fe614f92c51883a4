"""``promql_mode: replicas`` against a REAL Prometheus holding one page twice: scraped by two jobs, and kept by an
HA pair (two servers, `prometheus_replica` A and B) federated into a third, as a Thanos Querier without
deduplication answers. The replica reads the page's values once; on f3f4b9b it read them doubled (a page scraped by
two jobs was two replicas; the HA pair's copies were summed: 6 running, not 3)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.discovery.promql import PromQLSource
from collector.scrape import CollectResult
from tests.services.pages import serve_pages
from tests.services.prometheus import Prometheus, run_prometheus

pytestmark = pytest.mark.integration

PAGE = (
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 3\n'
    b"# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{model_name="m"} 5\n'
)
_LABELS = {"namespace": "prod", "pod": "chat-0"}


@pytest.fixture
def page() -> Iterator[str]:
    with serve_pages({"/metrics": PAGE}) as (host, port):
        yield f"{host}:{port}"


async def _read(url: str) -> CollectResult:
    source = PromQLSource(url, mode="replicas", reader="thread", timeout_s=10.0)
    try:
        return await source.collect_once()
    finally:
        await source.aclose()


def _scrape(job: str, target: str, **extra: object) -> dict[str, object]:
    return {"job_name": job, "static_configs": [{"targets": [target], "labels": _LABELS}], **extra}


async def test_a_page_scraped_by_two_jobs_is_one_replica(tmp_path: Path, page: str) -> None:
    with run_prometheus(tmp_path, scrape_configs=[_scrape("vllm", page), _scrape("vllm-pods", page)]) as prom:
        prom.wait_for("count(vllm:num_requests_running) == 2")
        result = await _read(prom.url)
    assert [(r.replica, r.requests_running, r.requests_waiting) for r in result.replicas] == [("chat-0", 3.0, 5.0)]


def _ha_pair_federated(
    stack: contextlib.ExitStack, tmp_path: Path, jobs: dict[str, dict[str, object]], **federate_options: object
) -> Prometheus:
    """An HA pair (one Prometheus per entry of ``jobs``, each scraping its job) federated by a global Prometheus
    that labels each copy ``prometheus_replica: prom-<name>``, as Thanos' dedup expects; the global one is returned."""
    pair = {}
    for name, job in jobs.items():
        (tmp_path / name).mkdir()
        pair[name] = stack.enter_context(run_prometheus(tmp_path / name, scrape_configs=[job]))
    federate = [
        {
            "job_name": f"federate-{name}",
            "honor_labels": True,
            **federate_options,
            "metrics_path": "/federate",
            "params": {"match[]": ['{job="vllm"}']},
            "static_configs": [
                {"targets": [prom.url.split("://", 1)[1]], "labels": {"prometheus_replica": f"prom-{name}"}}
            ],
        }
        for name, prom in pair.items()
    ]
    (tmp_path / "global").mkdir()
    return stack.enter_context(run_prometheus(tmp_path / "global", scrape_configs=federate))


async def test_an_ha_pairs_copies_are_read_once(tmp_path: Path, page: str) -> None:
    with contextlib.ExitStack() as stack:
        top = _ha_pair_federated(stack, tmp_path, {"a": _scrape("vllm", page), "b": _scrape("vllm", page)})
        top.wait_for('count(vllm:num_requests_running{job="vllm"}) == 2')  # the two copies, one per replica
        result = await _read(top.url)
    assert [(r.replica, r.requests_running, r.requests_waiting) for r in result.replicas] == [("chat-0", 3.0, 5.0)]


def _counter_page(finished: int) -> bytes:
    return (
        b"# TYPE vllm:request_success counter\n"
        + f'vllm:request_success_total{{model_name="m",finished_reason="stop"}} {finished}\n'.encode()
        + b"# TYPE vllm:num_requests_running gauge\n"
        + b'vllm:num_requests_running{model_name="m"} 3\n'
    )


async def test_a_switch_of_copy_behind_is_no_restart(tmp_path: Path) -> None:
    # Review G (round 7): prom-a's copy is read; then prom-a's scrape fails (on that server only) and only prom-b's
    # copy answers, its counter 10 requests behind (b scraped earlier). Read evened out (1000), not as a restart
    # adding the whole 1000 to the rate window; on f6f95f6 the replica read 1000 then 990.
    pages: dict[str, Path | bytes] = {"/a": _counter_page(1000), "/b": _counter_page(990)}
    with serve_pages(pages) as (host, port), contextlib.ExitStack() as stack:
        where = f"{host}:{port}"
        jobs = {name: _scrape("vllm", where, metrics_path=f"/{name}") for name in ("a", "b")}
        # honor_timestamps off: else a series gone from a federated page is not stale for 5 min
        top = _ha_pair_federated(stack, tmp_path, jobs, honor_timestamps=False)
        top.wait_for('count(vllm:request_success_total{job="vllm"}) == 2')
        source = PromQLSource(top.url, mode="replicas", reader="thread", timeout_s=10.0)
        try:
            first = await source.collect_once()
            del pages["/a"]  # prom-a's scrape fails: its series go stale there, then in the global one
            top.wait_for('count(vllm:request_success_total{job="vllm"}) == 1')
            second = await source.collect_once()
        finally:
            await source.aclose()
    assert [r.requests_finished for r in first.replicas] == [1000.0]
    assert [r.requests_finished for r in second.replicas] == [1000.0]  # b's 990, evened at the switch
