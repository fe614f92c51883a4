"""The fake API server's own tests get its fixtures here; elsewhere import them the same way (see README.md)."""

from tests.fakekube.fixtures import fake_kube, kube_api_client  # noqa: F401
