"""`kvpilot demo --help` says what the rate scale's default is: a fixed 8, chosen for the default trace."""

from __future__ import annotations

from typer.testing import CliRunner

from kvpilot.cli import app


def test_the_rate_scale_help_names_its_fixed_default_and_what_other_traces_need() -> None:
    result = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    # It said "default: sized to the replica", while the default is a fixed 8.0 whatever the trace.
    assert "sized to the replica" not in text
    assert "The default 8 sizes the default trace" in text
    assert "Mooncake about 1" in text
