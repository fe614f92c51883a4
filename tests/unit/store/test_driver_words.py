"""``store.errors.driver_words``: what the database driver said, on one line, whatever SQLAlchemy wrapped around it
(the statement, its parameters, the background link) — what every store error kvpilot logs or prints reads."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from store.errors import driver_words


def test_a_failed_statement_reads_as_the_drivers_words_alone() -> None:
    engine = create_engine("sqlite://")
    with pytest.raises(OperationalError) as caught, engine.connect() as conn:
        conn.execute(text("SELECT secret FROM nope WHERE token = :t"), {"t": "hunter2"})
    assert "[SQL:" in str(caught.value)  # what the wrapping adds: the statement and its parameters
    assert driver_words(caught.value) == "no such table: nope"


def test_an_error_that_says_nothing_reads_as_its_type() -> None:
    assert driver_words(RuntimeError()) == "RuntimeError"
    assert driver_words(RuntimeError("first\nsecond")) == "first"
