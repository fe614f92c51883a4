"""`bench/scrape.py --callgrind` counts Prometheus over several windows: a window without a scrape is left out of
the median (it was a NaN in it), a run without any is said, and zero windows is refused before anything starts."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scrape import peer_instructions

ROOT = Path(__file__).resolve().parents[3]


def test_a_window_without_scrapes_is_left_out_of_the_median() -> None:
    per_window, median, pooled = peer_instructions([(2_000_000, 1_000), (5_000, 0), (3_000_000, 1_000)])
    assert (per_window[0], per_window[2]) == (2_000_000, 3_000_000)
    assert math.isnan(per_window[1])
    assert median == 2_500_000  # of the two windows with scrapes, not NaN
    assert pooled == (2_000_000 + 5_000 + 3_000_000) / 2_000 * 1000


def test_no_scrape_in_any_window_is_said() -> None:
    with pytest.raises(RuntimeError, match="scraped nothing in any of its 2 counted window"):
        peer_instructions([(5_000, 0), (7_000, 0)])


def test_zero_windows_is_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "bench/scrape.py", "--callgrind", "--callgrind-peer-windows", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith("--callgrind-peer-windows must be at least 1 (got 0)")
