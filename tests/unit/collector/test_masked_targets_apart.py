"""Two scrape targets whose URLs differ only in a secret (``?token=a``, ``?token=b``: a proxy that picks its backend
by the token) are two targets, and every place that shows them masked keeps them two: kvpilot's /metrics (a
replica's labels, a finding's, ``kvpilot_scrape_up``), the API, the findings' summaries, the CLI. Before, both
showed as ``?token=***``: the same label set twice on /metrics (a duplicate series Prometheus drops), two findings
an operator could not tell apart. The rule (``collector.urls.redacted``): the first target met keeps the masked URL
as its name, each later one that shows alike is numbered (``#2``, ``#3``), in the order the scrape loop lists them,
and never by anything of the secret."""

from __future__ import annotations

import re
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from api import convert
from api.exposition import render_snapshot
from api.routers.targets import _out
from collector.scrape import Collector, ScrapeConfig
from collector.state import FleetState
from collector.urls import masked_in, meet, redacted
from detectors import target_down
from detectors.thresholds import DEFAULT
from kvpilot.cli import app
from kvpilot.commands.scrape import replica_names
from kvpilot.runtime.snapshot import Snapshot
from tests.services.pages import serve_pages

PAGE = b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\nvllm:num_requests_running 1\n"


def _duplicates(page: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Each (series, labels) prometheus_client's parser reads more than once on the page."""
    seen = Counter(
        (s.name, tuple(sorted(s.labels.items()))) for fam in text_string_to_metric_families(page) for s in fam.samples
    )
    return [series for series, n in seen.items() if n > 1]


async def _scrape_twice_then_lose_one(pages: dict[str, bytes], urls: list[str]) -> tuple[FleetState, Snapshot]:
    """The real collector on two pod-less targets; the second stops answering; the fleet as /metrics renders it."""
    from collector.samples import TargetInfo

    targets = [TargetInfo(url=u, kind="engine", namespace="ml", deployment="llm") for u in urls]
    state = FleetState(stale_after_s=30)
    async with Collector(ScrapeConfig(timeout_s=60, max_concurrency=4)) as collector:  # a hang guard
        for t in (0.0, 50.0):
            if t:
                del pages["/metrics?token=b"]  # the second target's backend is gone: a 404 from then on
            result = await collector.collect_once(targets)
            state.observe(result.replicas, result.gpus, now=t, down_targets=result.down_targets)
    findings = tuple(target_down.detect(state, thresholds=DEFAULT, now=50.0))
    tte = {(v.deployment_key, v.sample.replica): 60.0 for v in state.replicas()}
    snap = Snapshot(
        tick=2, t=50.0, replicas=state.replicas(), findings=findings, target_health=result.health,
        kv_time_to_exhaustion=tte, targets=tuple(targets),
    )  # fmt: skip
    return state, snap


async def test_two_targets_that_differ_only_in_a_token_are_two_on_metrics_and_in_the_api() -> None:
    pages = {"/metrics?token=a": PAGE, "/metrics?token=b": PAGE}
    with serve_pages(pages) as (host, port):
        urls = [f"http://{host}:{port}/metrics?token=a", f"http://{host}:{port}/metrics?token=b"]
        state, snap = await _scrape_twice_then_lose_one(pages, urls)
    text = render_snapshot(snap).decode()
    assert not re.search("token=[ab]", text)  # still masked: /metrics is unauthenticated
    assert _duplicates(text) == []  # was: waiting, running, time to exhaustion and scrape_up series twice
    replicas = set(re.findall(r'kvpilot_replica_requests_waiting\{[^}]*replica="([^"]*)"', text))
    assert replicas == {f"http://{host}:{port}/metrics?token=***", f"http://{host}:{port}/metrics?token=***#2"}
    scraped = re.findall(r'kvpilot_scrape_up\{target="([^"]*)"\} (\S+)', text)
    assert sorted(scraped) == sorted([(redacted(urls[0]), "1.0"), (redacted(urls[1]), "0.0")])
    assert sorted(scraped)[1][0].endswith("#2")  # the one down is the second, as on the replica's series
    [down] = snap.findings
    assert down.subject.replica == urls[1]  # identity: the URL as given
    assert down.alert_labels()["replica"] == redacted(urls[1]) != redacted(urls[0])
    assert redacted(urls[1]) in down.summary
    assert len({convert.replica(v).replica for v in state.replicas()}) == 2  # GET /v1/replicas
    assert len({_out(t, snap.target_health.get(t.url), True).url for t in snap.targets}) == 2  # GET /v1/targets


def test_the_first_met_keeps_its_name_and_a_name_shown_is_shown_as_it_is() -> None:
    a, b, c = (f"http://10.9.9.9:8000/metrics?tenant=x&api_key={k}" for k in ("k1", "k2", "k3"))
    shown = "http://10.9.9.9:8000/metrics?tenant=x&api_key=***"
    meet([b, a])  # the order the scrape loop lists them
    assert [redacted(b), redacted(a), redacted(c)] == [shown, f"{shown}#2", f"{shown}#3"]
    meet([a, b, c])  # listed again, in another order: names kept (a name never moves to another target)
    assert [redacted(a), redacted(b), redacted(c)] == [f"{shown}#2", shown, f"{shown}#3"]
    summary = f"engine metrics of {redacted(a)} unavailable"
    assert masked_in(summary) == summary  # a stored, already shown summary read again: unchanged
    assert masked_in(f"KV cache of {c} is full") == f"KV cache of {shown}#3 is full"


def test_a_user_and_password_and_a_token_count_alike() -> None:
    # user:password@ hides as redacted@: two targets that differ there only are two names too
    a, b = "http://u:pw1@10.8.8.8:1/m?token=t", "http://u:pw2@10.8.8.8:1/m?token=t"
    meet([a, b])
    assert (redacted(a), redacted(b)) == (
        "http://redacted@10.8.8.8:1/m?token=***",
        "http://redacted@10.8.8.8:1/m?token=***#2",
    )


@given(st.lists(st.text("QZXJVW0123456789", min_size=6, max_size=12), min_size=1, max_size=8, unique=True))
def test_distinct_urls_show_distinct_names_without_their_secrets(secrets: list[str]) -> None:
    urls = [f"http://10.7.7.7:8000/metrics?token={s}" for s in secrets]
    meet(urls[: len(urls) // 2])  # some met by the scrape loop first, the rest shown before it meets them
    names = [redacted(u) for u in urls]
    assert len(set(names)) == len(urls)
    assert not any(s in n for s in secrets for n in names)
    assert [redacted(u) for u in urls] == names  # the same name every time


def test_kvpilot_scrape_names_two_columns_that_differ_only_in_a_token_apart() -> None:
    a, b = "http://10.0.0.5:8000/metrics?token=a", "http://10.0.0.5:8000/metrics?token=b"
    names = replica_names([a, b])
    assert len(set(names)) == 2
    assert not any("token=a" in n or "token=b" in n for n in names)


def test_kvpilot_detect_names_two_targets_that_differ_only_in_a_token_apart() -> None:
    a, b = "http://127.0.0.1:9/metrics?token=SECRETA", "http://127.0.0.1:9/metrics?token=SECRETB"  # refused
    done = CliRunner().invoke(app, ["detect", "--source", a, "--source", b, "--interval-s", "0.1"])
    assert "SECRET" not in done.output
    assert "token=***#2" in done.output, done.output


def test_a_summary_names_its_target_as_the_labels_do_with_punctuation_after_it() -> None:
    # kv_exhaustion's summary is "<replica>: <text>": a URL in a text runs to a blank or quote, so the colon was read
    # as part of it, the URL with it met nowhere and given the next number (#3 for ?token=a, #4 for ?token=b, a
    # user:password@ one "...metrics:#2"): the summary named a target that does not exist, not the labels' name
    a, b = "http://10.6.6.6:8000/metrics?token=a", "http://10.6.6.6:8000/metrics?token=b"
    c, d = "http://u:p1@10.6.6.7:8000/metrics", "http://u:p2@10.6.6.7:8000/metrics"
    meet([a, b, c, d])
    for url in (a, b, c, d):
        assert masked_in(f"{url}: KV cache full in 30 s") == f"{redacted(url)}: KV cache full in 30 s"
        assert masked_in(f"a replica ({url}).") == f"a replica ({redacted(url)})."
    assert redacted(b) == "http://10.6.6.6:8000/metrics?token=***#2"
    assert redacted(d) == "http://redacted@10.6.6.7:8000/metrics#2"
    e = "http://10.6.6.6:8000/metrics?token=e"
    meet([e])
    assert redacted(e) == "http://10.6.6.6:8000/metrics?token=***#3"  # no number was spent on a text's URL
    unmet = "http://10.6.6.8:8000/metrics?token=f:"  # a URL met nowhere, with or without its colon: masked as before
    assert masked_in(f"{unmet} x") == "http://10.6.6.8:8000/metrics?token=*** x"
