"""A Ctrl-C while the command line is still importing its modules ends `kvpilot` with one line and status 130.

Before (session 17, helper H): an interrupt in the first second of any command printed a KeyboardInterrupt
traceback, because the console script imported kvpilot.cli (typer, click) outside any handler. The interrupt is
delivered here at a fixed point (the import of typer), so the test does not race a timer."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_INTERRUPT_AT_IMPORT = """
import sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["kvpilot", "--help"]
from {module} import main
main()
"""


def _run(module: str) -> subprocess.CompletedProcess[str]:
    code = _INTERRUPT_AT_IMPORT.format(module=module)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_an_interrupt_while_importing_exits_130_without_a_traceback() -> None:
    done = _run("kvpilot._entry")
    assert done.returncode == 130
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == "interrupted"


def test_the_console_script_enters_through_the_guard() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kvpilot"] == "kvpilot._entry:main"
