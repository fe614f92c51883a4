"""Rows another kvpilot version (or a hand) wrote: whatever JSON and text the columns hold, reading a row either gives
the domain object, with only what this version understands, or a ValueError saying why; the API shows every row.
(tests/reliability/test_bad_input.py checks the same rows through a restart and the routes.)"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api import convert
from detectors.finding import Severity
from store.models import DecisionRow, FindingRow
from store.repo.decisions import to_decision
from store.repo.findings import to_finding

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.just(10**400),  # past a float's range: JSON holds it, float() refuses it
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
SEVERITY = st.sampled_from([s.value for s in Severity]) | st.text(max_size=10)


def _a_float(v: float) -> bool:
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _finding(severity: str, evidence: object) -> FindingRow:
    return FindingRow(
        id="0123456789abcdef", kind="stuck_gpu", severity=severity, deployment="llm/chat", replica="", node="n0",
        gpu="GPU-0", since=1.0, summary="x", evidence=evidence, action="none", state="open", last_seen=1.0,
        closed_at=None, acknowledged_at=None, acknowledged_by=None, acknowledge_note=None,
    )  # fmt: skip


def _decision(forecast: object) -> DecisionRow:
    return DecisionRow(
        id=1, deployment="llm/chat", timestamp=1.0, current_replicas=1, ready_replicas=1, desired_replicas=2,
        warm_pool=0, reason="brand_new", message="x", predictive_replicas=None, reactive_replicas=None,
        forecast=forecast,
    )  # fmt: skip


@settings(max_examples=300, deadline=None, database=None)
@given(severity=SEVERITY, evidence=JSON)
def test_a_finding_row_is_read_or_refused_in_words_and_always_shown(severity: str, evidence: object) -> None:
    row = _finding(severity, evidence)
    if severity in {s.value for s in Severity} and (evidence is None or isinstance(evidence, dict)):
        f = to_finding(row)
        assert all(v is None or isinstance(v, str) or math.isfinite(v) for v in f.evidence.values())
    else:
        with pytest.raises(ValueError, match=r"^(severity|evidence) "):  # restore skips the row naming it
            to_finding(row)
    shown = convert.finding(row)  # never a 500 for the page it is on
    assert shown.severity == severity
    json.loads(shown.model_dump_json())


@settings(max_examples=300, deadline=None, database=None)
@given(forecast=JSON)
def test_a_decision_row_keeps_the_finite_numbers_of_its_forecast(forecast: object) -> None:
    d = to_decision(_decision(forecast))
    assert all(isinstance(v, float) and math.isfinite(v) for v in d.forecast.values())
    if isinstance(forecast, dict):
        numbers = {k for k, v in forecast.items() if isinstance(v, int | float) and _a_float(v)}
        assert set(d.forecast) == numbers
    json.loads(convert.decision(d).model_dump_json())


@pytest.mark.parametrize(
    ("severity", "evidence", "why"),
    [
        ("fatal", {}, "severity 'fatal' is not one this kvpilot knows"),  # a newer version's severity
        ("warning", [1, 2], "evidence is a JSON list, not an object"),  # evidence of another shape
    ],
)
def test_an_unreadable_finding_row_says_why(severity: str, evidence: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        to_finding(_finding(severity, evidence))
