"""Whether another kvpilot instance is live, judged by what this instance saw (with sharding: ``FleetShare``)."""

from __future__ import annotations

import threading

from collector.clock import Clock


class Heartbeats:
    """Whether another instance still refreshes its node set (``instance_nodes.refreshed_at``), judged as client-go's
    leader election judges a Lease (``observedTime``, as ``kvpilot.runtime.lease.LeaseSightings``): by local
    observation. A refresh is a change of the stored value since this instance last read it (its row's absence is a
    value too), and the instance is gone once that value has stayed unchanged for ``window_s`` of this instance's
    monotonic time since it first saw the value. The value is the other host's wall time and is never compared with
    ours: before, it was (``refreshed_at >= now - window``), so a step of this host's wall clock ahead by more than the
    window made a live instance look gone and its drain be resumed by another while it still ran, and a step back
    kept a gone one live. A value seen for the first time counts from the read (client-go's wait of one period):
    an instance starting waits one window before it resumes a drain of an instance gone."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # instance -> (its value, first seen, last read, whether it is trusted: seen replacing another, or vouched for)
        self._seen: dict[str, tuple[str, float, float, bool]] = {}
        self._lock = threading.Lock()  # read by the tick's requests and by the drain worker's thread

    def live(self, instance: str, value: float | None, window_s: float) -> bool:
        """Whether ``instance``, whose stored refresh reads ``value`` now (None: no row), changed it within
        ``window_s`` of this instance's monotonic time."""
        key = repr(value)  # NaN equal to itself, None apart from any number
        with self._lock:
            now = self._clock.monotonic()
            last = self._seen.get(instance)
            if last is not None and last[0] == key:
                since, changed = last[1], last[3]
            else:
                since, changed = now, last is not None
            self._seen[instance] = (key, since, now, changed)
            for name, (_, _, read, _) in list(self._seen.items()):  # not read for two windows: forgotten (bounded)
                if now - read > 2 * window_s:
                    del self._seen[name]
            return now - since < window_s

    def trusted(self, instance: str) -> bool:
        """Whether the value ``live`` last read for ``instance`` is known to be a refresh: it was seen replacing
        another value, or ``trust`` vouched for it."""
        with self._lock:
            last = self._seen.get(instance)
            return last is not None and last[3]

    def trust(self, instance: str) -> None:
        """Vouch for the value ``live`` last read for ``instance`` (a first read placed as recent by its stamp): it
        stays trusted until it changes, and the value replacing it is trusted as a refresh watched."""
        with self._lock:
            last = self._seen.get(instance)
            if last is not None:
                self._seen[instance] = (*last[:3], True)
