"""An open API (no tokens: every caller may act) is not put on the network unless asked for."""

from __future__ import annotations

import pytest

from kvpilot.settings import load_settings

TOKEN = "7f3a9c2e5b8d1f4a6c0e9b2d5f8a1c4e7b0d3f6a9c2e5b8d"


@pytest.mark.parametrize(
    ("api", "host"),
    [
        ({}, "127.0.0.1"),  # development, no tokens: open, so loopback only
        ({"admin_tokens": [TOKEN]}, "0.0.0.0"),
        ({"read_tokens": [TOKEN]}, "0.0.0.0"),
        ({"host": "0.0.0.0"}, "0.0.0.0"),  # asked for explicitly: kept
        ({"host": "10.0.0.7", "admin_tokens": [TOKEN]}, "10.0.0.7"),
    ],
)
def test_the_servers_bind_loopback_only_while_the_api_is_open(api: dict[str, object], host: str) -> None:
    assert load_settings(api=api).bind_host == host


def test_production_with_its_admin_token_listens_on_every_interface() -> None:
    assert load_settings(environment="production", api={"admin_tokens": [TOKEN]}).bind_host == "0.0.0.0"
