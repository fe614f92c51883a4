"""pytest fixtures for the fake API server. Import them into a test module (or a conftest):

from tests.fakekube.fixtures import fake_kube, kube_api_client  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakekube.server import FakeKube


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    """A started fake API server with an empty store; stopped (watches ended) after the test."""
    kube = FakeKube().start()
    try:
        yield kube
    finally:
        kube.stop()


@pytest.fixture
def kube_api_client(fake_kube: FakeKube) -> Iterator[Any]:
    """A ``kubernetes.client.ApiClient`` configured for ``fake_kube``."""
    api = fake_kube.api_client()
    try:
        yield api
    finally:
        api.close()
