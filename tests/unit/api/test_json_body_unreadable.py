"""A JSON body the reader cannot read for a reason other than its syntax - not UTF-8, nested past the reader's depth,
a number of more than 4,300 digits - is refused with a 422 that says which; FastAPI answered each with a bare 400
"There was an error parsing the body". Nothing is stored."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.unit.api.conftest import ADMIN, FakeRuntime, auth, make_client


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"node": "n\xe9"}', "the body is not UTF-8 text (byte 0xe9 at 11); send UTF-8 JSON"),
        (
            b'{"node": "n1", "reason": ' + b"[" * 3000 + b"]" * 3000 + b"}",
            "the body's JSON is nested too deeply to read",
        ),
        (b'{"node": "n1", "reason": 1' + b"0" * 5000 + b"}", "the body's JSON cannot be read: Exceeds the limit (4300"),
    ],
    ids=["latin-1", "deep", "digits"],
)
def test_a_body_that_cannot_be_read_is_refused_saying_why(runtime: FakeRuntime, body: bytes, said: str) -> None:
    runtime.settings_max_body_bytes = 65536  # kvpilot's own limit (api.max_body_bytes); the fake's is 4 KiB
    client = make_client(runtime)
    before = client.get("/v1/drains", headers=auth(ADMIN)).json()["total"]
    got = client.post("/v1/drains", content=body, headers={**auth(ADMIN), "content-type": "application/json"})
    assert got.status_code == 422, got.text
    (detail,) = got.json()["detail"]
    assert (detail["type"], detail["loc"]) == ("json_invalid", ["body"])
    assert detail["msg"].startswith(said), detail["msg"]
    assert client.get("/v1/drains", headers=auth(ADMIN)).json()["total"] == before


def test_a_syntax_error_is_still_fastapis_own_answer(client: TestClient) -> None:
    got = client.post(
        "/v1/drains", content=b'{"node": "n1"', headers={**auth(ADMIN), "content-type": "application/json"}
    )
    assert got.status_code == 422
    assert got.json()["detail"][0]["type"] == "json_invalid"
