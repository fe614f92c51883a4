"""Which implementation of the hot path runs: mypyc-compiled (``make compile``) or pure Python.

``make test-native`` runs the collector's tests twice, with ``KVPILOT_EXPECT_NATIVE=1`` after compiling and
with ``KVPILOT_PURE=1``; these checks make sure each run really exercised the implementation it claims.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import collector
import collector.adapt  # imports the parser and validity modules
import collector.state  # and FleetState with its rates

HOT_PATH = {
    "collector.engines._read",
    "collector.exposition._layout",
    "collector.exposition._lex",
    "collector.exposition._model",
    "collector.exposition._om_checks",
    "collector.exposition._openmetrics",
    "collector.exposition._text",
    "collector.rates",
    "collector.state",
    "collector.validity",
}


@pytest.mark.skipif(not os.environ.get("KVPILOT_EXPECT_NATIVE"), reason="only after `make compile`")
def test_the_compiled_modules_are_the_ones_imported() -> None:
    assert set(collector.compiled_modules()) == HOT_PATH


@pytest.mark.skipif(not os.environ.get("KVPILOT_PURE"), reason="only with KVPILOT_PURE=1")
def test_pure_python_is_forced() -> None:
    assert collector.compiled_modules() == []


def test_kvpilot_pure_ignores_any_build() -> None:
    code = "import collector, collector.adapt; print(collector.compiled_modules())"
    env = {**os.environ, "KVPILOT_PURE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
