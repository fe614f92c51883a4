"""What a deployment costs: GPU type and count per replica, dollars per hour and per million output tokens, and an
advisory answer to "would another GPU type meet the SLO for less?" from per-type serving profiles.

Pure: no clock, no I/O. The GPU type comes from settings where the operator named it, else from the GPU exporter
(dcgm-exporter's ``modelName``, NVML's name) of the replicas' joined GPUs; a deployment with neither says so instead
of guessing a price. See docs/cost.md.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from collector.samples import TargetInfo
from collector.state import DeploymentView
from scaler.capacity import ServingProfile, TokenMix


@dataclass(frozen=True, slots=True)
class GpuPrice:
    """One GPU type: what one GPU costs per hour, and what it draws at full load (board power)."""

    price_per_hour_usd: float
    power_w: float

    def __post_init__(self) -> None:
        for label, v in (("price_per_hour_usd", self.price_per_hour_usd), ("power_w", self.power_w)):
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"GPU price: {label} must be a finite number > 0, got {v!r}")


# Defaults, per GPU, overridable in settings (`cost.gpus`). Prices: RunPod's Secure Cloud on-demand rates per GPU-hour
# (runpod.io/pricing), as listed in deploybase.ai/articles/runpod-gpu-pricing (2026-03-10: L4 $0.44, A100 SXM 80GB
# $1.39, H100 SXM $2.69, H200 $3.59) and, for the H100 SXM, spheron.network/blog/runpod-h100-pricing-2026
# (2026-05-22: Secure Cloud SXM5 ~$2.69/h). One provider's list price, so the four types compare on one footing;
# hyperscalers charge more (AWS p5.48xlarge $98.32/h for 8 H100, $12.29 per GPU, as quoted by
# computespec.pages.dev/learn/pricing/cloud-gpu-pricing-explained) and reservations less: set your own.
# Power: NVIDIA datasheet maximum board power (the same figures as simulator/profile.py): H100 SXM5 700 W
# (nvidia.com/en-us/data-center/h100/), H200 SXM up to 700 W (nvidia.com/en-us/data-center/h200/), A100 SXM4 80 GB
# 400 W (nvidia.com/en-us/data-center/a100/), L4 72 W (nvidia.com/en-us/data-center/l4/).
DEFAULT_GPU_PRICES: dict[str, GpuPrice] = {
    "H100": GpuPrice(2.69, 700.0),
    "H200": GpuPrice(3.59, 700.0),
    "A100": GpuPrice(1.39, 400.0),
    "L4": GpuPrice(0.44, 72.0),
}
# A cheaper type is recommended only when it saves at least this share: profiles are models (5-30 % residuals,
# docs/simulator.md), so a smaller difference is inside their error.
DEFAULT_RECOMMEND_MARGIN = 0.10


def gpu_type_of(name: str | None, known: Iterable[str]) -> str | None:
    """The known GPU type a product name names, as a whole word, case-insensitive and longest first: dcgm's
    ``modelName`` "NVIDIA H100 80GB HBM3" and the node label ``nvidia.com/gpu.product`` "NVIDIA-H100-80GB-HBM3" are
    "H100"; "NVIDIA L40S" is not "L4". None when no known type matches."""
    if not name:
        return None
    return _gpu_type_in(name, tuple(known))


@functools.lru_cache(maxsize=1024)
def _gpu_type_in(name: str, known: tuple[str, ...]) -> str | None:
    """``gpu_type_of`` worked out once per product name and list of types: the cost stage asks it for every GPU of
    every replica each tick (8,100 asks a tick at 1,000 targets, ~30 ms of regular expressions), of a few names."""
    for gpu_type in sorted(known, key=len, reverse=True):
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(gpu_type)}(?![A-Za-z0-9])", name, flags=re.IGNORECASE):
            return gpu_type
    return None


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    """What the operator says a deployment runs on; unset fields are read from the GPU exporter."""

    gpu_type: str | None = None
    gpus_per_replica: int | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """One way to serve a model: a GPU type, how many GPUs one replica takes, and what such a replica does."""

    gpu_type: str
    gpus_per_replica: int
    profile: ServingProfile
    max_model_len: int | None = None  # the longest prompt + output a replica accepts


@dataclass(frozen=True, slots=True)
class GpuOption:
    """Serving the observed demand on one GPU type, per its profile."""

    gpu_type: str
    gpus_per_replica: int
    replicas: int
    usd_per_hour: float
    meets_slo: bool
    why: str  # what was checked, or what fails

    def to_json(self) -> dict[str, object]:
        return {
            "gpu_type": self.gpu_type,
            "gpus_per_replica": self.gpus_per_replica,
            "replicas": self.replicas,
            "usd_per_hour": round(self.usd_per_hour, 4),
            "meets_slo": self.meets_slo,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Advisory only: every profiled option at the observed mix, and the cheaper type when one saves enough."""

    current: GpuOption | None
    options: tuple[GpuOption, ...]
    recommended: GpuOption | None
    message: str


@dataclass(frozen=True, slots=True)
class CostConfig:
    gpus: Mapping[str, GpuPrice] = field(default_factory=lambda: dict(DEFAULT_GPU_PRICES))
    default: GpuAssignment = GpuAssignment()
    deployments: Mapping[str, GpuAssignment] = field(default_factory=dict)  # key "namespace/name"
    # model name (lower case) -> the ways it can be served, one per GPU type (from calibrated profiles)
    candidates: Mapping[str, tuple[Candidate, ...]] = field(default_factory=dict)
    target_utilisation: float = 0.8  # the planner's: replicas are planned at this share of saturated throughput
    slo_ttft_s: float | None = None
    recommend_margin: float = DEFAULT_RECOMMEND_MARGIN
    # per pool of every disaggregated deployment ("prefill", "decode"): after the key's and its deployment's entries
    pools: Mapping[str, GpuAssignment] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.target_utilisation <= 1:
            raise ValueError(f"cost: target_utilisation must be in (0, 1], got {self.target_utilisation!r}")
        if not 0 <= self.recommend_margin < 1:
            raise ValueError(f"cost: recommend_margin must be in [0, 1), got {self.recommend_margin!r}")
        for where, a in (("default", self.default), *self.deployments.items(), *self.pools.items()):
            if a.gpu_type is not None and a.gpu_type not in self.gpus:
                raise ValueError(
                    f"cost: {where}: GPU type {a.gpu_type!r} has no price (known: {', '.join(sorted(self.gpus))})"
                )
            if a.gpus_per_replica is not None and a.gpus_per_replica < 1:
                raise ValueError(f"cost: {where}: gpus_per_replica must be >= 1, got {a.gpus_per_replica}")

    def for_deployment(self, key: str) -> GpuAssignment:
        """Field by field, the first set of: the key's own entry (a pool's, ``namespace/name@prefill``), its
        deployment's (``namespace/name``), its pool's (``pools[prefill]``), the default; so prefill and decode
        pools can name different GPUs."""
        name, _, pool = key.partition("@")
        layers = [self.deployments.get(key), self.deployments.get(name), self.pools.get(pool) if pool else None]
        layers.append(self.default)
        found = [a for a in layers if a is not None]
        return GpuAssignment(
            next((a.gpu_type for a in found if a.gpu_type is not None), None),
            next((a.gpus_per_replica for a in found if a.gpus_per_replica is not None), None),
        )


@dataclass(frozen=True, slots=True)
class DeploymentCost:
    deployment: str  # "namespace/name"
    pool: str | None  # a pool of a disaggregated deployment (prefill/decode); None: the whole deployment
    gpu_type: str | None
    gpu_type_source: str  # "settings" | "pod spec" | "gpu exporter" | "unknown"
    gpus_per_replica: int
    gpus_per_replica_source: str  # "settings" | "pod spec" | "gpu exporter" | "assumed"
    replicas: int  # every replica holding GPUs, loading ones included
    price_per_gpu_hour_usd: float | None
    usd_per_hour: float | None  # None: the GPU type is unknown (see `problem`)
    usd_per_million_tokens: float | None  # per million output tokens at the current generation rate
    power_w: float | None  # at full load, the replicas' GPUs together
    problem: str | None = None
    recommendation: Recommendation | None = None


def deployment_cost(
    view: DeploymentView, config: CostConfig, pool: str | None = None, discovered: GpuAssignment | None = None
) -> DeploymentCost:
    """Cost of one deployment (or pool) now: replicas × GPUs per replica × price of its GPU type. The type and count
    come from settings, else what its pods ask the scheduler for (``discovered``), else the GPU exporter."""
    assigned = config.for_deployment(view.key)
    asked = discovered or GpuAssignment()
    seen_type, seen_count, seen_names = _observed_gpus(view, config.gpus)
    types = (("settings", assigned.gpu_type), ("pod spec", asked.gpu_type), ("gpu exporter", seen_type))
    type_source, gpu_type = next(((s, t) for s, t in types if t is not None), ("unknown", None))
    counts = (
        ("settings", assigned.gpus_per_replica),
        ("pod spec", asked.gpus_per_replica),
        ("gpu exporter", seen_count),
    )
    count_source, per_replica = next(((s, n) for s, n in counts if n is not None), ("assumed", 1))
    replicas = view.known_replicas
    problem = None
    if gpu_type is None:
        named = f" (exporter names {', '.join(sorted(seen_names))}, none of {', '.join(sorted(config.gpus))})"
        problem = (
            f"GPU type unknown for {view.key}{named if seen_names else ''}: set cost.deployments"
            f"[{view.key!r}].gpu_type (or cost.default.gpu_type), or scrape its GPUs' exporter"
        )
        return DeploymentCost(
            view.key, pool, None, type_source, per_replica, count_source, replicas, None, None, None, None, problem
        )
    if count_source == "assumed":
        problem = _shared_gpus_problem(view)
    price = config.gpus[gpu_type]
    per_hour = replicas * per_replica * price.price_per_hour_usd
    rate = view.generation_tokens_rate
    per_million = per_hour / (rate * 3600.0) * 1e6 if rate is not None and rate > 0 else None
    return DeploymentCost(
        view.key,
        pool,
        gpu_type,
        type_source,
        per_replica,
        count_source,
        replicas,
        price.price_per_hour_usd,
        per_hour,
        per_million,
        replicas * per_replica * price.power_w,
        problem,
        recommend(view, config, gpu_type, per_replica),
    )


def fleet_costs(
    deployments: Mapping[str, DeploymentView],
    config: CostConfig,
    discovered: Mapping[str, GpuAssignment] | None = None,
) -> dict[str, DeploymentCost]:
    # A disaggregated deployment's pools are views of their own (collector.roles): each is priced under its pool.
    asked = discovered or {}
    return {
        key: deployment_cost(view, config, None if view.pool == "both" else view.pool, asked.get(key))
        for key, view in deployments.items()
    }


def discovered_gpus(targets: Iterable[TargetInfo], known: Iterable[str]) -> dict[str, GpuAssignment]:
    """Per deployment (pool) key, what its engine pods ask the scheduler for: the GPU type their
    ``nvidia.com/gpu.product`` selector names (when it is a priced type) and their ``nvidia.com/gpu`` limit, each
    the commonest among its pods (a rollout between two shapes prices the majority)."""
    types: dict[str, Counter[str]] = {}
    counts: dict[str, Counter[int]] = {}
    names = list(known)
    for t in targets:
        if t.kind != "engine":
            continue
        gpu_type = gpu_type_of(t.gpu_product, names)
        if gpu_type is not None:
            types.setdefault(t.deployment_key, Counter())[gpu_type] += 1
        if t.gpus > 0:
            counts.setdefault(t.deployment_key, Counter())[t.gpus] += 1
    return {
        key: GpuAssignment(
            types[key].most_common(1)[0][0] if key in types else None,
            counts[key].most_common(1)[0][0] if key in counts else None,
        )
        for key in types.keys() | counts.keys()
    }


def _observed_gpus(view: DeploymentView, prices: Mapping[str, GpuPrice]) -> tuple[str | None, int | None, set[str]]:
    """(the commonest known GPU type among the replicas' GPUs, for a replica without GPUs of its own those of its node
    it shares with other replicas (``ReplicaView.node_gpus``); the commonest GPU count of a replica with GPUs of its
    own; the product names seen). Shared node GPUs give the type, never a count: which of them are whose is unknown."""
    types: Counter[str] = Counter()
    counts: Counter[int] = Counter()
    names: set[str] = set()
    for replica in view.replicas:
        if replica.gpus:
            counts[len(replica.gpus)] += 1
        for gpu in replica.gpus or replica.node_gpus:
            if gpu.model_name:
                names.add(gpu.model_name)
                found = gpu_type_of(gpu.model_name, prices)
                if found is not None:
                    types[found] += 1
    gpu_type = types.most_common(1)[0][0] if types else None
    count = counts.most_common(1)[0][0] if counts else None
    return gpu_type, count, names


def _shared_gpus_problem(view: DeploymentView) -> str | None:
    """Why a deployment's GPUs per replica are assumed (1) though its replicas' nodes list GPUs: no pod attribution
    on a node of several replicas (``ReplicaView.node_gpus``); None where no replica shares a node's GPUs."""
    nodes = sorted({r.sample.node for r in view.replicas if r.node_gpus and r.sample.node})
    if not nodes:
        return None
    named = ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
    return (
        f"GPUs per replica unknown for {view.key}: its replicas share the GPUs of {named} with other replicas and the "
        f"GPU exporter names no pod, so 1 is assumed: set cost.deployments[{view.key!r}].gpus_per_replica, or have "
        "the exporter attribute GPUs to pods (dcgm-exporter --kubernetes)"
    )


def _model_of(view: DeploymentView) -> str | None:
    models = Counter(r.sample.model for r in view.replicas if r.sample.model)
    return models.most_common(1)[0][0] if models else None


def candidates_for(model: str, candidates: Mapping[str, tuple[Candidate, ...]]) -> tuple[Candidate, ...]:
    """Profiles of ``model``: its exact name (any case), else the same name after the organisation ("org/name")."""
    key = model.lower()
    if key in candidates:
        return candidates[key]
    base = key.rpartition("/")[2]
    return next((c for name, c in candidates.items() if name.rpartition("/")[2] == base), ())


def recommend(view: DeploymentView, config: CostConfig, gpu_type: str, gpus_per_replica: int) -> Recommendation | None:
    """Every profiled GPU type for the deployment's model, sized for its current demand and token mix; the cheapest
    that meets the SLO is recommended when it saves at least ``recommend_margin`` against the current type sized
    the same way (model against model, so a fleet's own over- or under-provisioning does not decide it)."""
    model = _model_of(view)
    if model is None or not config.candidates:
        return None
    options_for = candidates_for(model, config.candidates)
    if not options_for:
        return None
    arrival, prompt_rate, output_rate = view.arrival_rate, view.prompt_tokens_rate, view.generation_tokens_rate
    if arrival is None or prompt_rate is None or output_rate is None or arrival <= 0:
        return Recommendation(None, (), None, "no demand measured yet: nothing to size the options on")
    mix = TokenMix(prompt_rate / arrival, output_rate / arrival)
    hit = view.prefix_hit_ratio or 0.0
    options = tuple(
        sorted(
            (_option(c, config, arrival, mix, hit) for c in options_for if c.gpu_type in config.gpus),
            key=lambda o: (o.usd_per_hour, o.gpu_type),
        )
    )
    current = next((o for o in options if o.gpu_type == gpu_type and o.gpus_per_replica == gpus_per_replica), None)
    current = current or next((o for o in options if o.gpu_type == gpu_type), None)
    if current is None:
        return Recommendation(None, options, None, f"no profile of {model} on {gpu_type} to compare against")
    best = next((o for o in options if o.meets_slo), None)
    if best is None or best.gpu_type == current.gpu_type:
        return Recommendation(current, options, None, f"{gpu_type} is the cheapest profiled type that meets the SLO")
    saving = 1.0 - best.usd_per_hour / current.usd_per_hour
    if saving < config.recommend_margin:
        return Recommendation(
            current,
            options,
            None,
            f"{best.gpu_type} would save {100 * saving:.0f} %, inside the {100 * config.recommend_margin:.0f} % margin "
            "the profiles' error needs",
        )
    message = (
        f"{best.replicas} × {best.gpus_per_replica} {best.gpu_type} would serve {arrival:.3g} req/s at this mix "
        f"within the SLO for ${best.usd_per_hour:.2f}/h, against ${current.usd_per_hour:.2f}/h on "
        f"{current.replicas} × {current.gpus_per_replica} {current.gpu_type} ({100 * saving:.0f} % less); advisory"
    )
    return Recommendation(current, options, best, message)


def _option(c: Candidate, config: CostConfig, arrival: float, mix: TokenMix, hit: float) -> GpuOption:
    p = c.profile
    capacity = p.requests_per_s(mix, hit) * config.target_utilisation
    replicas = max(1, math.ceil(arrival / capacity - 1e-9))
    usd = replicas * c.gpus_per_replica * config.gpus[c.gpu_type].price_per_hour_usd
    length = mix.prompt_tokens + mix.output_tokens
    # The fastest a mean prompt can get its first token on an idle replica: its uncached prefill plus one step.
    ttft_floor = mix.prompt_tokens * (1.0 - min(max(hit, 0.0), 0.99)) / p.prefill_tokens_per_s + p.decode_step_s
    problem = None
    if c.max_model_len is not None and length > c.max_model_len:
        problem = f"mean request of {length:.0f} tokens exceeds max_model_len {c.max_model_len}"
    elif length > p.kv_tokens:
        problem = f"mean request of {length:.0f} tokens exceeds the KV pool of {p.kv_tokens:.0f}"
    elif config.slo_ttft_s is not None and ttft_floor > config.slo_ttft_s:
        problem = f"prefill alone takes {ttft_floor:.2f} s, over the {config.slo_ttft_s:g} s TTFT SLO"
    if problem is not None:
        return GpuOption(c.gpu_type, c.gpus_per_replica, replicas, usd, False, problem)
    return GpuOption(
        c.gpu_type,
        c.gpus_per_replica,
        replicas,
        usd,
        True,
        f"{capacity:.3g} req/s per replica at {100 * config.target_utilisation:.0f} % of saturation; "
        f"idle TTFT {ttft_floor:.3f} s",
    )
