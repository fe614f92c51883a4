"""Scraping, parsing and adapting: what kvpilot reads from engines and GPUs.

Some modules here may be compiled with mypyc (``make compile``, scripts/build_native.py): a ``.so`` next
to the source then takes its place. A compiled module is ignored, and its source imported, when
``KVPILOT_PURE=1`` is set (the tests run both ways) or when its source is newer than the build (an edit
made after ``make compile`` is never shadowed by stale machine code).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

_SOURCE_ONLY = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)


class _PreferFreshSource:
    """A meta-path finder for ``collector.*`` modules: the source when forced pure or when the compiled
    module is older than its source; otherwise it steps aside for the normal finders."""

    pure = os.environ.get("KVPILOT_PURE", "") not in ("", "0")

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith("collector.") or not path:
            return None
        tail = fullname.rpartition(".")[2]
        for entry in path:
            source = Path(entry, tail + ".py")
            if not source.is_file():
                continue
            if not cls.pure and not cls._stale(source):
                return None
            return importlib.machinery.FileFinder(entry, _SOURCE_ONLY).find_spec(fullname, target)
        return None

    _newest_compiled_source: float | None = None

    @classmethod
    def _stale(cls, source: Path) -> bool:
        """Whether a compiled module sits next to ``source`` and is older than any compiled module's source
        (compiled modules call each other directly, so one edit makes the whole build stale)."""
        built = _compiled_next_to(source)
        if built is None:
            return False
        if cls._newest_compiled_source is None:
            root = Path(__file__).parent
            sources = [py for py in root.rglob("*.py") if _compiled_next_to(py) is not None]
            cls._newest_compiled_source = max(py.stat().st_mtime for py in sources)
        return built.stat().st_mtime < cls._newest_compiled_source


def _compiled_next_to(source: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        built = source.with_suffix(suffix)
        if built.is_file():
            return built
    return None


if not any(f is _PreferFreshSource for f in sys.meta_path):
    sys.meta_path.insert(0, _PreferFreshSource)


def compiled_modules() -> list[str]:
    """The ``collector`` modules imported so far that run as compiled code (for tests and ``kvpilot version``)."""
    return sorted(
        name
        for name, module in list(sys.modules.items())
        if name.startswith("collector.")
        and not name.endswith("__mypyc")  # the compiled modules' shared library, not a module of ours
        and str(getattr(module, "__file__", "")).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    )
