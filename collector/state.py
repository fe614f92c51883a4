"""FleetState: the fleet as the control loop sees it after each tick.

Per replica: the latest sample, windowed counter rates (reset-aware, see ``collector.rates``) and a short
history; per deployment: sums, means and maxima over ready replicas plus a bounded history of points for
forecasters and detectors; per GPU: the latest sample, whether its exporter still lists it, and the
replica it serves (joined by pod, else by node).

Pure: no clock and no I/O; ``now`` is passed to ``observe``. Memory is bounded: every history is capped
by ``history_s`` and by ``max_points``, and replicas/GPUs not seen for ``forget_after_s`` are dropped.
"""

from __future__ import annotations

import logging
import math
import operator
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from itertools import islice

from collector.aggregates import DeploymentAggregate
from collector.deployment_window import (
    COUNTERS,
    FINISHED,
    GENERATION,
    HITS,
    PREEMPTIONS,
    PROMPT,
    QUERIES,
    DeploymentWindow,
)
from collector.rates import (
    CounterWindow,
    GaugeWindow,
    HistogramWindow,
    counter_step,
    histogram_add,
    histogram_reset,
    ratio,
)
from collector.roles import BOTH, split_pool_key
from collector.samples import GoneGpuSample, GpuSample, Histogram, ReplicaSample, TargetInfo
from collector.validity import MAX_COUNTER_PER_S, MAX_OBSERVATIONS_PER_S

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica now: its latest sample plus what only a window of samples can tell.

    Every rate is per second over the samples within ``rate_window_s`` of the latest one, and ``None``
    when unknown (the engine does not export the counter, or fewer than two samples are in the window).
    """

    sample: ReplicaSample
    ready: bool  # scraped within stale_after_s of `now` (``age_s``)
    target_up: bool  # False when its target failed in the latest tick (the sample is then older)
    last_seen: float  # timestamp of `sample`
    # Seconds since `sample` was taken, with the wall clock's steps since then taken out: `now - last_seen` but for a
    # step (NTP), where a replica silent since before a step back of an hour read its sample from the "future", fresh
    # for the hour.
    age_s: float
    prefix_hit_ratio: float | None  # Δhits / Δqueries over the window
    prefix_hits_increase: float | None  # tokens, over the window (deployments sum these)
    prefix_queries_increase: float | None
    prefix_queries_rate: float | None  # tokens/s
    preemptions_rate: float | None
    prompt_tokens_rate: float | None
    generation_tokens_rate: float | None
    requests_finished_rate: float | None
    arrival_rate: float | None  # requests/s: finished rate + d(waiting + running)/dt
    ttft_window: Histogram | None  # bucket increase over the window
    # Present GPUs serving this replica: those its exporter attributes to its pod, else its node's when it is the only
    # replica there and the node's exporter attributes none (the rules of the GPU side's join, ``_gpu_views``).
    gpus: tuple[GpuSample, ...]
    itl_window: Histogram | None = None  # inter-token latency: bucket increase over the window
    # Its node's present GPUs when they cannot be told apart: no pod attribution on a node of several replicas.
    # Which (how many) are this replica's is unknown; their product is its GPU type (scaler.cost).
    node_gpus: tuple[GpuSample, ...] = ()

    @property
    def key(self) -> str:
        return replica_key(self.sample.namespace, self.sample.replica)

    @property
    def deployment_key(self) -> str:
        return self.sample.deployment_key


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentSignals:
    """A deployment's scalar signals at one tick: the one list that its view aggregates, its history keeps
    (``DeploymentPoint``), the store's per-minute rollups record (``values``) and the API shows
    (``api.schemas.DeploymentSummary``, checked by a test). Add a signal here and it flows everywhere."""

    ready_replicas: int
    requests_waiting: float | None
    requests_running: float | None
    kv_usage_mean: float | None
    kv_usage_max: float | None
    arrival_rate: float | None
    prompt_tokens_rate: float | None
    generation_tokens_rate: float | None
    prefix_hit_ratio: float | None
    preemptions_rate: float | None

    def values(self) -> dict[str, float | None]:
        """Every signal by name, as floats (the store's rollup row)."""
        out: dict[str, float | None] = {}
        for name in SIGNALS:
            v = getattr(self, name)
            out[name] = None if v is None else float(v)
        return out

    def signals(self) -> dict[str, float | int | None]:
        """Every signal by name, as it is typed here (to build another ``DeploymentSignals`` from this one)."""
        return {name: getattr(self, name) for name in SIGNALS}


SIGNALS: tuple[str, ...] = tuple(f.name for f in fields(DeploymentSignals))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentView(DeploymentSignals):
    """A deployment now: aggregates over its *ready* replicas (a stale replica's last values would lie).

    Sums are ``None`` when no ready replica exports the value; ratios are recomputed from summed
    increases rather than averaged, so a busy replica weighs more than an idle one. Rates (arrivals, tokens, finished
    requests, preemptions, the prefix hit ratio) are over one window common to every replica, those that joined or
    left within it included (``collector.deployment_window``): a sum of each replica's rate over its own window
    overshot when one joined and dipped when one left.
    """

    key: str  # "namespace/name"
    namespace: str
    name: str
    replicas: tuple[ReplicaView, ...]  # every known replica, ready or not, sorted by key
    ttft_window: Histogram | None
    itl_window: Histogram | None = None
    # Set only by ``observe_deployments`` (signals Prometheus aggregated), where ``replicas`` holds only the replicas
    # a detector must see: the deployment's replica count and queue-time window.
    replica_count: int | None = None
    # Targets of the deployment reported down this tick that no replica read stands for: down since before kvpilot
    # first read them (loading, crashed, hung) or forgotten since (``forget_after_s``). Each is a replica not ready,
    # as Prometheus' ``count(up)`` counts it where it aggregated the deployment; never capacity nor demand.
    unread_replicas: int = 0
    # Requests finished per second: over the deployment's window (``observe``), or as Prometheus summed them.
    requests_finished_rate: float | None = None
    queue_time_window: Histogram | None = None
    # The deployment's pool this view covers (collector.roles): "both" for a co-located deployment, else "prefill" or
    # "decode", whose view is keyed ``namespace/name@pool`` (``name`` is the deployment's).
    pool: str = BOTH

    @property
    def known_replicas(self) -> int:
        """Every replica of the deployment, ready or not, from the reading ``ready_replicas`` comes from: Prometheus'
        count of its targets where it aggregated them (``replicas`` then holds only the ones a detector must see),
        else ``replicas`` and the targets down that none of them stands for (``unread_replicas``)."""
        return self.replica_count if self.replica_count is not None else len(self.replicas) + self.unread_replicas

    @property
    def loading_replicas(self) -> int:
        """Replicas not ready yet (or no longer): ``known_replicas`` less ``ready_replicas``, never below 0."""
        return max(self.known_replicas - self.ready_replicas, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentPoint(DeploymentSignals):
    """A deployment's signals at one tick (the time series forecasters and detectors read)."""

    t: float
    replica_count: int


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU: its latest sample, whether its exporter still lists it, and the replica it serves."""

    sample: GpuSample
    present: bool  # listed in the latest successful scrape of its node's exporter
    last_seen: float  # timestamp of the last scrape that listed it
    age_s: float  # seconds since that scrape, the wall clock's steps since then taken out (as ``ReplicaView.age_s``)
    replica: str | None  # ReplicaView key, or None when no replica is joined

    @property
    def key(self) -> str:
        return self.sample.key


_HISTOGRAM_FIELDS = ("ttft", "itl", "e2e", "queue_time")
_COUNTER_FIELDS = COUNTERS  # in the order the deployment's window takes each sample's steps (`_ReplicaTrack.add`)
_MAX_LAYOUTS = 1024


def replica_key(namespace: str, replica: str) -> str:
    return f"{namespace}/{replica}"


_SAMPLE_FIELDS = tuple(f.name for f in fields(ReplicaSample))
_sample_values = operator.attrgetter(*_SAMPLE_FIELDS)
_HISTOGRAM_AT = tuple(_SAMPLE_FIELDS.index(name) for name in _HISTOGRAM_FIELDS)


def _without_histograms(sample: ReplicaSample) -> ReplicaSample:
    """``replace(sample, ttft=None, itl=None, e2e=None, queue_time=None)``, built from the fields in order: every
    sample leaving the rate window takes this (900 a tick at 1,000 targets), and ``replace`` reads them by name."""
    values = list(_sample_values(sample))
    for i in _HISTOGRAM_AT:
        values[i] = None
    return ReplicaSample(*values)


class _ReplicaTrack:
    """A replica's samples in three tiers, because full samples carry four histograms and an hour of
    them for a thousand replicas would cost gigabytes:

    - ``recent``: every sample of the rate window, complete (rates, TTFT window);
    - ``middle``: every sample up to ``full_resolution_s``, without histograms (trends);
    - ``older``: one sample per ``history_step_s`` up to ``history_s``, without histograms.

    The TTFT histograms of ``middle`` and ``older`` (the SLO burn windows read an hour of them) are kept packed, in
    ``middle_ttft`` and ``older_ttft`` beside their samples (one entry per sample, None where it had none): one
    ``array('d')`` of sum, count and the cumulative counts, the bucket bounds being those of ``ttft_last`` for every
    sample a window reads (it starts where they last changed). A histogram as scraped costs a tuple and a float
    object per bucket, ~3.5x the array (an hour at 1,000 targets: ~60 MB).
    """

    __slots__ = (
        "_samples",
        "_window",
        "counters",
        "credited_at",
        "held",
        "in_flight",
        "itl",
        "middle",
        "middle_ttft",
        "observations",
        "older",
        "older_ttft",
        "recent",
        "shift",
        "target_up",
        "ttft",
        "ttft_bounds_since",
        "ttft_last",
        "ttft_restarts",
    )

    def __init__(self, max_points: int) -> None:
        self.recent: deque[ReplicaSample] = deque(maxlen=max_points)
        self.middle: deque[ReplicaSample] = deque(maxlen=max_points)
        self.older: deque[ReplicaSample] = deque(maxlen=max_points)
        self.middle_ttft: deque[array[float] | None] = deque(maxlen=max_points)
        self.older_ttft: deque[array[float] | None] = deque(maxlen=max_points)
        self.target_up = True
        # The step-free time of the tick whose sample was last credited to the deployment's window (None: none yet).
        self.credited_at: float | None = None
        # The latest sample's time on the wall clock as it reads now is its timestamp less (the step-free offset now
        # + shift): set as the sample arrives (``FleetState._shift``), so that its age runs on step-free time.
        self.shift = 0.0
        # The rate window (``recent``) kept per value as samples come and go, so a view costs no pass over it.
        self.counters = {name: CounterWindow(MAX_COUNTER_PER_S[name]) for name in _COUNTER_FIELDS}
        # per windowed histogram (MAX_OBSERVATIONS_PER_S): its last count read, and one past the limit held unread,
        # as (time, count)
        self.observations: dict[str, tuple[float, float]] = {}
        self.held: dict[str, tuple[float, float]] = {}
        self.in_flight = GaugeWindow()
        self.ttft = HistogramWindow()
        self.itl = HistogramWindow()
        # For TTFT increases over the whole history (`FleetState.ttft_increase`), restarts found as samples arrive,
        # between each TTFT histogram and the one before it, so a window's increase is last − first plus the value
        # before each restart inside it, with no pass over the window's pairs; and where the bucket bounds last
        # changed (a window starts there).
        self.ttft_last: Histogram | None = None
        self.ttft_restarts: deque[tuple[float, Histogram]] = deque()  # (restarted at, the histogram before it)
        self.ttft_bounds_since = -math.inf
        # The history as one tuple, built at the first ask after a sample arrived (``replica_history``).
        self._samples: tuple[ReplicaSample, ...] | None = None
        # The last window asked for, (since, its samples), until a sample arrives: a tick asks for the same recent
        # window several times per replica (the KV detector, the exported projection, the version speed).
        self._window: tuple[float, tuple[ReplicaSample, ...]] | None = None

    @property
    def latest(self) -> ReplicaSample:
        return self.recent[-1]

    def continue_counts(self, before: _ReplicaTrack) -> None:
        """Started again after the clock stepped back: the rate windows start from the next sample, but the
        deployment's window (on step-free time, which did not step) still takes the counters' steps from ``before``'s
        last values."""
        for name, window in self.counters.items():
            window.continue_from(before.counters[name])
        self.credited_at = before.credited_at

    def add(
        self, sample: ReplicaSample, *, rate_window_s: float, full_resolution_s: float, step_s: float, history_s: float
    ) -> list[float | None]:
        """Take a sample; return each counter's step from the one before (``COUNTERS`` order, None where unknown)."""
        t = sample.timestamp
        odd = self._odd_histograms(sample, t)
        if odd:
            ttft, itl = (None if name in odd else getattr(sample, name) for name in ("ttft", "itl"))
            sample = replace(sample, ttft=ttft, itl=itl)
        self._samples = self._window = None
        self.recent.append(sample)
        while self.recent[0].timestamp < t - rate_window_s:
            leaving = self.recent.popleft()
            h = leaving.ttft
            self.middle.append(_without_histograms(leaving))
            self.middle_ttft.append(None if h is None else array("d", (h.sum, h.count, *h.counts)))
        start = self.recent[0].timestamp
        steps: list[float | None] = []
        for name, window in self.counters.items():
            steps.append(window.add(t, getattr(sample, name)))
            window.trim(start)
        self.in_flight.add(t, _in_flight(sample))
        self.in_flight.trim(start)
        self.ttft.add(t, sample.ttft)
        self.ttft.trim(start)
        self._note_ttft(t, sample.ttft, history_s)
        self.itl.add(t, sample.itl)
        self.itl.trim(start)
        while self.middle and self.middle[0].timestamp < t - full_resolution_s:
            old = self.middle.popleft()
            packed = self.middle_ttft.popleft()
            if not self.older or old.timestamp - self.older[-1].timestamp >= step_s:
                self.older.append(old)
                self.older_ttft.append(packed)
        while self.older and self.older[0].timestamp < t - history_s:
            self.older.popleft()
            self.older_ttft.popleft()
        return steps

    def _odd_histograms(self, sample: ReplicaSample, t: float) -> list[str]:
        """The windowed histograms of ``sample`` whose count stepped past ``MAX_OBSERVATIONS_PER_S`` from the last one
        read (a corrupted page: one +Inf bucket at 1e12 was an hour of TTFT SLO burn): unknown, as a counter's
        reading past its limit (``collector.rates.CounterWindow``), unless it agrees with the one held before it:
        then the histogram moved for good (another process behind the URL) and its windows start again here."""
        odd: list[str] = []
        for name, limit in MAX_OBSERVATIONS_PER_S.items():
            h: Histogram | None = getattr(sample, name)
            if h is None:
                continue
            count = h.count
            last = self.observations.get(name)
            if last is not None:
                step = count - last[1] if count >= last[1] else count
                if step > limit and step > limit * (t - last[0]):
                    held = self.held.get(name)
                    if held is None or counter_step(held[1], count) > limit * max(t - held[0], 1.0):
                        self.held[name] = (t, count)
                        odd.append(name)
                        continue
                    self._start_again(name, t)
            if self.held:
                self.held.pop(name, None)
            self.observations[name] = (t, count)
        return odd

    def _start_again(self, name: str, t: float) -> None:
        """The windows of histogram ``name`` start at ``t``, as when its bucket bounds change."""
        if name == "ttft":
            self.ttft = HistogramWindow()
            self.ttft_bounds_since = t
            self.ttft_restarts.clear()
        elif name == "itl":
            self.itl = HistogramWindow()

    def samples(self) -> tuple[ReplicaSample, ...]:
        samples = self._samples
        if samples is None:
            samples = self._samples = (*self.older, *self.middle, *self.recent)
        return samples

    def samples_since(self, since: float) -> tuple[ReplicaSample, ...]:
        """The samples taken at or after ``since``, oldest first: the tier the window starts in found by its first
        sample's time (times increase from ``older`` through ``recent``), the start by bisection in it; only the
        window is copied."""
        window = self._window
        if window is not None and window[0] == since:
            return window[1]
        recent, middle, older = self.recent, self.middle, self.older
        before = middle or older  # the tier the sample before ``recent`` is in
        if recent[0].timestamp < since:
            samples = tuple(islice(recent, bisect_left(recent, since, key=_timestamp), None))
        elif not before or before[-1].timestamp < since:  # the rate window exactly: the readers' usual window
            samples = tuple(recent)
        elif middle and middle[0].timestamp < since:
            samples = (*islice(middle, bisect_left(middle, since, key=_timestamp), None), *recent)
        elif older and older[0].timestamp < since:
            samples = (*islice(older, bisect_left(older, since, key=_timestamp), None), *middle, *recent)
        else:
            samples = self.samples()
        self._window = (since, samples)
        return samples

    def newest(self, n: int) -> tuple[ReplicaSample, ...]:
        """The newest ``n`` samples (all, when fewer are kept), oldest first."""
        recent = self.recent
        if len(recent) >= n:  # nearly always: the rate window's
            return tuple(islice(recent, len(recent) - n, None))
        out: list[ReplicaSample] = []
        for tier in (self.recent, self.middle, self.older):  # newest first; a tier may be empty
            if len(out) >= n:
                break
            out[:0] = islice(tier, max(0, len(tier) - (n - len(out))), None)
        return tuple(out)

    @property
    def oldest(self) -> ReplicaSample:
        return (self.older or self.middle or self.recent)[0]

    def ttft_samples(self) -> list[tuple[float, Histogram]]:
        """The TTFT histograms a window can read, with their samples' times, oldest first: every kept one taken
        since the bucket bounds last changed (the packed ones rebuilt with the bounds of ``ttft_last``)."""
        last = self.ttft_last
        if last is None:
            return []
        since = self.ttft_bounds_since
        out: list[tuple[float, Histogram]] = []
        for samples, packed in ((self.older, self.older_ttft), (self.middle, self.middle_ttft)):
            for sample, p in zip(samples, packed, strict=True):
                if p is not None and sample.timestamp >= since:
                    out.append((sample.timestamp, Histogram(last.bounds, tuple(p[2:]), p[0], p[1])))
        out.extend((s.timestamp, s.ttft) for s in self.recent if s.ttft is not None and s.timestamp >= since)
        return out

    def _note_ttft(self, t: float, h: Histogram | None, history_s: float) -> None:
        if h is not None:
            previous = self.ttft_last
            if previous is not None:
                if h.bounds is not previous.bounds and h.bounds != previous.bounds:
                    self.ttft_bounds_since = t
                    self.ttft_restarts.clear()
                elif histogram_reset(previous, h):
                    self.ttft_restarts.append((t, previous))
            self.ttft_last = h
        restarts = self.ttft_restarts
        while restarts and restarts[0][0] < t - history_s:
            restarts.popleft()


class _GpuTrack:
    __slots__ = ("last_seen", "present", "sample", "shift")

    def __init__(self, sample: GpuSample, shift: float = 0.0) -> None:
        self.sample = sample
        self.present = True
        self.last_seen = sample.timestamp
        self.shift = shift  # as `_ReplicaTrack.shift`, for `last_seen`


class FleetState:
    """Latest values, windowed rates, bounded history and the GPU join for the whole fleet."""

    def __init__(
        self,
        *,
        rate_window_s: float = 60,
        history_s: float = 3600,
        stale_after_s: float = 30,
        forget_after_s: float | None = None,
        max_points: int = 4096,
        full_resolution_s: float | None = None,
        history_step_s: float = 60.0,
    ) -> None:
        """``forget_after_s`` (default ``10 * stale_after_s``): a replica or GPU unseen for this long is
        dropped, so pods that are gone do not accumulate. ``max_points`` caps every history however
        short the tick. A replica's history keeps complete samples for ``rate_window_s``, every sample
        (its values, of its histograms only the TTFT one, packed) for ``full_resolution_s`` (default the larger of
        ``rate_window_s`` and 120 s, within ``history_s``), and older ones thinned to one per ``history_step_s``."""
        for name, value in (
            ("rate_window_s", rate_window_s),
            ("history_s", history_s),
            ("stale_after_s", stale_after_s),
        ):
            if not value > 0:
                raise ValueError(f"FleetState: {name} must be > 0, got {value}")
        if max_points < 2:
            raise ValueError(f"FleetState: max_points must be >= 2, got {max_points}")
        self.rate_window_s = float(rate_window_s)
        self.history_s = float(history_s)
        self.stale_after_s = float(stale_after_s)
        self.forget_after_s = float(forget_after_s if forget_after_s is not None else 10 * stale_after_s)
        if self.forget_after_s < self.stale_after_s:
            raise ValueError("FleetState: forget_after_s must be >= stale_after_s")
        self.max_points = max_points
        default_full = min(max(self.rate_window_s, 120.0), self.history_s)
        self.full_resolution_s = float(full_resolution_s if full_resolution_s is not None else default_full)
        if self.full_resolution_s < self.rate_window_s:
            raise ValueError("FleetState: full_resolution_s must be >= rate_window_s (rates need every sample)")
        if not history_step_s > 0:
            raise ValueError(f"FleetState: history_step_s must be > 0, got {history_step_s}")
        self.history_step_s = float(history_step_s)
        self._replicas: dict[str, _ReplicaTrack] = {}
        self._bounds: dict[tuple[float, ...], tuple[float, ...]] = {}  # one shared tuple per bucket layout
        self._shared_bounds: set[int] = set()  # ids of the tuples in self._bounds (no hashing of floats)
        self._bounds_seen: dict[tuple[float, ...], tuple[float, ...]] = {}  # per layout, the last other tuple met
        self._gpus: dict[str, _GpuTrack] = {}
        self._gpu_nodes_answered: set[str] = set()  # nodes whose GPU exporter answered the latest tick
        self._gpus_reported_gone: set[str] = set()  # keys of the GoneGpuSamples of the latest tick
        self._deployment_history: dict[str, deque[DeploymentPoint]] = {}
        # Each deployment's counters summed over its replicas on one common window (collector.deployment_window).
        self._windows: dict[str, DeploymentWindow] = {}
        self._replica_views: list[ReplicaView] = []
        self._deployment_views: dict[str, DeploymentView] = {}
        self._gpu_views: list[GpuView] = []
        self._now: float | None = None
        # The step-free time less the wall time (collector.clock.StepFreeTime) at the latest tick and the one before:
        # what has been seen is aged on it, so a step of the wall clock neither freshens nor ages it.
        self._offset = 0.0
        self._offset_before = 0.0
        self._aggregate_shifts: dict[str, tuple[float, float]] = {}  # key -> (its aggregate's timestamp, shift)
        # deployment key -> keys of this tick's down inference targets that no replica track stands for
        self._unread: dict[str, set[str]] = {}

    # -- input ---------------------------------------------------------------------------------------

    def observe(
        self,
        replicas: Sequence[ReplicaSample],
        gpus: Sequence[GpuSample],
        *,
        now: float,
        down_targets: Sequence[TargetInfo] = (),
        gpu_nodes_scraped: Collection[str] | None = None,
        departed: Collection[str] = (),
        step_free_offset_s: float = 0.0,
    ) -> None:
        """Take one tick's samples.

        ``departed``: keys (``namespace/replica``) of replicas whose targets discovery no longer lists (scaled
        down, deleted): they are forgotten now rather than ageing into "down" — a replica that was meant to go
        is not a target that failed.

        ``down_targets``: targets that failed this tick; their replicas keep their last sample but show
        ``target_up=False`` (and turn not ready once stale). ``gpu_nodes_scraped``: nodes whose GPU
        exporter answered this tick (a page on no node: its URL, ``GpuSample.page``), so that a GPU missing from an
        answered page turns ``present=False`` even when the page lists no GPU at all; by default, the nodes of ``gpus``.

        ``step_free_offset_s``: the step-free time less ``now`` (``collector.clock.StepFreeTime``: 0 until the wall
        clock steps). What was seen is aged on step-free time: a replica or GPU silent since before a step of the wall
        clock goes stale, down and forgotten after the same silence as without the step. Before, one silent across a
        step back of an hour kept a sample stamped in the "future": ready (its frozen rates summed into its
        deployment's), never down nor forgotten, for the hour; a step ahead aged it by the hour at once.
        """
        self._now = now
        self._offset_before, self._offset = self._offset, step_free_offset_s
        for key in departed:
            self._replicas.pop(key, None)
        self._take_replicas(replicas, down_targets, now)
        self._take_gpus(gpus, set(gpu_nodes_scraped) if gpu_nodes_scraped is not None else None, now)
        self._forget(now)
        self._take_unread(down_targets)
        # the replicas whose pods are there this tick (sampled, or listed and failing): they hold their node's GPUs
        reported = {replica_key(s.namespace, s.replica) for s in replicas}
        reported.update(replica_key(t.namespace, k) for t in down_targets for k in (t.pod, t.url))
        self._rebuild_views(now, reported)

    def seed_absent(self, gpus: Iterable[GpuSample]) -> int:
        """Before the first ``observe``: GPUs a previous run saw vanish (its open ``vanished`` findings, restored),
        tracked absent as if this process had seen them leave. A process only knows a GPU is gone from a page by
        having seen it there; without this, a restart forgot every GPU still off the bus and closed its finding. Each
        then lives as any absent GPU: absent while its node's exporter answers without it, present again if listed,
        forgotten (last seen ``forget_after_s`` ago) once its node's exporter stops answering, and dropped as a re-cut
        if its UUID comes back under another key. A key already tracked is left as it is; returns how many were
        seeded."""
        seeded = 0
        for sample in gpus:
            if sample.key in self._gpus:
                continue
            track = self._gpus[sample.key] = _GpuTrack(sample)
            track.present = False
            seeded += 1
        return seeded

    def _shift(self, timestamp: float, now: float) -> float:
        """The ``shift`` of a sample stamped ``timestamp`` arriving in this tick (``_ReplicaTrack.shift``): aged from
        the time it was taken. Its stamp is on the wall clock as it read then: when the clock stepped since the last
        tick, it was taken before the step or after it, and the reading of the two that is not negative and the
        newer is the one (a scrape takes a tick's part of a second, a step is a second or more). A stamp ahead of
        ``now`` on either reading is taken as now: a sample is not fresher than the tick it came in."""
        age = now - timestamp
        stepped = self._offset - self._offset_before
        if stepped:
            readings = [a for a in (age, age + stepped) if a >= 0.0]
            return (min(readings) if readings else 0.0) - age - self._offset
        return (-age if age < 0.0 else 0.0) - self._offset

    def _age(self, timestamp: float, shift: float, now: float) -> float:
        """Seconds from a sample's ``timestamp`` (arrived with ``shift``) to ``now``, on step-free time: ``now -
        timestamp`` exactly while the clock has not stepped."""
        return now - (timestamp - (self._offset + shift))

    def _stepped_back(self, latest: float, timestamp: float) -> bool:
        """Whether a sample stamped ``timestamp``, older than its replica's ``latest``, comes after a step back of the
        clock rather than out of order: this tick's ``now`` (our clock) and the sample both more than
        ``stale_after_s`` before ``latest`` (a PromQL source's repeated sample on another clock is not a step)."""
        now = self._now
        return now is not None and now < latest - self.stale_after_s and timestamp < latest - self.stale_after_s

    def _take_replicas(self, replicas: Sequence[ReplicaSample], down_targets: Sequence[TargetInfo], now: float) -> None:
        seen: set[str] = set()
        restarted = 0
        windows = self._windows
        tick = now + self._offset  # step-free: the deployments' windows never step
        for sample in replicas:
            key = replica_key(sample.namespace, sample.replica)
            track = self._replicas.get(key)
            if track is None:
                track = self._replicas[key] = _ReplicaTrack(self.max_points)
            seen.add(key)
            track.target_up = True
            # Out-of-order or repeated samples would make rates go backwards: keep time strictly increasing.
            if track.recent and sample.timestamp <= track.latest.timestamp:
                if not self._stepped_back(track.latest.timestamp, sample.timestamp):
                    continue
                # The clock stepped back (NTP): every sample would be dropped for as long as the step while the
                # replica stayed ready on its last reading. Its window starts again from this sample.
                before, track = track, _ReplicaTrack(self.max_points)
                self._replicas[key] = track
                track.continue_counts(before)
                restarted += 1
            steps = track.add(
                self._share_bounds(sample),
                rate_window_s=self.rate_window_s,
                full_resolution_s=self.full_resolution_s,
                step_s=self.history_step_s,
                history_s=self.history_s,
            )
            track.shift = self._shift(sample.timestamp, now)
            window = windows.get(deployment := sample.deployment_key)
            if window is None:
                window = windows[deployment] = DeploymentWindow()
            window.credit(steps, track.credited_at, tick)
            track.credited_at = tick
        if restarted:
            log.warning(
                "the clock stepped back over %.0f s: the windows of %d replicas start again from this tick's samples",
                self.stale_after_s,
                restarted,
            )
        for target in down_targets:
            for key in (replica_key(target.namespace, target.pod), replica_key(target.namespace, target.url)):
                track = self._replicas.get(key)
                if track is not None and key not in seen:
                    track.target_up = False

    def _take_unread(self, down_targets: Sequence[TargetInfo]) -> None:
        """After ``_forget``: the inference targets down this tick that no replica track stands for, by deployment.
        Down since before they were first read, or forgotten since: replicas all the same (a pod holding its GPUs),
        not ready; Prometheus' ``count(up)`` counts them so in PromQL aggregates mode, as the scale subresource does."""
        unread: dict[str, set[str]] = {}
        replicas = self._replicas
        for target in down_targets:
            if target.kind != "engine":
                continue
            key = replica_key(target.namespace, target.pod)
            if key not in replicas and replica_key(target.namespace, target.url) not in replicas:
                unread.setdefault(target.deployment_key, set()).add(key)
        self._unread = unread

    def _share_bounds(self, sample: ReplicaSample) -> ReplicaSample:
        """The same sample with its histograms' bucket bounds replaced by one shared tuple per layout:
        every sample of every replica carries the same few layouts, and bounds are half a histogram's
        memory."""
        changed: dict[str, Histogram] = {}
        for name in _HISTOGRAM_FIELDS:
            h: Histogram | None = getattr(sample, name)
            if h is None or id(h.bounds) in self._shared_bounds:
                continue  # already the shared tuple (adapters reading a known page layout hand it out)
            shared = self._bounds.get(h.bounds)
            if shared is None:
                if len(self._bounds) >= _MAX_LAYOUTS:
                    continue  # a pathological target inventing layouts: keep its own tuples
                shared = self._bounds[h.bounds] = h.bounds
                self._shared_bounds.add(id(shared))  # kept alive by self._bounds, so the id stays its own
            elif self._bounds_seen.get(h.bounds) is h.bounds:
                # The same tuple again in a later sample: one an adapter hands out for a page layout, every tick. It
                # becomes the layout's shared tuple (the one before stays in the samples that hold it), so the samples
                # it comes in are kept as they are, not copied (before, the first page's parse set the shared tuple,
                # and every later sample read off the layout was rebuilt, 900 a tick at 1,000 targets).
                self._shared_bounds.discard(id(shared))
                self._bounds[h.bounds] = h.bounds  # the key stays the first tuple, alive: its id stays its own
                self._shared_bounds.add(id(h.bounds))
                del self._bounds_seen[h.bounds]
                continue
            else:
                self._bounds_seen[h.bounds] = h.bounds
            if shared is not h.bounds:
                changed[name] = Histogram(bounds=shared, counts=h.counts, sum=h.sum, count=h.count)
        return replace(sample, **changed) if changed else sample  # type: ignore[arg-type]

    def _take_gpus(self, gpus: Sequence[GpuSample], scraped_nodes: set[str] | None, now: float) -> None:
        # GPUs a source saw leave an exporter that still answers (GoneGpuSample: PromQL aggregates mode, which reads
        # no whole page): tracked absent while it reports them, as a GPU missing from an answered page is
        reported = [g for g in gpus if isinstance(g, GoneGpuSample)]
        if reported:
            gpus = [g for g in gpus if not isinstance(g, GoneGpuSample)]
        listed = {g.key for g in gpus}
        answered = scraped_nodes if scraped_nodes is not None else {g.node for g in gpus}
        self._gpu_nodes_answered = answered
        # Keys an answering exporter no longer lists, read before this scrape updates anything (a healthy tick has
        # none, and then nothing more is worked out).
        gone = [
            (key, track)
            for key, track in self._gpus.items()
            if key not in listed and (track.sample.node or track.sample.page) in answered
        ]
        recut = _recut_keys(gone, [t.sample for t in self._gpus.values() if t.present], gpus) if gone else set()
        for sample in gpus:
            track = self._gpus.get(sample.key)
            shift = self._shift(sample.timestamp, now)
            if track is None:
                self._gpus[sample.key] = _GpuTrack(sample, shift)
            else:
                track.sample, track.present, track.last_seen, track.shift = sample, True, sample.timestamp, shift
        for key, track in gone:
            if key in recut:
                del self._gpus[key]
            else:
                track.present = False  # its exporter answered without it: the GPU fell off the bus
        self._gpus_reported_gone = {g.key for g in reported if g.key not in listed}
        for sample in reported:
            if sample.key in self._gpus_reported_gone:
                track = self._gpus.get(sample.key)
                if track is None:
                    track = self._gpus[sample.key] = _GpuTrack(sample, self._shift(sample.timestamp, now))
                track.present = False

    def _forget(self, now: float) -> None:
        cutoff = now - self.forget_after_s
        offset = self._offset
        for key in [k for k, t in self._replicas.items() if t.latest.timestamp - (offset + t.shift) < cutoff]:
            del self._replicas[key]
        # A GPU its node's exporter still answers without is a GPU that fell off the bus, not one that is gone:
        # it stays (absent) for as long as the node is there, so its finding stays open until it is fixed.
        answered = self._gpu_nodes_answered
        for key in [
            k
            for k, t in self._gpus.items()
            if t.last_seen - (offset + t.shift) < cutoff
            and (t.present or ((t.sample.node or t.sample.page) not in answered and k not in self._gpus_reported_gone))
        ]:
            del self._gpus[key]
        history_cutoff = now - self.history_s
        for key, points in list(self._deployment_history.items()):
            while points and points[0].t < history_cutoff:
                points.popleft()
            if not points:
                del self._deployment_history[key]

    def observe_deployments(self, aggregates: Iterable[DeploymentAggregate], *, now: float) -> None:
        """After ``observe``: deployments whose signals Prometheus aggregated (``collector.promql``). Each one's view
        and history point come from its aggregate; its ``replicas`` are the replicas ``observe`` took for it (only
        those a detector must see). Deployments without an aggregate keep the view built from their replicas.

        An aggregate older than ``stale_after_s`` (Prometheus unreachable since) counts no replica ready, as stale
        replicas do; one older than ``forget_after_s`` is ignored. Ages run on step-free time, as ``observe``'s (with
        its ``step_free_offset_s``)."""
        shifts: dict[str, tuple[float, float]] = {}
        for agg in aggregates:
            # the same aggregate again (Prometheus unreachable since) keeps its shift: it ages
            known = self._aggregate_shifts.get(agg.key)
            shift = known[1] if known is not None and known[0] == agg.timestamp else self._shift(agg.timestamp, now)
            shifts[agg.key] = (agg.timestamp, shift)
            age = self._age(agg.timestamp, shift, now)
            if age > self.forget_after_s:
                continue
            if age > self.stale_after_s:
                agg = replace(agg, ready_replicas=0)
            members = self._deployment_views.get(agg.key)
            view = _aggregate_view(agg, members.replicas if members is not None else ())
            self._deployment_views[agg.key] = view
            points = self._deployment_history.setdefault(agg.key, deque(maxlen=self.max_points))
            while points and points[-1].t >= now:  # times stay increasing, which readers of windows rely on
                points.pop()  # the point observe() built from the few replicas it saw
            points.append(_point(now, view))
        self._aggregate_shifts = shifts

    # -- views ---------------------------------------------------------------------------------------

    def _rebuild_views(self, now: float, reported: Collection[str]) -> None:
        gpus_by_pod: dict[tuple[str | None, str], list[GpuSample]] = {}
        gpus_by_node: dict[str, list[GpuSample]] = {}
        attributing: set[str] = set()  # nodes whose exporter attributes GPUs to pods (as `_gpu_views` reads them)
        for gpu in self._gpus.values():
            if gpu.sample.pod:
                attributing.add(gpu.sample.node)
            if not gpu.present:
                continue
            if gpu.sample.pod:
                gpus_by_pod.setdefault((gpu.sample.namespace, gpu.sample.pod), []).append(gpu.sample)
            else:
                gpus_by_node.setdefault(gpu.sample.node, []).append(gpu.sample)
        # A node's pod-less GPUs join a replica on it only where they can be its own: on a node whose exporter
        # attributes GPUs to pods they are unallocated; shared by several replicas, which are whose is unknown (each
        # replica was priced with all of them: 8 single-GPU replicas on an 8-GPU node as 64 GPUs). A replaced pod's
        # track, kept until forget_after_s, shares nothing with its successor (`_node_replicas`).
        on_node = _node_replicas((key, t.latest.node, key in reported) for key, t in self._replicas.items())

        views: list[ReplicaView] = []
        # Each pod's or node's GPUs sorted once, not once per replica that joins them: a node's GPUs are shared by every
        # replica on it (nine per node in bench/scrape.py), and a GPU's key is built anew each time it is read.
        ordered: dict[int, tuple[GpuSample, ...]] = {}
        for key in sorted(self._replicas):
            track = self._replicas[key]
            latest = track.latest
            joined = gpus_by_pod.get((latest.namespace, latest.replica)) or gpus_by_pod.get((None, latest.replica))
            shared = None
            if not joined and latest.node and latest.node not in attributing:
                if on_node[latest.node] == [key]:
                    joined = gpus_by_node.get(latest.node)
                else:
                    shared = gpus_by_node.get(latest.node)
            gpus = _sorted_once(joined, ordered) if joined else ()
            node_gpus = _sorted_once(shared, ordered) if shared else ()
            views.append(self._replica_view(track, now, gpus, node_gpus))
        self._replica_views = views

        self._gpu_views = _gpu_views(self._gpus, views, on_node, partial(self._age, now=now))

        grouped: dict[str, list[ReplicaView]] = {}
        for view in views:
            grouped.setdefault(view.deployment_key, []).append(view)
        windows = self._windows
        for key in [k for k in windows if k not in grouped]:  # every replica gone: a return starts a new window
            del windows[key]
        tick = now + self._offset
        deployment_views = {}
        for key, members in sorted(grouped.items()):
            window = windows.get(key)
            if window is None:
                window = windows[key] = DeploymentWindow()
            deployment_views[key] = _deployment_view(key, members, window, tick, self.rate_window_s, self.stale_after_s)
        added = False
        for key, unread in self._unread.items():
            known = deployment_views.get(key)
            if known is None:
                if any(k.startswith(f"{key}@") for k in deployment_views):
                    continue  # a disaggregated deployment's: which pool a target never read serves is unknown
                # every target down since before it was read: a deployment with no replica ready
                known = _deployment_view(key, [], DeploymentWindow(), tick, self.rate_window_s, self.stale_after_s)
                added = True
            deployment_views[key] = replace(known, unread_replicas=len(unread))
        self._deployment_views = dict(sorted(deployment_views.items())) if added else deployment_views
        for key, dv in self._deployment_views.items():
            points = self._deployment_history.setdefault(key, deque(maxlen=self.max_points))
            if points and points[-1].t >= now:
                if now >= points[-1].t - self.stale_after_s:
                    continue
                # The clock stepped back (NTP): no point would be kept for as long as the step, and the windows read
                # from the history (the rollout detector's peak, the prefix baselines) would read the hour before.
                points.clear()
            points.append(_point(now, dv))

    def _replica_view(
        self, track: _ReplicaTrack, now: float, gpus: tuple[GpuSample, ...], node_gpus: tuple[GpuSample, ...] = ()
    ) -> ReplicaView:
        # Every window is the rate window (`_ReplicaTrack.add` keeps them to the samples of ``recent``). Each counter's
        # increase is worked out once (`CounterWindow.increase_and_rate`): a thousand views a tick.
        latest = track.latest
        age = now - (latest.timestamp - (self._offset + track.shift))  # `_age`, inline: a thousand views a tick
        counters = track.counters
        hits = counters["prefix_hits"].increase()
        queries, queries_rate = counters["prefix_queries"].increase_and_rate()
        finished_rate = counters["requests_finished"].increase_and_rate()[1]
        in_flight = track.in_flight.derivative()
        arrival = None if finished_rate is None or in_flight is None else max(0.0, finished_rate + in_flight)
        return ReplicaView(  # positional, in the order of its fields (a test pins it)
            latest,  # sample
            age <= self.stale_after_s,  # ready
            track.target_up,
            latest.timestamp,  # last_seen
            age,  # age_s
            ratio(hits, queries),  # prefix_hit_ratio
            hits,  # prefix_hits_increase
            queries,  # prefix_queries_increase
            queries_rate,  # prefix_queries_rate
            counters["preemptions"].increase_and_rate()[1],  # preemptions_rate
            counters["prompt_tokens"].increase_and_rate()[1],  # prompt_tokens_rate
            counters["generation_tokens"].increase_and_rate()[1],  # generation_tokens_rate
            finished_rate,  # requests_finished_rate
            arrival,  # arrival_rate
            track.ttft.increase(),  # ttft_window
            gpus,
            track.itl.increase(),  # itl_window
            node_gpus,
        )

    # -- output --------------------------------------------------------------------------------------

    @property
    def now(self) -> float | None:
        """``now`` of the latest ``observe`` (None before the first)."""
        return self._now

    def replicas(self) -> list[ReplicaView]:
        return list(self._replica_views)

    def replica(self, key: str) -> ReplicaView | None:
        return next((v for v in self._replica_views if v.key == key), None)

    def deployments(self) -> dict[str, DeploymentView]:
        return dict(self._deployment_views)

    def gpus(self) -> list[GpuView]:
        return list(self._gpu_views)

    def deployment_history(self, key: str) -> Sequence[DeploymentPoint]:
        """Points oldest first, at most ``history_s`` old and ``max_points`` long; empty if unknown."""
        return tuple(self._deployment_history.get(key, ()))

    def deployment_history_since(self, key: str, since: float) -> Sequence[DeploymentPoint]:
        """The points of ``deployment_history`` at or after ``since``, oldest first: the first found by bisection (the
        history's times increase: see ``observe_deployments``), so a window costs its own points, not the hour's."""
        points = self._deployment_history.get(key, ())
        return tuple(islice(points, bisect_left(points, since, key=_point_time), None))

    def ttft_increase(self, key: str, since: float) -> Histogram | None:
        """The replica's TTFT histogram increase from its oldest kept sample taken at or after ``since`` (and
        after the bucket bounds last changed) to its newest: last minus first, plus the value before each restart
        between them. Restarts are found as samples arrive, between each histogram and the one before it, so a
        restart between two samples the history later thinned out still counts (a pass over the kept samples, as
        ``histogram_increase`` of ``replica_history`` makes, can miss it), and a window costs no pass over pairs."""
        track = self._replicas.get(key)
        found = None if track is None else _ttft_increase(track, since)
        if found is None:
            return None
        bounds, counts, total_sum, total_count = found
        return Histogram(bounds=bounds, counts=tuple(counts), sum=total_sum, count=total_count)

    def ttft_increase_sum(self, keys: Iterable[str], since: float) -> Histogram | None:
        """``histogram_add(self.ttft_increase(key, since) for key in keys)``, the same histogram, without a
        histogram built per replica: a deployment's TTFT over a window (the SLO burn and rollout detectors ask
        for two windows of every deployment each tick)."""
        replicas = self._replicas
        first: tuple[tuple[float, ...], list[float], float, float] | None = None
        counts: list[float] = []
        total_sum = total_count = 0.0
        added = False
        for key in keys:
            track = replicas.get(key)
            found = None if track is None else _ttft_increase(track, since)
            if found is None:
                continue
            if first is None:
                first = found
                _, counts, total_sum, total_count = found
            elif found[0] is first[0] or found[0] == first[0]:  # as histogram_add: other bounds are left out
                counts = list(map(operator.add, counts, found[1]))
                total_sum += found[2]
                total_count += found[3]
                added = True
        if first is None:
            return None
        if not added:
            counts, total_sum, total_count = first[1], first[2], first[3]
        return Histogram(bounds=first[0], counts=tuple(counts), sum=total_sum, count=total_count)

    def ttft_history(self, key: str) -> Sequence[tuple[float, Histogram]]:
        """The replica's TTFT histograms a window can read (``ttft_increase``), with their samples' times, oldest
        first: every kept one since the bucket bounds last changed. Empty if unknown."""
        track = self._replicas.get(key)
        return track.ttft_samples() if track is not None else ()

    def replica_history(self, key: str) -> Sequence[ReplicaSample]:
        """Samples oldest first (key ``namespace/replica``); empty if unknown or forgotten. Complete for the
        rate window; every sample of the last ``full_resolution_s``; before that one per
        ``history_step_s``; outside the rate window without histograms (the TTFT ones: ``ttft_history``)."""
        track = self._replicas.get(key)
        return track.samples() if track is not None else ()

    def replica_history_since(self, key: str, since: float) -> Sequence[ReplicaSample]:
        """The samples of ``replica_history`` taken at or after ``since``, oldest first, found by bisection (times
        increase: ``observe`` drops a sample not newer than the latest), so a window costs its own samples, not the
        hour's; the same window asked for again before the next sample arrives is the same tuple. Empty if unknown."""
        track = self._replicas.get(key)
        return track.samples_since(since) if track is not None else ()

    def replica_history_newest(self, key: str, n: int) -> Sequence[ReplicaSample]:
        """The newest ``n`` samples of ``replica_history`` (all of them when fewer are kept), oldest first."""
        track = self._replicas.get(key)
        return track.newest(n) if track is not None else ()

    def replica_history_start(self, key: str) -> float | None:
        """When the replica's oldest kept sample was taken (``replica_history(key)[0].timestamp``); None if
        unknown."""
        track = self._replicas.get(key)
        return track.oldest.timestamp if track is not None else None


_timestamp = operator.attrgetter("timestamp")
_gpu_key = operator.attrgetter("key")
_point_time = operator.attrgetter("t")


def _ttft_increase(track: _ReplicaTrack, since: float) -> tuple[tuple[float, ...], list[float], float, float] | None:
    """`FleetState.ttft_increase` of one track as (bounds, counts, sum, count), or None."""
    last_h = track.ttft_last
    if last_h is None:
        return None
    start = max(since, track.ttft_bounds_since)
    # The newest and the oldest histogram at or after `start`, as (sum, count, counts): the recent tier's as scraped,
    # the others packed (sum, count, *counts); every one has the bounds of `ttft_last` (see `start`).
    latest = track.recent[-1]
    h = latest.ttft
    if h is not None and latest.timestamp >= start:  # nearly always: the latest sample's
        newest: tuple[float, tuple[float, float, Sequence[float]]] | None = (
            latest.timestamp,
            (h.sum, h.count, h.counts),
        )
    else:
        tiers = ((track.recent, None), (track.middle, track.middle_ttft), (track.older, track.older_ttft))
        newest = _ttft_found(((s, p, range(len(s) - 1, -1, -1)) for s, p in tiers), start)
    if newest is None:
        return None
    oldest = _ttft_oldest(track, start)
    if oldest is None or oldest[0] >= newest[0]:
        return None
    (first_t, first), (last_t, last) = oldest, newest
    counts = list(map(operator.sub, last[2], first[2]))
    total_sum, total_count = last[0] - first[0], last[1] - first[1]
    for t, before in track.ttft_restarts:
        if first_t < t <= last_t:
            counts = list(map(operator.add, counts, before.counts))  # a restart: what follows counts in full
            total_sum += before.sum
            total_count += before.count
    return last_h.bounds, counts, total_sum, total_count


def _ttft_oldest(track: _ReplicaTrack, start: float) -> tuple[float, tuple[float, float, Sequence[float]]] | None:
    """The oldest TTFT histogram taken at or after ``start``, with its sample's time, found by bisection in each
    tier from the oldest (every sample from there on is at or after ``start``)."""
    for samples, packed in ((track.older, track.older_ttft), (track.middle, track.middle_ttft)):
        for i in range(bisect_left(samples, start, key=_timestamp), len(samples)):
            p = packed[i]
            if p is not None:
                return samples[i].timestamp, (p[0], p[1], p[2:])
    recent = track.recent
    for i in range(bisect_left(recent, start, key=_timestamp), len(recent)):
        sample = recent[i]
        h = sample.ttft
        if h is not None:
            return sample.timestamp, (h.sum, h.count, h.counts)
    return None


def _ttft_found(
    scan: Iterable[tuple[deque[ReplicaSample], deque[array[float] | None] | None, range]], start: float
) -> tuple[float, tuple[float, float, Sequence[float]]] | None:
    """The first TTFT histogram in ``scan`` (each tier's samples, their packed histograms or None for those as
    scraped, and the positions to look at in order), with its sample's time; None once a sample before ``start`` is
    reached (the tiers go from newest to oldest or the reverse)."""
    for samples, packed, positions in scan:
        for i in positions:
            sample = samples[i]
            if sample.timestamp < start:
                return None
            h = sample.ttft if packed is None else packed[i]
            if h is not None:
                return sample.timestamp, _ttft_values(h)
    return None


def _ttft_values(h: Histogram | array[float]) -> tuple[float, float, Sequence[float]]:
    """(sum, count, cumulative counts) of a histogram as scraped or as packed (sum, count, *counts)."""
    if isinstance(h, Histogram):
        return h.sum, h.count, h.counts
    return h[0], h[1], h[2:]


def _sorted_once(gpus: list[GpuSample], ordered: dict[int, tuple[GpuSample, ...]]) -> tuple[GpuSample, ...]:
    """``gpus`` sorted by key, once per list (``ordered`` by its id: the lists stay alive, and so their ids their own,
    through the loop that reads them)."""
    done = ordered.get(id(gpus))
    if done is None:
        done = ordered[id(gpus)] = tuple(sorted(gpus, key=_gpu_key))
    return done


def _node_replicas(replicas: Iterable[tuple[str, str | None, bool]]) -> dict[str, list[str]]:
    """Each node's replicas (keys) that its pod-less GPUs may serve, from (key, node, holds) triples: those that
    hold its GPUs (reported this tick: sampled, or their target listed and failing: the pod is still there), else
    every one on it (a lone replica whose scrape is late keeps its own). A pod replaced by a new one (a restart, a
    rollout, a reschedule) where nothing says it departed (a PromQL source) leaves a track until
    forget_after_s that neither holds GPUs nor makes its successor one of several (G6: a TP-8 replica's 8 GPUs were
    nobody's for 305 s, its deployment priced at 1 GPU, assumed)."""
    holding: dict[str, list[str]] = {}
    every: dict[str, list[str]] = {}
    for key, node, holds in replicas:
        if node:
            every.setdefault(node, []).append(key)
            if holds:
                holding.setdefault(node, []).append(key)
    return {node: holding.get(node) or keys for node, keys in every.items()}


def _gpu_views(
    gpus: dict[str, _GpuTrack],
    replicas: list[ReplicaView],
    by_node: dict[str, list[str]],
    age: Callable[[float, float], float],
) -> list[GpuView]:
    """Name the replica each GPU serves: its pod when the exporter attributes one, else the only replica
    on its node (``_node_replicas``; several replicas on one node without attribution is ambiguous: None)."""
    by_pod: dict[str, list[str]] = {}
    for view in replicas:
        by_pod.setdefault(view.sample.replica, []).append(view.key)
    # On a node whose exporter attributes GPUs to pods, a GPU without a pod is unallocated, not the node's replica.
    attributing = {t.sample.node for t in gpus.values() if t.sample.pod}
    out: list[GpuView] = []
    for key in sorted(gpus):
        track = gpus[key]
        sample = track.sample
        if sample.pod:
            candidates = by_pod.get(sample.pod, [])
            if sample.namespace is not None:
                candidates = [k for k in candidates if k == replica_key(sample.namespace, sample.pod)]
        elif sample.node in attributing:
            candidates = []
        else:
            candidates = by_node.get(sample.node, [])
        joined = candidates[0] if len(candidates) == 1 else None
        out.append(
            GpuView(
                sample=sample,
                present=track.present,
                last_seen=track.last_seen,
                age_s=age(track.last_seen, track.shift),
                replica=joined,
            )
        )
    return out


def _in_flight(sample: ReplicaSample) -> float | None:
    known = [v for v in (sample.requests_waiting, sample.requests_running) if v is not None]
    return sum(known) if known else None


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _deployment_view(
    key: str, members: list[ReplicaView], window: DeploymentWindow, now: float, window_s: float, clock_slack_s: float
) -> DeploymentView:
    """The deployment's view: sums over its ready replicas now, and its rates over one window common to all its
    replicas, ready or gone (``collector.deployment_window``; this tick's point recorded there at ``now``)."""
    deployment, pool = split_pool_key(key)
    namespace, _, name = deployment.partition("/")
    ready = [m for m in members if m.ready]
    kv = [m.sample.kv_usage for m in ready if m.sample.kv_usage is not None]
    waiting = _sum(m.sample.requests_waiting for m in ready)
    running = _sum(m.sample.requests_running for m in ready)
    in_flight = None if waiting is None and running is None else (waiting or 0.0) + (running or 0.0)
    window.close(now, in_flight, window_s, clock_slack_s)
    increases, rates, in_flight_slope, _ = window.rates(window_s)
    if not ready:  # as before: no ready replica, no rate (what its window holds is of replicas gone stale)
        increases = rates = [None] * len(rates)
        in_flight_slope = None
    finished = rates[FINISHED]
    arrival = None if finished is None or in_flight_slope is None else max(0.0, finished + in_flight_slope)
    return DeploymentView(
        key=key,
        namespace=namespace,
        name=name,
        replicas=tuple(members),
        ready_replicas=len(ready),
        requests_waiting=waiting,
        requests_running=running,
        kv_usage_mean=sum(kv) / len(kv) if kv else None,
        kv_usage_max=max(kv) if kv else None,
        arrival_rate=arrival,
        prompt_tokens_rate=rates[PROMPT],
        generation_tokens_rate=rates[GENERATION],
        prefix_hit_ratio=ratio(increases[HITS], increases[QUERIES]),
        preemptions_rate=rates[PREEMPTIONS],
        ttft_window=histogram_add(m.ttft_window for m in ready),
        itl_window=histogram_add(m.itl_window for m in ready),
        requests_finished_rate=finished,
        pool=pool,
    )


def _aggregate_view(agg: DeploymentAggregate, members: tuple[ReplicaView, ...]) -> DeploymentView:
    return DeploymentView(
        key=agg.key,
        namespace=agg.namespace,
        name=agg.deployment,
        replicas=members,
        ready_replicas=agg.ready_replicas,
        requests_waiting=agg.requests_waiting,
        requests_running=agg.requests_running,
        kv_usage_mean=agg.kv_usage_mean,
        kv_usage_max=agg.kv_usage_max,
        arrival_rate=agg.arrival_rate,
        prompt_tokens_rate=agg.prompt_tokens_rate,
        generation_tokens_rate=agg.generation_tokens_rate,
        prefix_hit_ratio=ratio(agg.prefix_hits_rate, agg.prefix_queries_rate),
        preemptions_rate=agg.preemptions_rate,
        ttft_window=agg.ttft_window,
        itl_window=agg.itl_window,
        replica_count=agg.replicas,
        requests_finished_rate=agg.requests_finished_rate,
        queue_time_window=agg.queue_time_window,
        pool=split_pool_key(agg.key)[1],
    )


def _point(t: float, view: DeploymentView) -> DeploymentPoint:
    return DeploymentPoint(t=t, replica_count=view.known_replicas, **view.signals())  # type: ignore[arg-type]


def _partition_modes(samples: Iterable[GpuSample]) -> dict[str, set[str | None]]:
    """Each node's (or node-less page's) partition modes among ``samples``: ``mig_profile``, None for a whole GPU."""
    modes: dict[str, set[str | None]] = {}
    for g in samples:
        modes.setdefault(g.node or g.page, set()).add(g.mig_profile)
    return modes


def _recut_keys(
    gone: Sequence[tuple[str, _GpuTrack]], present_before: Sequence[GpuSample], listed: Sequence[GpuSample]
) -> set[str]:
    """The keys of ``gone`` that name a GPU re-cut, not lost: its UUID listed under another key of its node (NVIDIA
    MIG turned on or off, an instance destroyed), or every GPU of its node listed in other partition modes than
    before and none in its old one (AMD's SPX <-> CPX/DPX, done a node at a time). Their old keys are forgotten: a
    `vanished` finding (critical, drain) for each would stay open until a restart. A partition that goes while its
    node keeps the modes it had is a GPU fallen off the bus."""
    before, now = _partition_modes(present_before), _partition_modes(listed)
    uuids = {(g.node or g.page, g.uuid) for g in listed if g.uuid}
    recut = set()
    for key, track in gone:
        where = track.sample.node or track.sample.page
        was, now_modes = before.get(where, set()), now.get(where, set())
        if (where, track.sample.uuid) in uuids or (was and now_modes and was.isdisjoint(now_modes)):
            recut.add(key)
    return recut
