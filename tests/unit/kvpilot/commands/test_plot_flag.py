"""`--plot` of `kvpilot backtest` and `kvpilot demo`: the file written is the one named (``.png`` added where the
name has none, and said), a type matplotlib cannot write is refused before the replay, and a plot that cannot be
written after it loses none of the results."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app

SHORT = ["backtest", "--trace", "synthetic:duration_s=60,rate=2", "--no-frontier", "--policies", "reactive"]


def test_a_plot_that_cannot_be_made_is_refused_before_the_replay() -> None:
    # the folder exists, the file cannot be made there: was refused only after the replay (exit 1, results printed)
    for command in (SHORT, ["demo", "--json", "--duration", "60"]):
        out = CliRunner().invoke(app, [*command, "--json", "--plot", "/proc/kvpilot-plot.png"])
        assert out.exit_code == 2, out.output
        assert out.stderr.strip() == "error: --plot /proc/kvpilot-plot.png: No such file or directory"
        assert out.stdout == ""  # refused before the replay


def test_a_plot_that_fails_after_the_replay_keeps_the_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import scaler.backtest.plot as backtest_plot

    def fails(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(backtest_plot, "plot", fails)  # a disk filling during the replay
    out = CliRunner().invoke(app, [*SHORT, "--json", "--plot", str(tmp_path / "figure.png")])
    assert out.exit_code == 1, out.output
    assert "reactive" in json.loads(out.stdout)["policies"]
    assert out.stderr.strip().splitlines()[-1] == f"error: --plot {tmp_path / 'figure.png'}: No space left on device"


def test_a_plot_named_without_a_suffix_is_written_as_png_and_said(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, [*SHORT, "--json", "--plot", str(tmp_path / "figure")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "figure.png").stat().st_size > 0  # matplotlib added .png without a word before
    assert out.stderr.strip().splitlines()[-1] == f"plot written to {tmp_path / 'figure.png'}"


def test_a_type_matplotlib_cannot_write_is_refused_before_the_replay(tmp_path: Path) -> None:
    for command in (SHORT, ["demo", "--json", "--duration", "60"]):
        out = CliRunner().invoke(app, [*command, "--plot", str(tmp_path / "figure.foo")])
        assert out.exit_code == 2, out.output
        assert out.stderr.startswith(f"error: --plot {tmp_path / 'figure.foo'}: matplotlib writes no .foo files (png,")
        assert "kvpilot: " not in out.stderr  # refused before the replay's progress
    assert not list(tmp_path.iterdir())


def test_a_plot_named_for_a_fifo_is_refused_without_waiting_on_it(tmp_path: Path) -> None:
    fifo = tmp_path / "plot.png"
    os.mkfifo(fifo)
    out = CliRunner().invoke(app, [*SHORT, "--json", "--plot", str(fifo)])
    assert out.exit_code == 2, out.output
    assert out.stderr.strip() == f"error: --plot {fifo}: {fifo} is not a regular file"
