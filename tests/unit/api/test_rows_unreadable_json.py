"""A stored JSON value the decoder cannot read at all costs only itself, as one nested too deeply does (session 22):
an integer of more digits than Python converts (4,300: PostgreSQL's jsonb and SQLite keep any number) or text that
is no JSON (a hand's edit, another program's row; SQLite's JSON column is text) reads as null, said. Before
(session 23, hostile input round 8), the decoder's ValueError failed the whole query it came in: every start of
kvpilot (restore reads the open findings and the latest decisions), the findings and decisions pages (500), the
drain circuit breaker's read of the instances' nodes."""

from __future__ import annotations

import logging
import time

import pytest
from fastapi.testclient import TestClient

from kvpilot.runtime.restore import restore
from store.db import transaction
from store.repo.fleet import live_instance_nodes
from tests.unit.api.conftest import FakeRuntime, auth
from tests.unit.api.test_rows_nested_too_deep import store_rows

UNREADABLE = [
    '{"xid": 1' + "0" * 5000 + "}",  # past int's 4,300 digits: ValueError, not a number too big for a float
    '{"xid": 79',  # cut short
    "not json",
    "",
]


@pytest.mark.parametrize("value", UNREADABLE, ids=["digits", "cut-short", "not-json", "empty"])
def test_a_start_and_the_pages_read_past_a_value_the_decoder_refuses(
    runtime: FakeRuntime, client: TestClient, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    now = time.time()
    store_rows(runtime, now, evidence=value, value=value, ids="e")
    with caplog.at_level(logging.WARNING, logger="store.db"):
        restored = restore(runtime.sessions, now=now, history_s=3600)
    found = {f.subject.gpu: f.evidence for f in restored.findings if f.subject.deployment == "llm/deep"}
    assert found == {"GPU-8": {}, "GPU-9": {"xid": 79.0}}  # the row resumed, its evidence read as none
    assert restored.decisions["llm/deep"].forecast == {}
    assert "not JSON kvpilot reads" in caplog.text  # said, as what it is (the value itself never)
    assert not value or value not in caplog.text
    page = client.get("/v1/findings", params={"limit": 1000}, headers=auth("r" * 24))
    assert page.status_code == 200, page.text
    assert {f["id"]: f["evidence"] for f in page.json()["items"]}["00000000000000e1"] == {}
    assert client.get("/v1/decisions", headers=auth("r" * 24)).status_code == 200
    with transaction(runtime.sessions) as s:
        assert live_instance_nodes(session=s, now=now, stale_after_s=60) == {"kv-1": set(), "kv-2": {"n2"}}
