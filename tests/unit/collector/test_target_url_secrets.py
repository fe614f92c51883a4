"""A scrape target's URL may carry a secret: a token or password in its query (``?token=``, ``api_key=``) or a
``user:password@`` (targets from discovery are not held to the API's rules). Wherever kvpilot names a target (logs,
/metrics labels, findings, the API, ``kvpilot scrape``/``detect``) it is shown with the secret masked (``redacted``,
``password_masked``'s rule for query secrets), while the target is still known by its URL as given: two targets that
differ only in their token stay two. Before, only ``user:password@`` was masked: a token in the query went to the log,
to /metrics (a label value Prometheus keeps), to findings and to the CLI's output."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from api import convert
from api.exposition import render_snapshot
from collector.adapt import adapt_page
from collector.discovery.static import TargetFileError, parse_targets
from collector.health import HealthBook
from collector.samples import GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from collector.state import FleetState
from collector.urls import password_masked, redacted
from detectors import target_down
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import DEFAULT
from kvpilot.cli import app
from kvpilot.commands.scrape import replica_names
from kvpilot.runtime.snapshot import Snapshot

SECRET = "tok-5ecret-77"
URL = f"http://10.0.0.9:8000/metrics?format=text&token={SECRET}"
SHOWN = "http://10.0.0.9:8000/metrics?format=text&token=***"
PAGE = b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\nvllm:num_requests_running 1\n"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (URL, SHOWN),
        (f"http://h/m?access_token={SECRET}", "http://h/m?access_token=***"),
        (f"http://h/m?API_KEY={SECRET}&x=1", "http://h/m?API_KEY=***&x=1"),  # any case; the rest kept
        (f"http://h/m?Password={SECRET}#top", "http://h/m?Password=***#top"),
        (f"http://h/m?X-Amz-Signature={SECRET}", "http://h/m?X-Amz-Signature=***"),
        (f"http://u:{SECRET}@h:1/m?client_secret={SECRET}", "http://redacted@h:1/m?client_secret=***"),
        ("http://h:1/m?format=text", "http://h:1/m?format=text"),  # nothing secret: as it is
        ("http://h:1/m", "http://h:1/m"),
    ],
)
def test_a_targets_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert redacted(url) == shown
    assert redacted(url) == redacted(url)  # the same for the same target, every time
    assert SECRET not in password_masked(url)  # the one rule for every URL kvpilot shows (PromQL, database)


def test_the_health_log_names_a_target_without_its_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collector.health")
    book = HealthBook()
    other = URL.replace(SECRET, "another")
    book.record(URL, ok=False, started_ts=0.0, duration_s=0.1, error="HTTP 503")
    book.record(other, ok=True, started_ts=0.0, duration_s=0.1)
    said = [r.getMessage() for r in caplog.records if r.name == "collector.health"]
    assert said == [f"target {SHOWN} is down: HTTP 503"]
    assert set(book.snapshot()) == {URL, other}  # known by the URL as given: two targets, not one


def _observe(state: FleetState, t: float, ok: bool) -> CollectResult:
    target = TargetInfo(url=URL, kind="engine", namespace="ml", deployment="llm")  # no pod: named by its URL
    page = adapt_page(PAGE, target, t) if ok else None
    replicas = tuple(page.replicas) if page is not None else ()
    result = CollectResult(t, (ScrapeResult(target, ok=ok, timestamp=t, duration_s=0.0, replicas=replicas),))
    state.observe(result.replicas, result.gpus, now=t, down_targets=result.down_targets)
    return result


def test_metrics_and_findings_name_a_replica_on_no_pod_without_its_token() -> None:
    state = FleetState(stale_after_s=30)
    _observe(state, 0.0, ok=True)
    assert [v.sample.replica for v in state.replicas()] == [URL]  # the replica's key: its URL as given
    for t in range(5, 50, 5):
        _observe(state, float(t), ok=False)
    [down] = target_down.detect(state, thresholds=DEFAULT, now=45.0)
    assert down.subject.replica == URL  # the finding's identity: the replica's key, unchanged
    assert SECRET not in down.summary
    assert SHOWN in down.summary
    assert down.alert_labels()["replica"] == SHOWN
    book = HealthBook()
    book.record(URL, ok=False, started_ts=45.0, duration_s=0.1, error="HTTP 503")
    snap = Snapshot(tick=1, t=45.0, replicas=state.replicas(), findings=(down,), target_health=book.snapshot())
    text = render_snapshot(snap).decode()
    assert SECRET not in text  # /metrics is unauthenticated and Prometheus keeps every label value
    assert f'replica="{SHOWN}"' in text
    assert f'kvpilot_scrape_up{{target="{SHOWN}"}} 0.0' in text
    assert [convert.replica(v).replica for v in state.replicas()] == [SHOWN]  # GET /v1/replicas


def test_any_findings_summary_shows_a_url_named_replica_masked() -> None:
    subject = Subject(deployment="ml/llm", replica=URL)
    said = Finding("kv_exhaustion", Severity.WARNING, subject, 0.0, f"KV cache of {URL} is 97 % full")
    assert said.summary == f"KV cache of {SHOWN} is 97 % full"
    assert said.id == Finding("kv_exhaustion", Severity.WARNING, subject, 0.0, "another text").id  # identity: kept


def test_kvpilot_scrape_names_a_failing_target_without_its_secrets() -> None:
    url = f"http://scraper:{SECRET}@127.0.0.1:9/metrics?token={SECRET}"  # port 9 (discard): refused
    done = CliRunner().invoke(app, ["scrape", url, "--timeout", "2"])
    assert done.exit_code == 2
    assert SECRET not in done.output
    assert "http://redacted@127.0.0.1:9/metrics?token=***" in done.output
    assert replica_names([url, "http://127.0.0.1:10/metrics"]) == ["127.0.0.1:9", "127.0.0.1:10"]


def test_kvpilot_detect_names_a_failing_target_without_its_token() -> None:
    url = f"http://127.0.0.1:9/metrics?token={SECRET}"
    done = CliRunner().invoke(app, ["detect", "--source", url, "--interval-s", "0.1"])
    assert SECRET not in done.output, done.output


@pytest.mark.parametrize(
    "items",
    [
        [URL, URL],  # the same target twice
        [URL.replace("http://", "http://[::1")],  # not a URL: refused, named without its token
    ],
)
def test_a_targets_file_refused_names_the_url_without_its_token(items: list[str]) -> None:
    with pytest.raises(TargetFileError) as refused:
        parse_targets(items)
    assert SECRET not in str(refused.value)
    assert "token=***" in str(refused.value)


def test_two_gpu_pages_on_no_node_that_differ_only_in_a_token_stay_two() -> None:
    # A GPU page on no node is known by its name (GpuSample.page): a key, so its token is kept there (two pages stay
    # two, each its own down finding) and masked wherever it is shown (summary, labels, /v1/gpus)
    pages = [TargetInfo(url=URL.replace(SECRET, f"{SECRET}-{n}"), kind="gpu") for n in (1, 2)]
    state = FleetState(stale_after_s=30)

    def tick(t: float, ok: tuple[bool, bool]) -> CollectResult:
        results = tuple(
            ScrapeResult(p, ok=up, timestamp=t, duration_s=0.0, gpus=(GpuSample("", "0", f"GPU-{n}", "H100", t),) * up)
            for n, (p, up) in enumerate(zip(pages, ok, strict=True))
        )
        result = CollectResult(t, results)
        scraped = result.gpu_nodes_scraped
        state.observe(result.replicas, result.gpus, now=t, down_targets=result.down_targets, gpu_nodes_scraped=scraped)
        return result

    first = tick(0.0, (True, True))
    assert len(first.gpu_nodes_scraped) == 2
    assert len({g.page for g in first.gpus}) == 2
    for t in range(5, 50, 5):
        tick(float(t), (False, True))  # the first page down, the second answering
    [down] = target_down.detect(state, thresholds=DEFAULT, now=45.0)
    assert down.subject.replica == pages[0].url  # the first page's own finding (its key, as given)
    assert SECRET not in down.summary
    assert down.alert_labels()["replica"] == SHOWN
    assert all(SECRET not in (convert.gpu(g).replica or "") for g in state.gpus())
