"""An API server (or a proxy before it) that answers a Lease call 200 with JSON that is not a Lease: the call fails,
as the client's model classes made it fail, so that a shard holder keeps its shards only until its Leases expire.
Read as dicts (6121265), a list answered `[]` raised out of the round instead, before any renewal: the round ended,
and the holder went on acting for shards whose Leases had expired and that others had taken."""

from __future__ import annotations

from typing import Any

import pytest

from collector.clock import VirtualClock
from tests.fakekube import FakeKube
from tests.unit.kvpilot.runtime.test_shards_takeover import _coordinator

LEASE_S = 6.0


class _Answer:
    def __init__(self, body: bytes) -> None:
        self.status, self.reason, self.data, self.body = 200, "OK", body, body

    def read(self) -> bytes:
        return self.body

    def getheaders(self) -> dict[str, str]:
        return {}


def _holding_all(kube: FakeKube, clock: VirtualClock) -> Any:
    coordinator = _coordinator(kube, clock, "a", LEASE_S)
    while len(coordinator.owned) < 3:
        coordinator.round()
        clock.advance(coordinator.next_wake_s(2.0))
    return coordinator


def _rounds(coordinator: Any, clock: VirtualClock) -> list[int]:
    """Shards held after each round, a round every 2 s for two lease periods."""
    held = []
    for _ in range(6):
        clock.advance(2.0)
        held.append(len(coordinator.round()))
    return held


@pytest.mark.parametrize("body", [b"[]", b'"ok"', b"null"])
def test_an_answer_that_is_no_object_is_a_failed_call_and_the_shards_go_at_expiry(
    kube: FakeKube, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch, body: bytes
) -> None:
    coordinator = _holding_all(kube, clock)
    monkeypatch.setattr(coordinator._api, "_send", lambda *a, **k: (_Answer(body), body))
    held = _rounds(coordinator, clock)
    assert held[0] == 3  # kept while its Leases may still be its own
    assert held[-1] == 0  # and not after they expired


@pytest.mark.parametrize(
    "body",
    [
        b'{"items": [1]}',  # items that are not objects
        b'{"items": [{"metadata": "x"}]}',  # an item whose metadata is not an object
        b'{"items": [{"metadata": {"labels": ["x"]}}]}',  # labels that are not an object
    ],
)
def test_a_list_of_no_leases_is_a_failed_list_and_the_renewals_go_on(
    kube: FakeKube, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch, body: bytes
) -> None:
    coordinator = _holding_all(kube, clock)
    api = coordinator._api
    send = api._send

    def garbled_lists(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "GET" and "labelSelector" in url:
            return _Answer(body), body
        return send(method, url, *args, **kwargs)

    monkeypatch.setattr(api, "_send", garbled_lists)
    coordinator._settled = False  # the next round lists
    assert _rounds(coordinator, clock) == [3] * 6
