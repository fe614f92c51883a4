"""`store.retention_days` against `drains.budget_window_s`: retention deletes finished drains older than it, and the
budget counts the drains started within its window, so a retention shorter than the window let the budget count a
drain done 13 h before as none (measured on the store: retention_days 0.5 with the default day-long window, budget
1: a second drain the same day was approved). The combination is refused at start (session 30 helper E)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvpilot.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    "text",
    [
        "store: {retention_days: 0.5}\n",  # half a day against the default day-long window
        "store: {retention_days: 2}\ndrains: {budget_window_s: 604800}\n",  # two days against a week
    ],
)
def test_a_retention_shorter_than_the_drain_budgets_window_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(text)
    refused = r"store\.retention_days \(.* days\) is shorter than drains\.budget_window_s"
    with pytest.raises(SettingsError, match=refused):
        load_settings(path)


@pytest.mark.parametrize(
    ("text", "retention_days"),
    [
        ("store: {retention_days: 1}\n", 1.0),  # exactly the window
        ("store: {retention_days: 0.5}\ndrains: {budget_window_s: 3600}\n", 0.5),  # an hour's budget
        ("store: {retention_days: 0.5}\ndrains: {budget: 0}\n", 0.5),  # no budget to count for
    ],
)
def test_a_retention_as_long_as_the_window_or_without_a_budget_is_taken(
    tmp_path: Path, text: str, retention_days: float
) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(text)
    assert load_settings(path).store.retention_days == retention_days
