"""An in-process fake Kubernetes API server for tests (the real API cannot run here); see README.md."""

from tests.fakekube.server import FakeKube, Request
from tests.fakekube.store import RESOURCES, THROTTLED, ApiError, ResourceType, Store, status_object, throttled

__all__ = [
    "RESOURCES",
    "THROTTLED",
    "ApiError",
    "FakeKube",
    "Request",
    "ResourceType",
    "Store",
    "status_object",
    "throttled",
]
