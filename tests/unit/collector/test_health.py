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
