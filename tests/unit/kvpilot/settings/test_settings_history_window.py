"""`collector.history_s` and `collector.rate_window_s`: what the settings take, the fleet state `kvpilot run` builds
from them takes too. A history shorter than the rate window (`history_s: 30`) was taken by `kvpilot config show`
and stopped `kvpilot run` at start with a ValueError traceback out of FleetState (session 30 helper E)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.state import FleetState
from kvpilot.settings import SettingsError, load_settings


def test_a_history_shorter_than_the_rate_window_is_refused_in_words(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("collector:\n  history_s: 30\n")
    with pytest.raises(
        SettingsError, match=r"collector\.history_s \(30\) must be at least collector\.rate_window_s \(60\)"
    ):
        load_settings(path)


@settings(max_examples=60, deadline=None)
@given(history_s=st.floats(1.0, 7200.0), rate_window_s=st.floats(1.0, 7200.0))
def test_settings_taken_build_the_fleet_state(tmp_path_factory: pytest.TempPathFactory, history_s: float,
                                              rate_window_s: float) -> None:  # fmt: skip
    path = tmp_path_factory.mktemp("k") / "k.yaml"
    path.write_text(f"collector:\n  history_s: {history_s!r}\n  rate_window_s: {rate_window_s!r}\n")
    try:
        c = load_settings(path).collector
    except SettingsError:
        assert history_s < rate_window_s  # the only combination refused here
        return
    FleetState(rate_window_s=c.rate_window_s, history_s=c.history_s, stale_after_s=c.stale_after_s)  # as wiring does
