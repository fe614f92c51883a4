"""What the generated pages share: field comments read from source (the descriptions of dataclass fields, which
have no ``Field(description=...)``), docstrings' first paragraphs, and Markdown table cells."""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize


def source_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment written beside it (trailing) or on the lines just above it, in ``cls``'s body: the
    descriptions of dataclass fields, which have no ``Field(description=...)``."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    out: dict[str, str] = {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        end = node.end_lineno or node.lineno
        trailing = comments.get(end) if not lines[end - 1].lstrip().startswith("#") else None
        text = " ".join([*above, trailing] if trailing else above).strip()
        if text:
            out[node.target.id] = text
    return out


def first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def md_cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
