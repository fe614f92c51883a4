"""Per-target health: a target that goes down says why in the log, once per reason, and says when it is back."""

from __future__ import annotations

import logging

import pytest

from collector.health import HealthBook


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "collector.health"]


def test_down_logged_once_per_reason_and_recovery_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collector.health")
    book = HealthBook()
    url = "http://u:pw@10.0.0.1:8000/metrics"
    for t in range(5):  # the same failure every tick: one line, not five
        book.record(url, ok=False, started_ts=t, duration_s=0.1, error="adapter error: unknown engine 'vLLM'")
    book.record(url, ok=False, started_ts=5, duration_s=2.0, error="timed out after 2 s")  # a new reason: a line
    book.record(url, ok=True, started_ts=6, duration_s=0.1)
    book.record(url, ok=True, started_ts=7, duration_s=0.1)
    book.record(url, ok=False, started_ts=8, duration_s=2.0, error="timed out after 2 s")  # down again: a line
    assert _messages(caplog) == [
        "target http://redacted@10.0.0.1:8000/metrics is down: adapter error: unknown engine 'vLLM'",
        "target http://redacted@10.0.0.1:8000/metrics is down: timed out after 2 s",
        "target http://redacted@10.0.0.1:8000/metrics is up again after 6 failed scrapes",
        "target http://redacted@10.0.0.1:8000/metrics is down: timed out after 2 s",
    ]
    assert next(r.levelno for r in caplog.records if r.name == "collector.health") == logging.WARNING


def test_a_healthy_target_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collector.health")
    book = HealthBook()
    for t in range(3):
        book.record("http://a/m", ok=True, started_ts=t, duration_s=0.1)
    assert _messages(caplog) == []


def test_each_scrape_carries_the_fields_it_does_not_set() -> None:
    # the last error outlives a recovery, the last success outlives a failure; counters add up
    book = HealthBook()
    book.record("http://a/m", ok=True, started_ts=1.0, duration_s=0.1, body_bytes=10)
    down = book.record("http://a/m", ok=False, started_ts=2.0, duration_s=2.0, error="timed out")
    assert (down.up, down.last_error, down.last_success_ts, down.last_body_bytes) == (False, "timed out", 1.0, None)
    up = book.record("http://a/m", ok=True, started_ts=3.0, duration_s=0.2, body_bytes=12)
    assert (up.url, up.up, up.last_error, up.last_scrape_ts, up.last_scrape_duration_s, up.last_success_ts) == (
        "http://a/m",
        True,
        "timed out",
        3.0,
        0.2,
        3.0,
    )
    assert (up.consecutive_failures, up.scrapes_total, up.failures_total, up.last_body_bytes) == (0, 3, 1, 12)


def test_a_page_read_in_part_is_counted_and_logged_once_per_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collector.health")
    book = HealthBook()
    url = "http://10.0.0.2:9400/metrics"
    for t in range(3):  # the same bad line every scrape: counted each time, logged once
        after = book.record(url, ok=True, started_ts=t, duration_s=0.1, error="page read in part: line 4: …")
    assert (after.up, after.partial_pages_total, after.failures_total) == (True, 3, 0)
    assert after.last_error == "page read in part: line 4: …"
    after = book.record(url, ok=True, started_ts=3, duration_s=0.1)  # read whole again: the reason stays shown
    assert (after.partial_pages_total, after.last_error) == (3, "page read in part: line 4: …")
    assert _messages(caplog) == ["target http://10.0.0.2:9400/metrics read in part: page read in part: line 4: …"]
