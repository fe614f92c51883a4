"""A replica lost in a backtest, the same for every policy: `kvpilot backtest --fault xid79@T`.

At the first tick at or after T the simulator's own `xid` fault (XID 79: the GPU falls off the bus) is injected on
the GPU of one replica, chosen by one rule in every policy's replay (``choose``): among the replicas serving then
(ready, not draining, not already stuck), the one holding the most requests (running and waiting), ties to the
oldest. Its GPU vanishes from dcgm-exporter and the replica makes no progress: it keeps its queue and stays in the
gateway's endpoints, as in production. ``replace_s`` seconds after the fault the cluster deletes the pod as
`kvpilot demo`'s drain does (`Fleet.evict`: out of the endpoints, its requests retried through the gateway with
their arrival time kept, a replacement cold-starts on a healthy GPU); the default, 5 s, is what the demo measures
from its XID 79 to kvpilot's stuck_gpu finding and the eviction. The replacement is the cluster's remediation and
the same for every policy: what differs between policies is only the capacity they held when the replica was
lost and how they scale while its replacement loads. ``never``: the pod stays stuck to the end of the replay.

What each policy can observe is what it would live: the stuck replica stays "ready" to the peers (Kubernetes
readiness), its GPU reports no utilisation (gone from dcgm-exporter), its queue counts in the waiting requests;
kvpilot reads its `/metrics` page (token counters frozen) and judges it stuck by its own rule.

``at_s`` "peak" (``peak_s``) is the start of the trace's busiest cold-start window: the ``cold_start_s`` window
with the most arrivals, read from the arrivals alone (10 s bins) before any policy runs, among windows that start
after the warm-up minute (nobody decides before it) and end by the trace's end; ties to the earliest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = {"xid79": 79}  # spec kind -> XID
DEFAULT_REPLACE_S = 5.0  # the demo's XID 79 -> stuck_gpu finding -> eviction (BENCHMARKS.md "Demo": after_s 5.0)
PEAK = "peak"
PEAK_BIN_S = 10.0
SPEC_HELP = "KIND@WHEN[,replace=SECONDS|never]: KIND xid79; WHEN seconds into the replay, or 'peak'"


@dataclass(frozen=True)
class FaultSpec:
    """One fault asked for: ``at_s`` None stands for "peak" until ``resolve`` fixes it for the trace."""

    kind: str = "xid79"
    at_s: float | None = None
    replace_s: float | None = DEFAULT_REPLACE_S  # None: never replaced
    peak: bool = False
    # set by ``resolve``: the replay's seconds left after the fault, and, where the replay ends before what the fault
    # sets off could serve (``cut_short``), the words that say so
    left_s: float | None = None
    cut_short: str | None = None

    @property
    def xid(self) -> int:
        return KINDS[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "xid": self.xid,
            "at_s": None if self.at_s is None else round(self.at_s, 3),
            "at": PEAK if self.peak else "time",
            "replace_after_s": self.replace_s,
            "replica_rule": "the serving replica holding the most requests (running + waiting), ties to the oldest",
            "replay_left_s": None if self.left_s is None else round(self.left_s, 3),
            "cut_short": self.cut_short,
        }


def parse(text: str) -> FaultSpec:
    """``xid79@600``, ``xid79@peak``, ``xid79@600,replace=30``, ``xid79@peak,replace=never``; ValueError in words."""
    head, *options = [p.strip() for p in text.strip().split(",")]
    kind, sep, when = head.partition("@")
    kind, when = kind.strip().lower(), when.strip().lower()
    if kind not in KINDS or not sep or not when:
        raise ValueError(f"unknown fault {text!r}: expected {SPEC_HELP} (e.g. xid79@600, xid79@peak)")
    at_s: float | None = None
    if when != PEAK:
        at_s = _number(when, f"fault {text!r}: the time after '@' must be seconds or 'peak', got {when!r}")
        if not at_s > 0:
            raise ValueError(f"fault {text!r}: at {when} s is not within the replay (it must be after 0 s)")
    replace_s: float | None = DEFAULT_REPLACE_S
    for opt in options:
        key, eq, value = (s.strip().lower() for s in opt.partition("="))
        if key != "replace" or not eq:
            raise ValueError(f"fault {text!r}: unknown option {opt!r} (known: replace=SECONDS|never)")
        if value == "never":
            replace_s = None
        else:
            replace_s = _number(value, f"fault {text!r}: replace must be seconds or 'never', got {value!r}")
            if replace_s < 0:
                raise ValueError(f"fault {text!r}: replace must be >= 0 s, got {value}")
    return FaultSpec(kind, at_s, replace_s, peak=at_s is None)


def _number(text: str, error: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ValueError(error) from None
    if not math.isfinite(x):
        raise ValueError(error)
    return x


def peak_s(rate_times: Sequence[float], rate_per_s: Sequence[float], *, window_s: float, duration_s: float,
           warmup_s: float, bin_s: float = PEAK_BIN_S) -> float:  # fmt: skip
    """The start of the busiest ``window_s`` window (module docstring) from a rate series in ``bin_s`` bins."""
    counts = np.asarray(rate_per_s, dtype=np.float64) * bin_s
    starts = np.asarray(rate_times, dtype=np.float64)
    k = max(1, math.ceil(window_s / bin_s - 1e-9))
    sums = np.convolve(counts, np.ones(k), mode="valid")  # sums[i]: bins i .. i+k-1
    ok = (starts[: len(sums)] >= warmup_s - 1e-9) & (starts[: len(sums)] + window_s <= duration_s + 1e-9)
    if not ok.any():
        raise ValueError(
            f"no {window_s:g} s window after the {warmup_s:g} s warm-up fits in the replay ({duration_s:g} s): "
            "give the fault a time instead of 'peak'"
        )
    i = int(np.argmax(np.where(ok, sums, -np.inf)))
    return float(starts[i])


def resolve(specs: Sequence[FaultSpec], trace: Any, *, cold_start_s: float, warmup_s: float) -> list[FaultSpec]:
    """``specs`` with "peak" fixed to a time for ``trace``, each checked to lie within the replay."""
    out = []
    duration = float(trace.duration_s)
    for f in specs:
        at = f.at_s
        if at is None:
            rs = trace.rate_series(PEAK_BIN_S)
            at = peak_s(rs.times_s, rs.req_per_s, window_s=cold_start_s, duration_s=duration, warmup_s=warmup_s)
        if not 0 < at < duration:
            raise ValueError(
                f"fault {f.kind}@{at:g}: not within the replay (after 0 s and before its end, {duration:g} s)"
            )
        left = duration - at
        out.append(FaultSpec(f.kind, at, f.replace_s, f.peak, left, cut_short(left, f.replace_s, cold_start_s)))
    return out


def cut_short(left_s: float, replace_s: float | None, cold_start_s: float) -> str | None:
    """Words for a fault the replay ends too soon after to price, else None. A fault is there to price the capacity
    each policy held and how it answered while the replica was lost: that takes the replacement serving (evicted
    ``replace_s`` after the fault, then a cold start), or, never replaced, a replica started after the fault serving.
    Within the replay it is injected and recorded all the same; the requests it strands count (never served: outside
    the SLO), but what it costs past the end does not."""
    if replace_s is None:
        if left_s >= cold_start_s:
            return None
        return (
            f"the replay ends {left_s:g} s after the fault, before a replica started after it could serve "
            f"({cold_start_s:g} s cold start): no policy's answer to it is priced, only the requests it strands"
        )
    if left_s >= replace_s + cold_start_s:
        return None
    return (
        f"the replay ends {left_s:g} s after the fault, before its replacement could serve (evicted after "
        f"{replace_s:g} s, then a {cold_start_s:g} s cold start): its cost is priced only up to the end"
    )


def choose(replicas: Sequence[Any], stuck: set[str]) -> Any | None:
    """The replica a fault hits (module docstring), from a simulator snapshot's replicas; None if none serves."""
    serving = [r for r in replicas if r.state == "ready" and r.name not in stuck]
    if not serving:
        return None
    # the oldest by its start, not its name: names sort as text, and a fleet past serial 9999 would read x-10000 first
    return min(serving, key=lambda r: (-(r.requests_running + r.requests_waiting), r.started_s, r.name))


@dataclass
class FaultHit:
    """What one fault did in one policy's replay."""

    kind: str
    at_s: float  # the tick it was injected at (None-free: a fault with no serving replica is not recorded)
    replica: str
    requests_held: int  # running and waiting on the replica when its GPU was lost
    ready_before: int  # replicas serving (ready, not stuck) just before
    replaced_at_s: float | None = None  # the eviction's tick; None: never (or the replay ended first)
    requests_retried: int = 0  # stranded requests the eviction sent back through the gateway
    scaled_away_at_s: float | None = None  # the policy scaled the stuck pod away before the cluster replaced it

    @property
    def stuck(self) -> bool:
        """Whether the replica is still stuck in the fleet: neither replaced nor scaled away."""
        return self.replaced_at_s is None and self.scaled_away_at_s is None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at_s": round(self.at_s, 3),
            "replica": self.replica,
            "requests_held": self.requests_held,
            "ready_before": self.ready_before,
            "replaced_at_s": None if self.replaced_at_s is None else round(self.replaced_at_s, 3),
            "requests_retried": self.requests_retried,
            "scaled_away_at_s": None if self.scaled_away_at_s is None else round(self.scaled_away_at_s, 3),
        }
