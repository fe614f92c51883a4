"""The pages' references resolve: every relative Markdown link names a file that exists (and a heading of it, for a
`#anchor`), and every section a page sends the reader to by name — `docs/scaling.md, "Capacity"`, `BENCHMARKS.md
"Demo"` — is a heading (or a paragraph's bold or plain lead-in) of that file. Links to other sites are not fetched."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "deploy").rglob("*.md"))]
_FENCED = re.compile(r"^```.*?^```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# `FILE.md` followed by a quoted section name: `docs/scaling.md, "Capacity"`, `BENCHMARKS.md "Demo"`.
_SECTION = re.compile(r"`?((?:\.\./)?[\w./-]+\.md)`?,? [\"“]([^\"”]+)[\"”]")


@cache
def _prose(path: Path) -> str:
    return _FENCED.sub("", path.read_text())


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", re.sub(r"[`*]", "", heading).strip().lower()).replace(" ", "-")


@cache
def _headings(path: Path) -> list[str]:
    return [re.sub(r"[`*]", "", h).strip() for h in re.findall(r"^#+ (.*)$", _prose(path), re.M)]


@cache
def _lead_ins(path: Path) -> list[str]:
    """What a paragraph or list item opens with: `**Capacity.**`, `Known limit: …`."""
    lines = re.findall(r"^(?:[-*] )?(?:\*\*([^*]+)\*\*|([A-Z][^.:\n]{2,60})[.:] )", _prose(path), re.M)
    return [(bold or plain).strip().rstrip(".:") for bold, plain in lines]


def _target(page: Path, name: str) -> Path | None:
    for base in (page.parent, REPO, REPO / "docs"):
        if (base / name).is_file():
            return (base / name).resolve()
    return None


def _bad_links(page: Path) -> list[str]:
    bad = []
    for url in _LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", url):
            continue  # http(s), mailto: another site
        path, _, anchor = url.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            bad.append(f"{url}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in {_slug(h) for h in _headings(target)}:
            bad.append(f"{url}: no heading with that anchor in {target.name}")
    return bad


def _bad_sections(page: Path) -> list[str]:
    bad = []
    for name, section in _SECTION.findall(" ".join(page.read_text().split())):
        target = _target(page, name)
        if target is None:
            continue  # another project's page (docs/engines.md quotes upstream docs by their own paths)
        wanted = section.lower()
        names = [n.lower() for n in _headings(target) + _lead_ins(target)]
        if not any(n == wanted or n.startswith(wanted) for n in names):
            bad.append(f'{name}, "{section}": no such section')
    return bad


def test_the_checks_catch_what_does_not_resolve(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## The frontier\n\n**Capacity.** text\n\nKnown limit: text\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#the-frontier) [gone](c.md) [anchor](a.md#frontier) [web](https://x.y/z.md)\n"
        'See a.md, "The frontier", a.md "Capacity", `a.md`, "Known limit" and a.md, "Nowhere".\n'
    )
    assert _bad_links(page) == ["c.md: no such file", "a.md#frontier: no heading with that anchor in a.md"]
    assert _bad_sections(page) == ['a.md, "Nowhere": no such section']
    assert _slug("Serving stacks, prefixes; `x` (y)") == "serving-stacks-prefixes-x-y"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_and_named_section_resolves(page: Path) -> None:
    bad = _bad_links(page) + _bad_sections(page)
    assert not bad, f"{page.relative_to(REPO)}:\n" + "\n".join(bad)


def test_the_pages_have_links_and_named_sections() -> None:
    assert sum(len(_LINK.findall(_prose(p))) for p in PAGES) > 30
    assert sum(len(_SECTION.findall(" ".join(p.read_text().split()))) for p in PAGES) > 30


def test_the_docs_index_links_every_page() -> None:
    index = (REPO / "docs" / "README.md").read_text()
    pages = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.name != "README.md"]
    assert len(pages) > 15
    missing = [name for name in pages if f"({name})" not in index]
    assert not missing, f"docs/README.md does not link {missing}"
