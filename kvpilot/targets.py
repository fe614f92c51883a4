"""Static scrape targets: from the config file, plus those an operator adds or removes through the API.

Thread-safe because the API handlers run in a worker thread while the loop reads the list each tick.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from collector.samples import TargetInfo


class StaticTargets:
    def __init__(self, initial: Iterable[TargetInfo] = ()) -> None:
        self._lock = threading.Lock()
        self._by_url: dict[str, TargetInfo] = {}
        for t in initial:
            self._by_url.setdefault(t.url, t)

    def static_targets(self) -> list[TargetInfo]:
        with self._lock:
            return list(self._by_url.values())

    def add(self, target: TargetInfo) -> bool:
        with self._lock:
            if target.url in self._by_url:
                return False
            self._by_url[target.url] = target
            return True

    def remove(self, url: str) -> bool:
        with self._lock:
            return self._by_url.pop(url, None) is not None

    async def targets(self) -> list[TargetInfo]:
        """The loop's discovery interface."""
        return self.static_targets()
