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
        self._seen: dict[str, tuple[str, float, float]] = {}  # instance -> (its value, first seen, last read)
        self._lock = threading.Lock()  # read by the tick's requests and by the drain worker's thread

    def live(self, instance: str, value: float | None, window_s: float) -> bool:
        """Whether ``instance``, whose stored refresh reads ``value`` now (None: no row), changed it within
        ``window_s`` of this instance's monotonic time."""
        key = repr(value)  # NaN equal to itself, None apart from any number
        with self._lock:
            now = self._clock.monotonic()
            last = self._seen.get(instance)
            since = last[1] if last is not None and last[0] == key else now
            self._seen[instance] = (key, since, now)
            for name, (_, _, read) in list(self._seen.items()):  # not read for two windows: forgotten (bounded)
                if now - read > 2 * window_s:
                    del self._seen[name]
            return now - since < window_s
