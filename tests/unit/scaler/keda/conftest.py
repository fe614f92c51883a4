"""The KEDA tests that run against both places the server can live (`keda.serve_from`) ask for ``serve_from``."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["loop", "process"])
def serve_from(request: pytest.FixtureRequest) -> str:
    return str(request.param)
