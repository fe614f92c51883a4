"""A large Prometheus answer is decoded in pieces (issue 17: one orjson call over 1.7 MB held the GIL, and so the
event loop, for 26-38 ms): the same data as one call, no piece much larger than ``PIECE_BYTES``."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from collector.promql import decode
from collector.promql.decode import PIECE_BYTES, PromQLError


def vector_answer(n: int, **extra: Any) -> dict[str, Any]:
    result = [
        {
            "metric": {
                "__name__": "deployment:kvpilot_signal",
                "namespace": f"ns{i % 7}",
                "deployment": f"d{i}",
                # what the cuts look for, inside a label value (escaped there, so never a cut), and non-ASCII
                "note": '},{"metric":{"x":"y"}} é ☃' if i % 3 == 0 else "plain",
            },
            "value": [1700000000.5, str(i * 0.25)],
        }
        for i in range(n)
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}, **extra}


class CountingOrjson:
    JSONDecodeError = orjson.JSONDecodeError

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def loads(self, body: bytes) -> Any:
        self.sizes.append(len(body))
        return orjson.loads(body)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingOrjson:
    shim = CountingOrjson()
    monkeypatch.setattr(decode, "orjson", shim)
    return shim


def test_a_large_answer_decodes_in_pieces_to_the_same_data(counting: CountingOrjson) -> None:
    whole = vector_answer(6000, warnings=["query touched many series"])
    body = orjson.dumps(whole)
    assert len(body) > 5 * PIECE_BYTES
    assert decode.answer(body, "http://prom") == whole["data"]
    assert len(counting.sizes) >= len(body) // (2 * PIECE_BYTES)
    assert max(counting.sizes) < 2 * PIECE_BYTES  # no call over the whole answer


def test_an_answer_laid_out_otherwise_is_decoded_whole(counting: CountingOrjson) -> None:
    whole = vector_answer(6000)
    body = json.dumps(whole, indent=1).encode()  # whitespace between the series: no cut found
    assert decode.answer(body, "http://prom") == whole["data"]
    assert counting.sizes == [len(body)]


def test_a_small_answer_is_one_call(counting: CountingOrjson) -> None:
    whole = vector_answer(10)
    assert decode.answer(orjson.dumps(whole), "http://prom") == whole["data"]
    assert len(counting.sizes) == 1


def test_a_truncated_large_answer_is_not_json() -> None:
    body = orjson.dumps(vector_answer(6000))
    with pytest.raises(PromQLError, match="not JSON"):
        decode.answer(body[: len(body) - 100], "http://prom")


def test_a_large_error_answer_still_names_the_error() -> None:
    body = orjson.dumps({"status": "error", "errorType": "timeout", "error": "x" * (3 * PIECE_BYTES)})
    with pytest.raises(PromQLError, match="timeout"):
        decode.answer(body, "http://prom")
