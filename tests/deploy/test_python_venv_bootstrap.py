"""`make demo`/`make test` on a fresh Debian: scripts/install-python-venv.sh before the Makefile creates .venv.

Debian ships the venv module's ensurepip apart (python3-venv); without it `python3 -m venv` stops half way. The
script does nothing where the interpreter can create a venv, and otherwise installs the package (as root, with
apt-get) or says which one to install. The apt-get branch is not run here: the PATH below has no apt-get.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-python-venv.sh"


def _run(python: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(SCRIPT), python],
        capture_output=True,
        text=True,
        env={"PATH": str(path)},
        timeout=60,
        check=False,
    )


def _bin_with(tmp_path: Path) -> Path:
    """A PATH holding only what the scripts call besides apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("id", "bash", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        os.symlink(found, bin_dir / tool)
    return bin_dir


def test_an_interpreter_that_can_create_a_venv_needs_nothing(tmp_path: Path) -> None:
    done = _run(sys.executable, _bin_with(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""


def test_an_interpreter_without_ensurepip_is_named_with_the_package_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "python-without-ensurepip"
    fake.write_text(f'#!/bin/bash\ncase "$*" in *"import ensurepip"*) exit 1;; esac\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    done = _run(str(fake), _bin_with(tmp_path))
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert done.returncode == 1
    assert "cannot create a virtual environment (no ensurepip)" in done.stderr
    assert f"apt-get install python3-venv python{version}-venv" in done.stderr


def test_the_makefile_runs_it_before_creating_the_venv() -> None:
    lines = (ROOT / "Makefile").read_text().splitlines()
    recipe = lines[lines.index("$(STAMP): pyproject.toml") + 1 :][:2]
    assert recipe == ["\tbash scripts/install-python-venv.sh $(PYTHON)", "\t$(PYTHON) -m venv $(VENV)"]
