"""Where scrape targets come from: one source per file, behind the one-method `Discovery` protocol.

- ``static``: a YAML file, re-read when it changes (`collector.discovery.static`).
- ``kubernetes``: pods by label selector and annotations, list then watch (`collector.discovery.kubernetes`).
- ``promql``: not a target list but a replacement for scraping: read the same signals from an existing
  Prometheus (`collector.discovery.promql`).

Modules are imported on demand (``SOURCES``) so that the static path never imports the Kubernetes client.
"""

from __future__ import annotations

from typing import Protocol

from collector.samples import TargetInfo


class Discovery(Protocol):
    async def targets(self) -> list[TargetInfo]:
        """The current targets; raising keeps the previous list in the scrape loop."""
        ...


class DiscoveryUnavailable(RuntimeError):
    """The source cannot give targets yet and its message says why in one line (the Kubernetes API does not
    answer): the scrape loop logs that line, not a traceback."""


class FixedTargets:
    """A fixed list (``kvpilot scrape URL...``, tests)."""

    def __init__(self, targets: list[TargetInfo]) -> None:
        self._targets = list(targets)

    async def targets(self) -> list[TargetInfo]:
        return list(self._targets)


# discovery kind -> module under collector.discovery that provides ``from_settings(settings)``
SOURCES: dict[str, str] = {
    "static": "collector.discovery.static",
    "kubernetes": "collector.discovery.kubernetes",
    "promql": "collector.discovery.promql",
}

__all__ = ["SOURCES", "Discovery", "DiscoveryUnavailable", "FixedTargets"]
