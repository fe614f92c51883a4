"""The schema history stands on its own: migrations/ imports nothing of kvpilot/, and Alembic run by hand takes its
database from ``-x url=`` or says where a URL comes from (`kvpilot db` reads the settings and passes one)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import migrations

REPO = Path(__file__).resolve().parents[3]


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_migrations_import_nothing_of_kvpilot() -> None:
    files = sorted((REPO / "migrations").rglob("*.py"))
    assert len(files) > 3  # env.py, __init__.py and the revisions were found at all
    offenders = {
        str(f.relative_to(REPO)): sorted(n for n in _imported(f) if n == "kvpilot" or n.startswith("kvpilot."))
        for f in files
    }
    assert not {f: n for f, n in offenders.items() if n}


def _alembic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(REPO / "migrations" / "alembic.ini"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_alembic_by_hand_takes_the_url_from_x(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'by-hand.db'}"
    done = _alembic("-x", f"url={url}", "upgrade", "head")
    assert done.returncode == 0, done.stderr
    assert migrations.current(url) == migrations.head()


def test_alembic_by_hand_without_a_url_says_where_one_comes_from(tmp_path: Path) -> None:
    done = _alembic("upgrade", "head")
    assert done.returncode != 0
    for says in ("no database URL", "kvpilot db upgrade", "-x url="):
        assert says in done.stderr
