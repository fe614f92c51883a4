"""Glue from the fleet to decisions: FleetState (+ its history) → forecast → capacity → policy → Decision.

One `_DeploymentPlanner` per deployment keeps that deployment's forecaster, learned capacity and
stabilisation history. The control loop calls `Planner.decide(state, now)` each tick; KEDA and the
metrics-api endpoint publish the resulting `Decision`s. No clock and no I/O here.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Container, Iterable, Mapping
from dataclasses import asdict, dataclass, field

from collector import validity
from collector.rates import histogram_reset
from collector.samples import Histogram
from collector.state import DeploymentView, FleetState, ReplicaView
from scaler.burst import BurstPeak, burst_need
from scaler.capacity import CapacityConfig, CapacityModel, SloFeedback, TokenMix, share_above
from scaler.decision import Decision
from scaler.first_tokens import PromptPerFirstToken
from scaler.forecast import Forecast, Forecaster, make
from scaler.forecast.live_error import LiveMase
from scaler.margin import MarginFeedback
from scaler.policy import Demand, PolicyConfig, Recommendation, ReplicaPolicy, release_replicas
from scaler.regret import ReleaseRegret
from scaler.rise import LoadRise


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """One configuration for every deployment (override per deployment through `Planner(overrides=...)`).

    Build it with `planner_config(...)`: the one function `kvpilot run`, `kvpilot demo` and `kvpilot backtest`
    all use, so that what the backtest measures is what runs."""

    forecaster: str = "auto"
    forecaster_options: Mapping[str, float | int | str] = field(default_factory=dict)
    cold_start_s: float = 120.0  # replica start to ready: the part of the horizon nobody can shorten
    scaling_delay_s: float = 5.0  # decision to pod created (control-loop tick + API round trip)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    mix_half_life_s: float = 600.0  # smoothing of the prompt/output token mix (heavy tails swing a minute's mean)
    # A fleet saturated this long (a rate window: its token and completion counts all come from full batches) reads
    # the mix it is serving, heavier only (`_DeploymentPlanner._mix_reading`); 0: never.
    saturated_mix_after_s: float = 60.0
    rate_window_s: float = 60.0  # the collector's rate window: the most service one mix reading can hold
    # Off (the default): the mix belief is seeded with its first reading, which then weighs as all the history the
    # half-life holds. On: the first reading weighs the seconds of service its window holds (`_observe_mix`). It
    # brings the demo's first scale-up before its queue, but costs ~12 % replica-hours for the same SLO there (and
    # Azure code ×4 −0.37 point at +11.7 %) with the margins set beside the seeded belief (docs/scaling.md, "Known
    # limit: the belief starts from its first reading").
    mix_evidence_weighted: bool = False
    slo_ttft_s: float | None = None  # with it, requests queued > a share of it correct the capacity (SloFeedback)
    slo_target_miss: float = 0.01
    # Above 1: clean traffic may lift capacity past the planned share of the profile. Not the default: calm
    # traffic keeps the SLO clean without measuring the headroom a lost replica needs (the demo at ×8 with
    # 1 / target_utilisation: two replicas carried it at full profile, an XID 79 left one, 1,894 waiting).
    feedback_ceiling: float = 1.0
    upper_weight: float = 1.0  # size for point + w·(upper − point): 1 = the q90 upper bound, 0 = the point
    queue_budget_share: float = 0.25  # a request queued longer than this share of the TTFT SLO was delayed by load
    # The "adaptive" headroom: share of its margin given up per clean minute (scaler.margin.MarginFeedback).
    margin_release: float = 0.05
    # The burst floor's measure (`policy.burst_floor`): arrivals per tick over runs of up to `burst_window_s`, the
    # highest service need (the SLO known) or peak rate held `burst_hold_s` (docs/scaling.md, "Policy";
    # `planner_config` derives both).
    burst_window_s: float = 30.0
    burst_hold_s: float = 420.0
    # A release the next burst proved wrong (within `burst_hold_s` of it, the SLO missed while the burst window's
    # arrivals needed more than the count released to) holds the count it released from for this long: the hour
    # the adaptive margin keeps after a miss (`scaler.regret`; docs/scaling.md, "Policy"). 0: off.
    release_regret_s: float = 3600.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cold_start_s) and self.cold_start_s >= 0):
            raise ValueError(f"planner: cold_start_s must be >= 0, got {self.cold_start_s!r}")
        if not (math.isfinite(self.scaling_delay_s) and self.scaling_delay_s >= 0):
            raise ValueError(f"planner: scaling_delay_s must be >= 0, got {self.scaling_delay_s!r}")
        make(self.forecaster, **dict(self.forecaster_options))  # fail fast on a bad forecaster name/option

    @property
    def horizon_s(self) -> float:
        return self.cold_start_s + self.scaling_delay_s

    def to_json(self) -> dict[str, object]:
        """Every number that shapes a decision, as `kvpilot config show --json` and `kvpilot backtest --json`
        print it (tolerances as a pair, the capacity's profile as its fields)."""
        out = asdict(self)
        out["forecaster_options"] = dict(self.forecaster_options)
        out["horizon_s"] = self.horizon_s
        return out


# "safe" (the default): the forecast's upper bound at the target utilisation, capacity never lifted above the
# profile. "lean": one margin (scaler.policy.lean_replicas) and capacity learnt up to the full profile; cheaper on
# every backtest, less SLO through a replica's failure (docs/scaling.md, "Policy"; BENCHMARKS.md, "Backtest").
# "adaptive": the safe margin at start and after any minute the SLO was missed, given up slowly while it is met
# (scaler.margin); without an SLO to learn from it stays the safe rule.
SIZINGS = ("safe", "lean", "adaptive")
_HEADROOM = {"safe": "fixed", "lean": "lean", "adaptive": "adaptive"}


def planner_config(
    *,
    cold_start_s: float,
    tick_s: float,
    min_replicas: int,
    max_replicas: int | None,
    capacity: CapacityConfig,
    slo_ttft_s: float | None = 2.0,
    forecaster: str = "auto",
    target_utilisation: float = 0.8,
    slo_feedback: bool = True,
    sizing: str = "safe",
    horizon_s: float | None = None,
    rate_window_s: float = 60.0,
    burst_floor: bool = True,
) -> PlannerConfig:
    """The planner configuration from the facts of a deployment (cold start, tick, replica bounds, capacity, SLO)
    and the few choices an operator makes. The defaults here are kvpilot's defaults: settings leave a field unset
    to get them, so there is one place they live."""
    if sizing not in SIZINGS:
        raise ValueError(f"planner: sizing must be one of {', '.join(SIZINGS)}, got {sizing!r}")
    lean = sizing == "lean"
    # A rate over a window of w seconds reads the demand of about w/2 ago: to have replicas serving when demand
    # arrives, forecast that much further than the cold start and the tick.
    lag = rate_window_s / 2.0
    horizon = cold_start_s + tick_s + lag if horizon_s is None else max(horizon_s, cold_start_s)
    defaults = PolicyConfig()
    return PlannerConfig(
        forecaster=forecaster,
        cold_start_s=cold_start_s,
        scaling_delay_s=horizon - cold_start_s,
        capacity=capacity,
        slo_ttft_s=slo_ttft_s if slo_feedback else None,
        # Lean: clean traffic may lift capacity up to the full profile (the planned utilisation learnt, not
        # assumed); the N+1 floor of the "lean" headroom keeps room for a lost replica.
        feedback_ceiling=1.0 / target_utilisation if lean else 1.0,
        # The burst floor's window: half the rate window (a burst the rate window halves is seen whole), at least
        # two ticks (a rate, not one scrape's noise). Its memory: the scale-down window plus a cold start, so a
        # burst recurring before a replica released after the window could be back still finds it.
        burst_window_s=max(rate_window_s / 2.0, 2.0 * tick_s),
        burst_hold_s=defaults.scale_down_stabilisation_s + cold_start_s,
        saturated_mix_after_s=rate_window_s,
        rate_window_s=rate_window_s,
        policy=PolicyConfig(
            burst_floor=burst_floor,
            headroom=_HEADROOM[sizing],
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            target_utilisation=target_utilisation,
            # A replica ordered now serves from the horizon on: plan to clear today's queue by then, not within
            # the SLO (which would order a replica per queued request that no new replica can reach in time).
            queue_drain_s=max(horizon, tick_s, 1.0),
            # Fewer than one request expected before a replica could be ready: with min_replicas 0, none is needed.
            idle_below_rps=1.0 / max(horizon, tick_s, 1.0),
            # A count only the forecast asked for is held for the forecast's own look-ahead; what the measured
            # arrivals and queue needed, for the whole scale-down window (docs/scaling.md, "Policy").
            forecast_hold_s=min(horizon, defaults.scale_down_stabilisation_s),
        ),
    )


def completion_rate(view: DeploymentView) -> float | None:
    """Requests finished per second over the rate window, summed over replicas that report it (or as Prometheus
    summed them, where the view came from the PromQL source's aggregates)."""
    if view.requests_finished_rate is not None:
        return view.requests_finished_rate
    rates = [r.requests_finished_rate for r in view.replicas if r.requests_finished_rate is not None]
    return sum(rates) if rates else None


def replica_count(view: DeploymentView) -> int:
    """The deployment's replicas: counted by Prometheus in the PromQL source's aggregates (whose ``replicas`` holds
    only the sick ones a detector must see), else the replicas in the view."""
    return view.replica_count if view.replica_count is not None else len(view.replicas)


def token_mix(view: DeploymentView) -> TokenMix | None:
    """Mean prompt and output tokens per finished request over the rate window (None when unknown)."""
    done = completion_rate(view)
    if not done or view.prompt_tokens_rate is None or view.generation_tokens_rate is None:
        return None
    prompt, output = view.prompt_tokens_rate / done, view.generation_tokens_rate / done
    if not (math.isfinite(prompt) and math.isfinite(output)):
        return None
    return TokenMix(max(prompt, 0.0), max(output, 0.0))


class WindowedHistogram:
    """The increase of replicas' cumulative histograms over the last ``window_s``, summed over replicas.

    Each replica's step from one tick to the next is `collector.rates.histogram_step` (a restarted replica's counts
    are new in full, as in Prometheus' increase()); impossible histograms are skipped as missing, and replicas whose
    bucket bounds differ from the first seen are skipped rather than mixed.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._last: dict[str, Histogram] = {}
        self._bounds: tuple[float, ...] | None = None
        # (tick, the steps' sum, each replica's step)
        self._ticks: deque[tuple[float, list[float], dict[str, tuple[float, ...]]]] = deque()

    def update(
        self, now: float, histograms: Iterable[tuple[str, Histogram | None]], skip: Container[str] = ()
    ) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """One tick's histograms; the window's sum leaves out every step of the replicas in ``skip``."""
        delta: list[float] | None = None
        steps: dict[str, tuple[float, ...]] = {}
        # Every deployment's replicas, every tick: the sums run in C (``map``), in the same order as written out, and a
        # step is its counts alone (``histogram_step`` less the Histogram). Histograms of the window's bounds all have
        # as many counts, so the maps pair every count.
        last = self._last
        for key, h in histograms:
            if h is None or validity.histogram(h) is None:
                continue
            bounds = self._bounds
            if bounds is None:
                bounds = self._bounds = h.bounds
            if h.bounds is not bounds and h.bounds != bounds:
                continue
            before = last.get(key)
            last[key] = h
            if before is None or (before.bounds is not bounds and before.bounds != bounds):
                continue  # a step needs the same bounds on both sides (``histogram_step``)
            counts = h.counts if histogram_reset(before, h) else tuple(map(operator.sub, h.counts, before.counts))
            steps[key] = counts
            delta = list(counts) if delta is None else list(map(operator.add, delta, counts))
        if delta is not None:
            self._ticks.append((now, delta, steps))
        while self._ticks and now - self._ticks[0][0] >= self.window_s:
            self._ticks.popleft()
        if not self._ticks or self._bounds is None:
            return None
        width = len(self._bounds)
        total = [0.0] * width
        for _, tick_sum, tick_steps in self._ticks:
            if skip and any(k in skip for k in tick_steps):
                kept = [c for k, c in tick_steps.items() if k not in skip]
                tick_sum = [sum(col) for col in zip(*kept, strict=True)] if kept else [0.0] * width
            total = list(map(operator.add, total, tick_sum))
        return self._bounds, tuple(total)


class _DeploymentPlanner:
    def __init__(self, key: str, config: PlannerConfig) -> None:
        self.key = key
        self.config = config
        self.forecaster: Forecaster = make(config.forecaster, **dict(config.forecaster_options))
        self.capacity = CapacityModel(config.capacity)
        self.policy = ReplicaPolicy(config.policy)
        self.feedback = SloFeedback(
            target_miss=config.slo_target_miss, settle_s=config.horizon_s, ceiling=config.feedback_ceiling
        )
        self.queue_time = WindowedHistogram(window_s=60.0)
        self.live_error = LiveMase(config.horizon_s)
        self.margin = MarginFeedback(target_miss=config.slo_target_miss, release=config.margin_release)
        self.burst = BurstPeak(config.burst_window_s, config.burst_hold_s, config.slo_ttft_s or 0.0)
        w = config.policy.scale_down_stabilisation_s
        self.rise = LoadRise(w) if w > 0 else None
        # The load's fall within a horizon of each tick (a LoadRise of the load's negative): how far it dips before a
        # replica ordered now could serve (`_release_after_fall`).
        self.fall = LoadRise(config.horizon_s) if w > 0 else None
        self.regret = ReleaseRegret(config.burst_hold_s, config.release_regret_s)
        self._slo_missed = False  # this tick's SLO reading was above its target (requests queued late)
        self._slo_read_since: float | None = None
        self._last_late_t: float | None = None
        # Whether the traffic has shown that it is not a smooth load served within the SLO: the short window's
        # service need (`BurstPeak`) asked for more replicas than the forecast and the queue (a peak the minute-scale
        # rate hides: on/off bursts), or an SLO reading was late. Until then a forecast band that is no measured share
        # (`Forecaster.band_is_share`: at a series' start, the opening's ramp) is planned for while asked and not held
        # by the scale-down window (`Demand.hold_upper_rate`); after, it is held as before. A deployment that went
        # idle after serving (`_went_idle`) is on/off traffic, rough too.
        self._rough = False
        # Whether the deployment went idle after serving (`_went_idle`): on/off traffic, whose minute-scale forecast
        # falls in every silence. The burst floor holds there, once an SLO reading was late, and until the release
        # is measured (`_release_replicas`: its rises, and a whole window of SLO readings within target); on a load
        # measured smooth and served within the SLO the forecast and the queue carry it (docs/scaling.md, "Policy").
        self._on_off = False
        self._release_measured = False
        self._arrived = False  # an arrival rate above zero was read
        self._mix: TokenMix | None = None
        self._mix_t: float | None = None
        # The share of the smoothing's full weight (a half-life's exponential window) that the readings fill:
        # 1 - 0.5^(seconds of service read / half-life); 1 where the first reading stands for all of it.
        self._mix_evidence = 1.0
        self._serving_since: float | None = None  # the first tick with a replica ready, until a mix is believed
        self._seen_arrival = False
        self._saturated_since: float | None = None
        # The mix read under saturation while no mix is believed yet: a fleet overloaded from its first tick never
        # reaches a steady state, so without it a profile would have nothing to turn into requests/s, ever.
        self._mix_under_saturation: TokenMix | None = None
        self.first_tokens = PromptPerFirstToken(config.saturated_mix_after_s or 60.0)
        # Replica → (its finished requests at the last tick, the count at which its stranded backlog is served).
        self._stranded_until: dict[str, tuple[float, float]] = {}

    def _observe_mix(self, now: float, mix: TokenMix | None, ready: int) -> TokenMix | None:
        """The believed mix: an exponentially weighted mean of the readings, half-life ``mix_half_life_s``.

        By default it is seeded with its first reading, which then weighs as all the history the half-life holds
        (H / ln 2, ~866 s at 600 s) however few seconds its window covered. With ``mix_evidence_weighted`` the first
        reading weighs 1 - 0.5^(s / H) of that, s the seconds of service its rate window holds (since a replica was
        first ready, at most the window); each later reading weighs 1 - 0.5^(gap / H) and what was read before
        decays by 0.5^(gap / H), so once the readings fill the half-life this is the same smoothing, reading for
        reading."""
        if self._mix is None:
            if ready <= 0:
                self._serving_since = None
            elif self._serving_since is None:
                self._serving_since = now
        if mix is None:
            return self._mix
        half_life = self.config.mix_half_life_s
        if self._mix is None or self._mix_t is None:
            self._mix, self._mix_evidence = mix, 1.0
            if self.config.mix_evidence_weighted:
                window = self.config.rate_window_s
                since = self._serving_since
                served = window if since is None else min(max(now - since, 0.0), window)
                self._mix_evidence = 1.0 - 0.5 ** (served / half_life)
        else:
            q = 0.5 ** (max(now - self._mix_t, 0.0) / half_life)
            if self._mix_evidence >= 1.0:
                a = 1.0 - q
            else:  # the readings do not fill the half-life yet: the new one against what they hold
                kept = q * self._mix_evidence
                a = (1.0 - q) / (kept + 1.0 - q) if kept + 1.0 - q > 0 else 0.0
                self._mix_evidence = kept + 1.0 - q
            self._mix = TokenMix(
                self._mix.prompt_tokens + a * (mix.prompt_tokens - self._mix.prompt_tokens),
                self._mix.output_tokens + a * (mix.output_tokens - self._mix.output_tokens),
            )
        self._mix_t = now
        return self._mix

    def _mix_reading(
        self,
        now: float,
        view: DeploymentView,
        arrival: float | None,
        saturated: bool,
        prompt_per_first_token: float | None = None,
    ) -> TokenMix | None:
        """The mix this tick's counters show, where they can be believed.

        Tokens per finished request read the mix in a steady state. While the load rises or falls, or as a queue
        builds, prefill runs ahead of (or behind) completions and the ratio misstates it. But a fleet saturated by
        a heavier mix is where the mix matters most: with the rate and the mix stepping together (ServeGen's
        600 s windows) a mix read only when steady stayed at the light one through the whole overload, and the
        planner sized for requests a third cheaper than those queueing. So once the fleet has been saturated for
        ``saturated_mix_after_s`` — its counters' window filled from full batches, where admissions keep pace with
        completions — the reading counts, heavier components only: a reading that overstates costs replicas for a
        while, one that understates would cost the SLO. A burst's first seconds (Azure code's on/off minutes)
        never count."""
        if not saturated:
            self._saturated_since = None
            done = completion_rate(view)
            steady = done is not None and arrival is not None and abs(arrival - done) <= 0.2 * arrival
            return token_mix(view) if steady else None
        if self._saturated_since is None:
            self._saturated_since = now
        after = self.config.saturated_mix_after_s
        if after <= 0 or now - self._saturated_since < after:
            return None
        seen = token_mix(view)
        if seen is None:
            return None
        if self._mix is None:
            # Nothing believed to be heavier than: the latest such reading sizes capacity (`_capacity_mix`) until a
            # mix is believed, and is never kept as the mix. A fleet that has only ever been saturated is filling
            # from empty: it has prefilled more requests than it finished, so prompt tokens per finished request
            # read heavy (28,655 at Mooncake ×8's first minute, then ~11,000 as completions caught up, and the
            # fleet sized for the first: 2 → 52). Its prompt is read per request that reached its first token,
            # where every replica's counters are seen (`PromptPerFirstToken`). Output tokens per finished request
            # still err heavy while long answers are running: that costs replicas, not the SLO.
            prompt = seen.prompt_tokens if prompt_per_first_token is None else prompt_per_first_token
            self._mix_under_saturation = TokenMix(prompt, seen.output_tokens)
            return None
        return TokenMix(
            max(seen.prompt_tokens, self._mix.prompt_tokens), max(seen.output_tokens, self._mix.output_tokens)
        )

    def _went_idle(self, view: DeploymentView, arrival: float) -> bool:
        """Whether the deployment, having had arrivals, now has none over the rate window and none in flight: on/off
        traffic (Azure code's silences between bursts). There the forecast band's first changes are the jump out of
        a silence, the shape the workload repeats, not a smooth load's opening ramp: the window holds it (`_rough`).
        Nothing in flight as well, so that a dip of the engines' estimate (finished + change in flight) while a
        replica leaves is not read as a silence."""
        if not self._arrived or arrival > 0.0:
            return False
        return view.requests_running == 0.0 and view.requests_waiting == 0.0

    def _capacity_mix(self, mix: TokenMix | None) -> TokenMix | None:
        """The mix a profile is asked about: the believed one, else the last one read under saturation (a fleet
        overloaded from the start), else none (hold, not guess)."""
        return mix if mix is not None else self._mix_under_saturation

    def _saturated(self, view: DeploymentView, queue: float | None, serving: int) -> bool:
        """At least a request waiting per serving replica, leaving out the replicas found serving a stranded
        backlog at the last tick (`_stranded_replicas`) with their queues: such a queue keeps its replica busy, not
        the others, which take the new arrivals (Mooncake ×8: two replicas held 4,600 requests beside 40 with
        none, and the fleet's counters, read as saturated, sized it from the few prompts those two admitted)."""
        stranded = [
            r.sample.requests_waiting or 0.0
            for r in view.replicas
            if r.key in self._stranded_until and r.ready and not making_no_progress(r)
        ]
        return (queue or 0.0) - sum(stranded) >= max(serving - len(stranded), 1)

    def _stranded_replicas(self, view: DeploymentView, capacity_rps: float | None) -> set[str]:
        """Replicas that hold, or still serve, a backlog beyond what they drain by the horizon at the capacity
        planned with: from such a tick until their finished-requests counter passes what they had finished, were
        running and held then (a replica serves its queue first come, first served). A restart, or a replica gone,
        ends it."""
        marks, self._stranded_until = self._stranded_until, {}
        drained = (
            None if capacity_rps is None else capacity_rps * self.feedback.multiplier * self.config.policy.queue_drain_s
        )
        for r in view.replicas:
            s = r.sample
            finished = s.requests_finished
            if finished is None:
                continue
            mark = marks.get(r.key)
            if mark is not None and finished < mark[0]:  # restarted: its queue went with it
                mark = None
            if drained is not None and r.ready and (s.requests_waiting or 0.0) > drained:
                held = finished + (s.requests_waiting or 0.0) + (s.requests_running or 0.0)
                mark = (finished, max(held, mark[1] if mark else 0.0))
            if mark is not None and finished < mark[1]:
                self._stranded_until[r.key] = (finished, mark[1])
        return set(self._stranded_until)

    def _corrected_capacity(
        self, now: float, view: DeploymentView, mix: TokenMix | None, arrival: float | None, serving: int
    ) -> float | None:
        """Requests/s a serving replica sustains for this mix, corrected by what the SLO showed (`SloFeedback`);
        the SLO's misses also feed the adaptive margin. None while unknown."""
        cfg = self.config
        # A profile turns a mix into requests/s; until a mix was read there is nothing to turn (hold, not guess).
        if self.capacity.source == "profile":
            mix = self._capacity_mix(mix)
        capacity_rps = (
            None
            if mix is None and self.capacity.source == "profile"
            else self.capacity.requests_per_s(mix, view.prefix_hit_ratio)
        )
        # A replica's backlog beyond what it drains by the horizon waits for it whatever the fleet's size: its
        # queue times, until it has finished what it held, are a backlog's that predates the fleet being enough,
        # no evidence about capacity (Mooncake ×8 in the demo: two replicas held ~2,300 requests each from the
        # first minute, and cuts for their misses took the fleet from 52 to 98 replicas while the others idled).
        stranded = self._stranded_replicas(view, capacity_rps)
        queued = (
            (view.queue_time_window.bounds, view.queue_time_window.counts)  # already an increase, by Prometheus
            if view.queue_time_window is not None
            else self.queue_time.update(now, [(r.key, r.sample.queue_time) for r in view.replicas], skip=stranded)
        )
        # Only a fleet that, by the capacity model, was serving enough replicas for what arrived can prove the
        # model wrong: queueing while too few replicas serve (still loading after a forecast's timing miss) says
        # nothing about capacity, and cutting it then would keep paying for idle replicas long after (seen at
        # ServeGen's 600 s rate steps).
        enough = (
            capacity_rps is not None
            and arrival is not None
            and self.policy.enough(serving, arrival, capacity_rps * self.feedback.multiplier)
        )
        settled = serving > 0 and enough
        if cfg.slo_ttft_s is not None and serving > 0:
            ttft = view.ttft_window
            missed = None if ttft is None else share_above(ttft.bounds, ttft.counts, cfg.slo_ttft_s)
            late, requests = None, 0.0
            if queued is not None:
                # Load shows as queueing: a request that waited a share of its TTFT budget before its prefill began
                # was delayed by too little capacity (a long prompt that misses the SLO on an idle replica was
                # not). Only when first tokens miss the SLO too: a long-prompt workload queues a little at the
                # right size.
                bounds, counts = queued
                late, requests = share_above(bounds, counts, cfg.slo_ttft_s * cfg.queue_budget_share), counts[-1]
                if late is not None and missed is not None:
                    late = min(late, missed)
                if late is not None and requests >= self.feedback.min_requests:
                    self._slo_read_since = now if self._slo_read_since is None else self._slo_read_since
                    if late > cfg.slo_target_miss:
                        self._last_late_t = now
                        self._slo_missed = True
                if settled:
                    self.feedback.update(now, late, requests, serving)
            # The margin answers every miss, settled or not (a fleet short of its forecast was short of margin);
            # where no engine reports queue time, first tokens late are the misses.
            if late is None and ttft is not None:
                late, requests = missed, ttft.counts[-1]
            self.margin.update(now, late, requests)
        if capacity_rps is not None:
            capacity_rps *= self.feedback.multiplier
        return capacity_rps

    def _release_replicas(
        self, now: float, arrival: float | None, queue: float | None, capacity_rps: float | None
    ) -> int | None:
        """The replicas (at full capacity, stuck ones not counted) a scale-down must still hold: today's load
        (arrivals and queue) plus the rise within the scale-down window that the measured load exceeded in only the
        SLO's share of ticks (`LoadRise`), and, once that load needs more than one replica, never fewer than carry it
        with one replica lost for a cold start (`release_replicas`: the spare an XID 79, a hung GPU or an evicted
        pod needs until its replacement serves). None while unknown, or before a whole window of SLO readings
        within target: the whole scale-down window holds."""
        if self.rise is None or arrival is None or capacity_rps is None or capacity_rps <= 0:
            return None
        load = (arrival + (queue or 0.0) / self.config.policy.queue_drain_s) / capacity_rps
        self.rise.observe(now, load)
        margin = self.rise.margin(self.config.slo_target_miss)
        window = self.config.policy.scale_down_stabilisation_s
        clean_since = self._slo_read_since if self._last_late_t is None else self._last_late_t
        if margin is None or clean_since is None or now - clean_since < window:
            return None
        return release_replicas(load, margin)

    def _release_after_fall(
        self, now: float, arrival: float | None, queue: float | None, capacity_rps: float | None, release: int | None
    ) -> int | None:
        """What the release would hold were today's load to fall as far as it did within a horizon (before a replica
        ordered now serves) in all but the SLO's share of the measured ticks, its rise read as ever: the order outlasts
        the load's fall as the release outlasts its rise. A replica ordered above it could be let go before serving
        (`ReplicaPolicy._within_release`). None while the release (``release``) is not measured, on rough traffic
        (`_rough`: peaks the minute's load does not show), or before the falls are measured as the rises are."""
        if self.rise is None or self.fall is None or arrival is None or capacity_rps is None or capacity_rps <= 0:
            return None
        load = (arrival + (queue or 0.0) / self.config.policy.queue_drain_s) / capacity_rps
        self.fall.observe(now, -load)
        fall = self.fall.margin(self.config.slo_target_miss)
        rise = self.rise.margin(self.config.slo_target_miss)
        if release is None or self._rough or fall is None or rise is None:
            return None
        return release_replicas(max(load - fall, 0.0), rise)

    def _floor_holds(self) -> bool:
        """Whether the burst floor holds: on on/off traffic (the deployment went idle after serving), once an SLO
        reading was late, and while the traffic is not yet measured (no release measured yet). A load measured smooth
        and served within the SLO is carried by the forecast and the queue."""
        return self._on_off or self._last_late_t is not None or not self._release_measured

    def _burst_rate(self, now: float, peak: float | None) -> float | None:
        """The rate the burst floor holds: the highest service need of the last ``burst_hold_s`` (`BurstPeak`: the
        least rate under which none of a run of ticks' arrivals waits past the SLO, a rate-latency bound that sees
        a 5 s clump whole), where the SLO is known; else the short window's peak, allowed the SLO's wait."""
        cfg = self.config
        if cfg.slo_ttft_s:
            return self.burst.need_since(now - cfg.burst_hold_s)
        return None if peak is None else burst_need(peak, cfg.burst_window_s, 0.0)

    def _regret_floor(self, now: float, current: int, capacity_rps: float | None) -> int | None:
        """The count a release proven wrong released from, while held (`ReleaseRegret`): judged on this tick's SLO
        reading and the replicas, at the capacity planned with, that the arrivals of the SLO reading's window needed
        for none to wait past the SLO (`BurstPeak.need_since`). None while off or none is held."""
        cfg = self.config
        if cfg.release_regret_s <= 0 or cfg.slo_ttft_s is None:
            return None
        rate = self.burst.need_since(now - self.queue_time.window_s)
        need = None if rate is None or capacity_rps is None or capacity_rps <= 0 else rate / capacity_rps
        return self.regret.judge(now, current, need, self._slo_missed, capacity_rps)

    def _capacity_note(self, now: float, rec: Recommendation, mix: TokenMix | None, capacity_rps: float | None) -> str:
        """The recommendation's message, saying where a profile's mix came from when it is not a believed one: why
        it holds without one, or that it sized from the mix read under saturation."""
        if self.capacity.source != "profile" or mix is not None:
            return rec.message
        first = self._mix_under_saturation
        if first is not None and capacity_rps is not None:
            return (
                f"{rec.message}; capacity {capacity_rps:.2f} requests/s a replica from the serving profile at the mix "
                f"read under saturation ({first.prompt_tokens:.0f} prompt, {first.output_tokens:.0f} output tokens a "
                "request): no steady state yet to read one in"
            )
        if rec.reason != "no_capacity":
            return rec.message
        after = self.config.saturated_mix_after_s
        if self._saturated_since is not None and after > 0:
            saturated_s = now - self._saturated_since
            when = f"is read after {after:.0f} s" if saturated_s < after else "finished no request to read it from"
            return (
                "capacity per replica is unknown yet: the serving profile needs the token mix, and the fleet, "
                f"saturated for {saturated_s:.0f} s, {when}; holding"
            )
        read = "in a steady state (arrivals within 20 % of completions)" + (" or under saturation" if after > 0 else "")
        return f"capacity per replica is unknown yet: the serving profile needs the token mix, read {read}; holding"

    def _numbers(
        self,
        view: DeploymentView,
        forecast: Forecast,
        arrival: float | None,
        capacity_rps: float | None,
        queue: float | None,
        stuck: int,
        rec: Recommendation,
    ) -> dict[str, float]:
        """What a decision tells beside its count (the API's, /metrics' and the backtest's numbers)."""
        cfg = self.config
        numbers = {
            "arrival_rate": forecast.point,
            "arrival_rate_upper": forecast.upper,
            "horizon_s": cfg.horizon_s,
            "arrival_rate_now": arrival if arrival is not None else math.nan,
            "queue": view.requests_waiting if view.requests_waiting is not None else math.nan,
            "capacity_rps": capacity_rps if capacity_rps is not None else math.nan,
            "forecast_fallbacks": float(self.forecaster.fallbacks),
            "capacity_multiplier": self.feedback.multiplier,
            "stuck_replicas": float(stuck),
            "stranded_requests": (view.requests_waiting or 0.0) - (queue or 0.0),
        }
        if cfg.policy.headroom == "adaptive":
            numbers["margin_scale"] = self.margin.scale
        if rec.burst_floor_replicas is not None:
            numbers["burst_floor_replicas"] = float(rec.burst_floor_replicas)
        mase = self.live_error.value()
        if mase is not None:
            numbers[f"mase_{cfg.forecaster}"] = mase
        return numbers

    def decide(
        self,
        view: DeploymentView,
        now: float,
        current_replicas: int | None,
        arrival_rate: float | None = None,
        arrivals_total: float | None = None,
    ) -> Decision:
        cfg = self.config
        current = replica_count(view) if current_replicas is None else current_replicas
        # The gateway's request counter, where there is one, beats the engines' estimate (finished + Δqueue),
        # which lurches while replicas join and leave.
        arrival = view.arrival_rate if arrival_rate is None else arrival_rate
        if arrival is not None:
            self.forecaster.observe(now, arrival)
            self._seen_arrival = True
            idle = self._went_idle(view, arrival)
            self._on_off = self._on_off or idle
            self._rough = self._rough or idle
            self._arrived = self._arrived or arrival > 0.0
        # A replica that makes no progress is neither capacity nor a source of servable queue: counting it would
        # read its ever-growing queue as saturation and learn a capacity far below what the others sustain.
        queue = servable_queue(view)
        stuck = sum(1 for r in view.replicas if making_no_progress(r))
        serving = view.ready_replicas - stuck
        saturated = self._saturated(view, queue, serving)
        prompt_per_first_token = self.first_tokens.update(now, _prompt_and_first_tokens(view))
        if view.replica_count is not None:  # Prometheus' sums: the view names only the sick replicas
            prompt_per_first_token = None
        mix = self._observe_mix(
            now, self._mix_reading(now, view, arrival, saturated, prompt_per_first_token), view.ready_replicas
        )
        self.capacity.observe(
            ready_replicas=serving,
            requests_waiting=queue,
            completion_rate=completion_rate(view),
            mix=mix,
            prompt_tokens_rate=view.prompt_tokens_rate,
            generation_tokens_rate=view.generation_tokens_rate,
        )
        # Scaled to zero with no gateway counter, nothing arrives that a replica could see: the forecaster still
        # predicts from the history it has, one horizon past now rather than past its last reading (which would
        # look at the same moment for ever), so a daily pattern wakes the deployment one horizon ahead. Nothing is
        # made up for the unread hours. Only at zero: with replicas a missing reading is an outage, and a trend
        # carried across it would scale on demand nobody measured.
        if arrival is None and current == 0:
            forecast = self.forecaster.predict_from(now, cfg.horizon_s)
        else:
            forecast = self.forecaster.predict(cfg.horizon_s)
        tail = self.forecaster.tail_margin(cfg.horizon_s, cfg.slo_target_miss)
        forecast_known = arrival is not None or self._seen_arrival
        self.live_error.record(now, arrival, forecast.point)
        self._slo_missed = False
        capacity_rps = self._corrected_capacity(now, view, mix, arrival, serving)
        # What more replicas can relieve: each replica's queue up to what it alone drains by the horizon.
        drainable = queue if capacity_rps is None else drainable_queue(view, capacity_rps * cfg.policy.queue_drain_s)
        peak = self.burst.update(now, _arrival_counters(view), arrivals_total)
        release_replicas = self._release_replicas(now, arrival, drainable, capacity_rps)
        self._release_measured = self._release_measured or release_replicas is not None
        release_after_fall = self._release_after_fall(now, arrival, drainable, capacity_rps, release_replicas)
        regret_floor = self._regret_floor(now, current - stuck, capacity_rps)
        # Blind: a replica whose load is not read at all. One that reports its batch but has no queue series (TensorRT-
        # LLM behind Triton before its "waiting" category) is measured: its queue is unknown, not hidden load.
        blind = sum(
            1
            for r in view.replicas
            if not r.ready or (r.sample.requests_waiting is None and r.sample.requests_running is None)
        )
        # Replicas still loading are expected to be blind; only count those beyond the ones we know are new.
        blind = max(0, blind - max(0, current - view.ready_replicas))
        burst_rate = self._burst_rate(now, peak)
        hold_upper = (
            max(0.0, forecast.point)
            if forecast_known and not self._rough and not self.forecaster.band_is_share(cfg.horizon_s)
            else None
        )
        rec = self.policy.recommend(
            Demand(
                current_replicas=current,
                ready_replicas=serving,
                capacity_rps=capacity_rps,
                arrival_rate=arrival,
                forecast_upper_rate=(
                    max(0.0, forecast.point + cfg.upper_weight * (forecast.upper - forecast.point))
                    if forecast_known
                    else None
                ),
                requests_waiting=drainable,
                replicas_without_metrics=blind,
                stuck_replicas=stuck,
                forecast_rate=max(0.0, forecast.point) if forecast_known else None,
                margin_scale=self.margin.scale,
                burst_rate=burst_rate if self._floor_holds() else None,
                forecast_tail_rate=(
                    max(0.0, forecast.point + tail)
                    if forecast_known and tail is not None and not forecast.fallback
                    else None
                ),
                release_replicas=release_replicas,
                regret_floor=regret_floor,
                hold_upper_rate=hold_upper,
                release_after_fall=release_after_fall,
            ),
            now=now,
        )
        if not self._rough and burst_rate is not None and capacity_rps is not None and capacity_rps > 0:
            # In replicas at full capacity, as the burst floor counts it (`ReplicaPolicy._burst_replicas`), whether the
            # floor is on or not: a need above both parts of the count is a peak the minute-scale rate hid.
            self._rough = burst_rate / capacity_rps - 1e-9 > max(
                rec.predictive_replicas or 0, rec.reactive_replicas or 0
            )
        self._rough = self._rough or self._last_late_t is not None
        if cfg.release_regret_s > 0:
            # In serving replicas, as judged and as held (the policy puts the stuck ones on top of both): counted
            # with them, a release made while one was stuck would hold one too many for the hour, and judge a fleet
            # whose stuck replica was counted in the release's count but not in the fleet's.
            self.regret.released(now, max(0, current - stuck), max(0, rec.desired_replicas - stuck))
        numbers = self._numbers(view, forecast, arrival, capacity_rps, drainable, stuck, rec)
        return Decision(
            deployment=self.key,
            timestamp=now,
            current_replicas=current,
            ready_replicas=serving,
            desired_replicas=rec.desired_replicas,
            warm_pool=rec.warm_pool,
            reason=rec.reason,
            message=self._capacity_note(now, rec, mix, capacity_rps),
            predictive_replicas=rec.predictive_replicas,
            reactive_replicas=rec.reactive_replicas,
            forecast=numbers,
        )


def _arrival_counters(view: DeploymentView) -> list[tuple[str, float | None, float | None]]:
    """Each replica's finished-requests counter and requests in flight, for `BurstPeak` (missing ones as None)."""
    out: list[tuple[str, float | None, float | None]] = []
    for r in view.replicas:
        s = r.sample
        flight = (
            None
            if s.requests_waiting is None or s.requests_running is None
            else s.requests_waiting + s.requests_running
        )
        out.append((r.key, s.requests_finished, flight))
    return out


def _prompt_and_first_tokens(view: DeploymentView) -> list[tuple[str, float | None, float | None]]:
    """Each replica's prompt-token counter and first tokens so far (its TTFT histogram's count), for
    `PromptPerFirstToken` (missing ones as None)."""
    return [
        (r.key, r.sample.prompt_tokens, None if r.sample.ttft is None else r.sample.ttft.count) for r in view.replicas
    ]


def making_no_progress(replica: ReplicaView) -> bool:
    """Ready, holding requests, yet neither generating tokens nor finishing requests over the rate window: a hung
    GPU or a wedged engine. Unknown rates never count as stuck."""
    running = replica.sample.requests_running or 0.0
    return (
        replica.ready
        and running > 0
        and replica.generation_tokens_rate == 0.0
        and replica.requests_finished_rate == 0.0
    )


def servable_queue(view: DeploymentView) -> float | None:
    """The deployment's waiting requests that more replicas could serve. The queue of a replica that makes no
    progress drains only when that replica is fixed or restarted (the stuck_gpu finding's business): counting it
    as demand would scale the deployment to its maximum for requests no new replica will ever see."""
    if view.requests_waiting is None:
        return None
    stuck = sum(r.sample.requests_waiting or 0.0 for r in view.replicas if making_no_progress(r))
    return max(0.0, view.requests_waiting - stuck)


def _serving_queues(view: DeploymentView) -> list[float]:
    """The waiting requests of each serving replica (ready and making progress) that the view names."""
    return [r.sample.requests_waiting or 0.0 for r in view.replicas if r.ready and not making_no_progress(r)]


def stranded_excess(view: DeploymentView, drained_per_replica: float) -> float:
    """Requests queued on serving replicas beyond ``drained_per_replica`` each (what one replica drains by the
    horizon). vLLM's waiting queue is per engine and the router dispatches on arrival: a replica's queue is served
    by that replica alone, so what it holds past what it drains by the time a new replica could serve still waits
    for it, however many replicas are added."""
    return sum(max(0.0, w - drained_per_replica) for w in _serving_queues(view))


def drainable_queue(view: DeploymentView, drained_per_replica: float) -> float | None:
    """The servable queue (`servable_queue`) less its `stranded_excess`: a replica's queue can occupy at most that
    replica, so it asks for at most one replica's worth of capacity by the horizon. A queue no replica reports (a
    router's, or Prometheus' sum beyond the replicas the view names) can go to any replica and counts whole."""
    queue = servable_queue(view)
    if queue is None:
        return None
    return max(0.0, queue - stranded_excess(view, drained_per_replica))


@dataclass(frozen=True, slots=True)
class DeploymentLimits:
    """What the rollout stage needs of a deployment's planner: how long a new replica takes to serve, and how many
    replicas it may have (``None``: no ceiling)."""

    cold_start_s: float
    max_replicas: int | None


class Planner:
    """Decides every deployment in a FleetState; remembers per-deployment models between ticks."""

    def __init__(self, config: PlannerConfig | None = None, *, overrides: Mapping[str, PlannerConfig] = {}) -> None:
        self.config = config or PlannerConfig()
        self.overrides = dict(overrides)
        self._planners: dict[str, _DeploymentPlanner] = {}

    def limits(self, key: str) -> DeploymentLimits:
        """The deployment's cold start and replica ceiling, as its configuration sets them."""
        config = self.overrides.get(key, self.config)
        return DeploymentLimits(cold_start_s=config.cold_start_s, max_replicas=config.policy.max_replicas)

    def warm(self, key: str, t: float, arrival_rate: float) -> None:
        """Feed one stored arrival rate (requests/s at ``t``) to the deployment's forecaster: the history restored
        at start, so that the first forecasts after a restart are not blind (a deployment restored at zero
        replicas, where nothing is read, forecasts from this history instead of deciding ``no_metrics``)."""
        planner = self.planner_for(key)
        planner.forecaster.warm(t, arrival_rate, planner.config.horizon_s)
        planner._seen_arrival = True

    def capacity(self, key: str) -> tuple[float, str] | None:
        """What one replica of the deployment sustains at the reference mix (requests/s) and where that comes from
        (``CapacityModel.source``); None while unknown."""
        model = self.planner_for(key).capacity
        rps = model.requests_per_s()
        return None if rps is None else (rps, model.source)

    def planner_for(self, key: str) -> _DeploymentPlanner:
        planner = self._planners.get(key)
        if planner is None:
            planner = _DeploymentPlanner(key, self.overrides.get(key, self.config))
            self._planners[key] = planner
        return planner

    def forget(self, key: str) -> None:
        """Drop a deleted deployment's models (forecaster, capacity, stabilisation history)."""
        self._planners.pop(key, None)

    def decide(
        self,
        state: FleetState,
        now: float,
        *,
        current_replicas: Mapping[str, int] | None = None,
        arrival_rates: Mapping[str, float] | None = None,
        arrivals_totals: Mapping[str, float] | None = None,
    ) -> list[Decision]:
        """One Decision per deployment, sorted by key. ``current_replicas``: counts from the scale subresource
        (replicas still loading have no metrics yet); by default the replicas the collector knows of. A
        deployment named there but absent from the fleet (scaled to zero, or every pod still loading) is decided
        too, on its own history, the gateway's rate and the count given. ``arrival_rates``: requests/s from the
        gateway or router, where it exports them; by default the engines' estimate in FleetState.
        ``arrivals_totals``: the same gateway's cumulative request counts, for the burst floor's short window; by
        default the engines' counters."""
        counts, rates, totals = current_replicas or {}, arrival_rates or {}, arrivals_totals or {}
        views = dict(state.deployments())
        for key in counts:
            if key not in views:
                views[key] = empty_view(key)
        return [
            self.planner_for(key).decide(view, now, counts.get(key), rates.get(key), totals.get(key))
            for key, view in sorted(views.items())
        ]


def empty_view(key: str) -> DeploymentView:
    """A deployment with no replica the collector can see."""
    namespace, _, name = key.partition("/")
    return DeploymentView(
        key=key,
        namespace=namespace,
        name=name,
        replicas=(),
        ready_replicas=0,
        requests_waiting=None,
        requests_running=None,
        kv_usage_mean=None,
        kv_usage_max=None,
        arrival_rate=None,
        prompt_tokens_rate=None,
        generation_tokens_rate=None,
        prefix_hit_ratio=None,
        preemptions_rate=None,
        ttft_window=None,
    )
