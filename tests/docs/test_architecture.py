"""docs/architecture.md cannot rot: every repository path it names exists, and the main path stays under ten files."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
# A repository path: segments of letters, digits, '_', '-', '.', joined by '/', a file with an extension or a folder
# ending in '/'; URLs and HTTP routes (/v1/...) are not paths.
_PATH = re.compile(r"(?<![\w/{.])((?:[A-Za-z_][\w.-]*/)+(?:[\w-]+\.(?:py|md|toml|yaml|proto|json))?)(?![\w/])")
_STEP = re.compile(r"^ ?(\d)\. (\S+)", re.M)


def _paths(text: str) -> set[str]:
    return {m.group(1) for m in _PATH.finditer(text) if not m.group(1).startswith(("http", "v1/"))}


def test_every_named_path_exists() -> None:
    paths = _paths(DOC.read_text())
    assert len(paths) > 20  # the pattern finds the doc's paths at all
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_check_catches_a_missing_path() -> None:
    assert _paths("see `collector/nothing_here.py` and api/series.py") == {"collector/nothing_here.py", "api/series.py"}


def test_scrape_to_keda_in_under_ten_files() -> None:
    steps = _STEP.findall(DOC.read_text())
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1))
    assert 5 <= len(steps) < 10
    assert steps[0][1] == "collector/scrape.py"
    assert steps[-1][1] == "scaler/keda/target.py"


def test_linked_from_the_readme_and_the_docs_index() -> None:
    assert "docs/architecture.md" in (REPO / "README.md").read_text()
    assert "(architecture.md)" in (REPO / "docs" / "README.md").read_text()
