"""Lexical pieces shared by the text and OpenMetrics backends.

Each helper reproduces what prometheus_client's parser does with the same piece of a line (that
parser is our correctness oracle), but in time linear in the line: the oracle rescans backslash runs
and re-slices the line per character, which is quadratic on hostile input.
"""

from __future__ import annotations

import re
import string

# Possessive quantifiers (Python >= 3.11) keep every pattern free of backtracking blow-ups.
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*+"
NAME_RE = re.compile(NAME)
LEGACY_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A quoted label value: any character but an unescaped quote; a backslash escapes the next one.
LABEL_VALUE = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
# The same, capturing the name and the inner value (used on a body already validated as a whole).
LABEL_PAIR_RE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*+)[ \t]*+=[ \t]*+"([^"\\]*+(?:\\.[^"\\]*+)*+)"', re.DOTALL)

_ESCAPE_RE = re.compile(r'\\[\\n"]')
_HELP_ESCAPE_RE = re.compile(r"\\[\\n]")
_ESCAPES = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}

TEXT_SEPARATORS = string.whitespace  # what the oracle splits "#" lines on in the text format


def _unescape_match(m: re.Match[str]) -> str:
    return _ESCAPES[m.group(0)]


def unescape_label_value(value: str) -> str:
    """Undo ``\\\\``, ``\\n`` and ``\\"``; any other backslash stays as written (as the oracle does)."""
    return _ESCAPE_RE.sub(_unescape_match, value) if "\\" in value else value


def unescape_text_help(text: str) -> str:
    """HELP in the text format escapes only backslash and newline."""
    return _HELP_ESCAPE_RE.sub(_unescape_match, text) if "\\" in text else text


def is_legacy_name(name: str) -> bool:
    return LEGACY_NAME_RE.fullmatch(name) is not None


class _Unquoter:
    """Finds the next separator that is outside double quotes, quotes toggled unless backslash-escaped."""

    __slots__ = ("_pattern",)

    def __init__(self, separators: str) -> None:
        self._pattern = re.compile("[" + re.escape(separators + '"') + "]")

    def next_unquoted(self, text: str, start: int) -> int:
        """Index of the first separator at or after ``start`` outside quotes, or -1.

        The quote state starts closed at ``start``; whether a quote is escaped counts the backslashes
        just before it, however far back they reach (as the oracle does).
        """
        in_quotes = False
        search = self._pattern.search
        pos = start
        while True:
            m = search(text, pos)
            if m is None:
                return -1
            i = m.start()
            if text[i] == '"':
                if not _escaped(text, i):
                    in_quotes = not in_quotes
            elif not in_quotes:
                return i
            pos = i + 1

    def split(self, text: str, maxsplit: int) -> list[str]:
        """Split on unquoted separators, runs of separators counting as one (the oracle's ``_split_quoted``)."""
        tokens = [""]
        x = 0
        n = len(text)
        while x < n:
            sp = self.next_unquoted(text, x)
            if sp == -1:
                tokens[-1] = text[x:]
                break
            if sp == x:
                x += 1
                continue
            if maxsplit > 0 and len(tokens) > maxsplit:
                tokens[-1] = text[x:]
                break
            tokens[-1] = text[x:sp]
            x = sp + 1
            tokens.append("")
        return tokens


def _escaped(text: str, i: int) -> bool:
    run = 0
    while i > run and text[i - 1 - run] == "\\":
        run += 1
    return run % 2 == 1


TEXT_COMMENT = _Unquoter(TEXT_SEPARATORS)
OM_COMMENT = _Unquoter(" ")


def unquote_name(token: str) -> tuple[str, bool]:
    """A metric name token of a ``#`` line: ``(name, was_quoted)``; raises ValueError like the oracle."""
    if not token:
        return token, False
    token = token.strip()
    if not token:
        raise ValueError("blank metric name")
    quoted = token[0] == '"'
    if quoted:
        if len(token) == 1 or token[-1] != '"':
            raise ValueError("missing closing quote")
        token = token[1:-1]
    return unescape_label_value(token), quoted
