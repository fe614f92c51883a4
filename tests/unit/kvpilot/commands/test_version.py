from typer.testing import CliRunner

from kvpilot.cli import app


def test_version_prints_installed_version() -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == version("kvpilot")
