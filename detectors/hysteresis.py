"""Hysteresis over raw detector output: one noisy scrape neither pages nor drains.

Detectors report every tick what looks bad *now* (candidates). The tracker opens a finding after N
consecutive bad ticks and closes it after M consecutive clean ones, per finding identity
(``Finding.id``: kind + subject, stable across restarts). After a restart, ``restore`` re-opens the
findings the store still holds as open, so an open drain finding does not flap closed and open again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from detectors.finding import Finding
from detectors.thresholds import HysteresisPolicy


@dataclass(slots=True)
class _Track:
    latest: Finding
    since: float  # first bad tick of the current streak (or of the open finding)
    bad: int = 0
    clean: int = 0
    open: bool = False


@dataclass(frozen=True, slots=True)
class Transitions:
    """What one tick changed: the caller audits and exports these."""

    active: list[Finding] = field(default_factory=list)  # open after this tick, with `since` of the first bad tick
    opened: list[Finding] = field(default_factory=list)
    closed: list[Finding] = field(default_factory=list)


class Hysteresis:
    """Per-identity open/close state. Not thread-safe: the control loop owns one."""

    def __init__(self, policy: Callable[[str], HysteresisPolicy]) -> None:
        self._policy = policy
        self._tracks: dict[str, _Track] = {}

    def restore(self, open_findings: Iterable[Finding]) -> None:
        """Re-open findings persisted as open before a restart; their `since` is kept."""
        for f in open_findings:
            self._tracks[f.id] = _Track(latest=f, since=f.since, open=True)

    def update(self, candidates: Iterable[Finding], *, now: float) -> Transitions:
        """Feed one tick's candidates (every id absent from them had a clean tick)."""
        seen: dict[str, Finding] = {}
        for f in candidates:
            prior = seen.get(f.id)
            # Two candidates for one identity in one tick: keep the more severe one.
            if prior is None or _rank(f) > _rank(prior):
                seen[f.id] = f
        out = Transitions()
        for fid, f in seen.items():
            track = self._tracks.get(fid)
            if track is None:
                track = self._tracks[fid] = _Track(latest=f, since=min(f.since, now))
            track.latest = f
            track.bad += 1
            track.clean = 0
            if not track.open and track.bad >= self._policy(f.kind).open_after_ticks:
                track.open = True
                out.opened.append(self._view(track))
        for fid in list(self._tracks):
            if fid in seen:
                continue
            track = self._tracks[fid]
            track.bad = 0
            track.clean += 1
            if not track.open:
                del self._tracks[fid]  # a streak that never opened is forgotten at the first clean tick
            elif track.clean >= self._policy(track.latest.kind).close_after_ticks:
                out.closed.append(self._view(track))
                del self._tracks[fid]
        out.active.extend(self._view(t) for t in self._tracks.values() if t.open)
        out.active.sort(key=lambda f: (f.kind, f.id))
        return out

    def active(self) -> list[Finding]:
        return sorted((self._view(t) for t in self._tracks.values() if t.open), key=lambda f: (f.kind, f.id))

    @staticmethod
    def _view(track: _Track) -> Finding:
        return replace(track.latest, since=track.since)


_SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def _rank(f: Finding) -> int:
    return _SEVERITY_RANK.get(str(f.severity), 0)
