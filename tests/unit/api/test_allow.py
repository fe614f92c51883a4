"""A method a path does not answer gets 405 with every method the path does answer in ``Allow`` (RFC 9110 15.5.6),
not only the first route's (``api.allow``)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.unit.api.conftest import ADMIN, auth


def _allow(response) -> set[str]:
    return {m.strip() for m in response.headers["allow"].split(",")}


def test_a_path_with_get_and_post_names_both(client: TestClient) -> None:
    for method in ("PUT", "DELETE", "OPTIONS", "PATCH"):
        response = client.request(method, "/v1/drains", headers=auth(ADMIN))
        assert response.status_code == 405, method
        assert _allow(response) == {"GET", "HEAD", "POST"}  # was {'GET'}: the first route's alone


def test_a_get_only_path_names_get_and_head(client: TestClient) -> None:
    response = client.post("/healthz")
    assert response.status_code == 405
    assert _allow(response) == {"GET", "HEAD"}


def test_an_unknown_path_is_still_a_404_without_allow(client: TestClient) -> None:
    response = client.request("PUT", "/v1/no-such-thing")
    assert response.status_code == 404
    assert "allow" not in response.headers
