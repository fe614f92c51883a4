"""Fault JSON validation: every accepted body is a Fault, every refused one a ValueError naming the problem."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import Fault, parse_fault


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"type": "xid", "node": "node-1", "gpu": 3, "xid": 48}, Fault("xid", node="node-1", gpu=3, xid=48)),
        ({"type": "kv_pressure"}, Fault("kv_pressure")),  # every field defaulted
        ({"type": "kv_pressure", "count": 5, "duration_s": 2}, Fault("kv_pressure", count=5, duration_s=2.0)),
        ({"type": "hung_gpu", "node": "n", "gpu": 2.0}, Fault("hung_gpu", node="n", gpu=2)),  # integral float ok
        ({"type": "routing", "routing": "prefix_affinity"}, Fault("routing", routing="prefix_affinity")),
    ],
)
def test_accepted(body: dict, expected: Fault) -> None:
    assert parse_fault(body) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("xid", "JSON object"),  # not an object
        ({"type": "flood"}, "unknown fault type"),  # unknown type
        ({"type": "crash"}, "needs field"),  # missing replica
        ({"type": "crash", "replica": "a", "colour": 1}, "unknown field"),  # extra field
        ({"type": "xid", "node": "n", "gpu": 0, "xid": 0}, "xid > 0"),  # no XID 0
        ({"type": "xid", "node": "n", "gpu": 1.5, "xid": 13}, "'gpu' must be int"),  # fractional index
        ({"type": "xid", "node": "n", "gpu": True, "xid": 13}, "'gpu' must be int"),  # bool is not int
        ({"type": "kv_pressure", "count": 10**6}, "count"),  # unbounded burst
        ({"type": "kv_pressure", "duration_s": 0}, "duration_s"),  # no time
        ({"type": "hung_gpu", "node": 5, "gpu": 0}, "'node' must be str"),  # wrong type
    ],
)
def test_refused(body: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault(body)


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5), st.lists(st.integers()))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["type", "node", "gpu", "xid", "replica", "count", "prompt_tokens",
                                        "output_tokens", "duration_s", "routing", "other"]), _values))  # fmt: skip
def test_parse_fault_only_raises_value_error(body: dict) -> None:
    try:
        f = parse_fault(body)
    except ValueError:
        return
    assert f.gpu >= 0
    assert f.count >= 0
    assert f.duration_s > 0
