"""The declarative engine adapter: a mapping from canonical fields to the series that feed them.

Each engine file is mostly data, a ``dict`` from a ``ReplicaSample`` field to the series names that
have carried it (current first, older after), plus a ``derive`` hook for the few values that need
arithmetic. Anything the mapping does not find stays ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, cast

from collector.engines._read import (
    Families,
    FlatHistogramsPlan,
    FlatValuesPlan,
    HistogramsPlan,
    SampleFilter,
    Series,
    ValuesPlan,
    family_names,
    first_label,
    flat_histograms_plan,
    flat_values_plan,
    page_shape,
    plan_histograms,
    plan_values,
    read_flat_histogram,
    read_flat_values,
    read_histogram,
    read_mean,
    read_planned_histogram,
    read_planned_values,
    read_sum,
    structural,
)
from collector.exposition import MetricFamily, Sample
from collector.exposition._page import LaidOutPage
from collector.roles import DYNAMO_METRIC_COMPONENT, role_from_component
from collector.samples import ReplicaSample, TargetInfo

Combine = Literal["sum", "mean", "histogram"]

SCALAR_FIELDS = (
    "requests_waiting",
    "requests_running",
    "kv_usage",
    "kv_capacity_tokens",
    "prefix_queries",
    "prefix_hits",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
)
HISTOGRAM_FIELDS = ("ttft", "itl", "e2e", "queue_time")
CANONICAL_FIELDS = frozenset(SCALAR_FIELDS + HISTOGRAM_FIELDS)


@dataclass(frozen=True, slots=True)
class Field:
    """Where one canonical field comes from and how several samples (engines, label sets) combine."""

    sources: tuple[Series, ...]
    combine: Combine = "sum"
    scale: float = 1.0  # histogram unit change, e.g. 1e-3 for milliseconds


def total(*specs: str) -> Field:
    """Summed over every sample of the first source present (counters, queue lengths)."""
    return Field(tuple(Series.parse(s) for s in specs), "sum")


def mean(*specs: str) -> Field:
    """Averaged over the samples of the first source present (ratios such as KV usage per engine)."""
    return Field(tuple(Series.parse(s) for s in specs), "mean")


def histogram(*specs: str, scale: float = 1.0) -> Field:
    """A latency histogram, merged over label sets, bounds read from the page."""
    return Field(tuple(Series.parse(s) for s in specs), "histogram", scale)


Derive = Callable[[Families, dict[str, Any]], dict[str, Any]]
Prepare = Callable[[Families], SampleFilter | None]


def _no_derive(_families: Families, _values: dict[str, Any]) -> dict[str, Any]:
    return {}


def _no_prepare(_families: Families) -> SampleFilter | None:
    return None


# Labels that tell apart replicas sharing one page beyond the model: Ray's actor id and Ray Serve's replica id (one
# vLLM engine per actor; all of a node's actors on the node's one metrics page), and the worker address a gateway
# writes on each worker's series when it serves its workers' pages as one: SGLang Model Gateway's /engine_metrics
# fans out to every worker's /metrics and labels each page's samples ``worker_addr`` (sgl-project/sglang @ 11010c0
# sgl-router/src/core/worker_manager.rs, ``get_engine_metrics``), so two workers of one model are two replicas. A
# GPUStack worker serves every model instance it runs on one page, each sample labelled with its
# ``model_instance_name`` (gpustack/gpustack gpustack/worker/runtime_metrics_aggregator.py): an instance is a server.
REPLICA_LABELS = ("ReplicaId", "WorkerId", "worker_addr", "model_instance_name")
_REPLICA_ID, _WORKER_ID = REPLICA_LABELS[:2]
# Replicas one page may name: a gateway's page of every worker, a server of many models. Past it the page is refused,
# not read: each replica read costs ~40 us of CPU (on the event loop for a page up to 128 KiB, where a label written
# per request named 2,337 replicas) and becomes a replica of the fleet, its own series on kvpilot's /metrics.
MAX_REPLICAS_PER_PAGE = 1_000
# Model label values that name no model: trtllm-serve up to 1.x wrote model_name="undefined" on every series
# (NVIDIA/TensorRT-LLM PR #12545 fixed it; a real page: vllm-project/aibrix issue #2004). Read as no model, so that
# replicas of different models are not one "undefined" model.
_NO_MODEL = frozenset({"undefined"})

Group = tuple[tuple[str, str], ...]


def _narrowed(families: Families, groups: list[Group]) -> list[dict[str, MetricFamily]]:
    """The page restricted to each replica of ``groups`` (which name the same labels, in the same order): samples
    carrying another value of a group label are left out; samples without the label (engine-wide info series) stay.
    One pass over the page rather than one a replica: a page naming thousands of replicas (a model label written
    per request) took seconds of CPU, on the event loop for a page of 128 KB."""
    keys = tuple(k for k, _ in groups[0])
    whole = {tuple(v for _, v in g): [i] for i, g in enumerate(groups)}
    # for the samples lacking some of the labels: the groups agreeing on the ones they carry, by which they carry
    by_present: dict[tuple[int, ...], dict[tuple[str, ...], list[int]]] = {}

    def matching(values: tuple[str | None, ...]) -> list[int]:
        if None not in values:
            return whole.get(cast(tuple[str, ...], values), [])
        present = tuple(j for j, v in enumerate(values) if v is not None)
        index = by_present.get(present)
        if index is None:
            index = by_present[present] = {}
            for i, g in enumerate(groups):
                index.setdefault(tuple(g[j][1] for j in present), []).append(i)
        return index.get(tuple(cast(str, values[j]) for j in present), [])

    out: list[dict[str, MetricFamily]] = [{} for _ in groups]
    for name, fam in families.items():
        buckets: list[list[Sample]] = [[] for _ in groups]
        for s in fam.samples:
            for i in matching(tuple(s.labels.get(k) for k in keys)):
                buckets[i].append(s)
        for narrowed, samples in zip(out, buckets, strict=True):
            narrowed[name] = MetricFamily(fam.name, fam.type, fam.help, samples, fam.unit)
    return out


def _helper_workers(samples: list[Sample]) -> bool:
    """Whether the page's Ray workers are not one per Serve replica: a worker writing without a replica id beside
    ones writing with it, or a replica written by several workers. Then a worker is a helper actor of some replica
    (SGLang's schedulers run as Ray actors of their own under Ray Serve LLM, writing the scheduler gauges with an
    empty ``ReplicaId`` while the replica's actor writes the tokenizer's series: ray-project/ray
    python/ray/llm/_internal/serve/engines/sglang/ray_metrics.py, sgl-project/sglang @ 18cc7bf
    python/sglang/srt/observability/ray_wrappers.py), and replicas are told apart by ``ReplicaId`` alone."""
    replica_of: dict[str, str] = {}
    for s in samples:
        worker = s.labels.get(_WORKER_ID)
        if not worker:
            continue
        replica = s.labels.get(_REPLICA_ID, "")
        if replica_of.setdefault(worker, replica) != replica or not replica:
            return True
    workers_of: dict[str, set[str]] = {}
    for worker, replica in replica_of.items():
        workers_of.setdefault(replica, set()).add(worker)
    return any(len(workers) > 1 for workers in workers_of.values())


@dataclass(frozen=True)
class DeclarativeAdapter:
    """An ``EngineAdapter`` built from a field mapping.

    Detection scores a page by how many of the adapter's families it carries (engines prefix their
    series, so pages of different engines share none).
    ``prepare`` may return a sample filter applied to every read (e.g. to drop duplicate TP ranks);
    ``derive`` computes fields from raw families and the mapped values (it wins over the mapping).
    """

    name: str
    fields: Mapping[str, Field]
    model_labels: tuple[str, ...] = ()
    extra_families: frozenset[str] = frozenset()
    derive: Derive = _no_derive
    prepare: Prepare = _no_prepare
    # Families that identify the engine (all mapped ones when empty); others are read but do not count, so a
    # page carrying only generic series (Triton core without TensorRT-LLM) is not taken for this engine.
    identifying: frozenset[str] = frozenset()
    # A serving stack whose pages usually also carry an engine's series: detected only when no engine is.
    fallback: bool = False
    # Labels on the adapter's own series whose value names the worker's phase in a disaggregated deployment
    # (SGLang's engine_type: prefill, decode or unified), read where no Dynamo component label tells it.
    role_labels: tuple[str, ...] = ()
    # A label the engine writes on every series it serves (TensorRT-LLM's engine_type): one of the adapter's
    # families that is not identifying by name (an older release's unprefixed name, which other engines also use)
    # still identifies the engine when its samples carry this label.
    identifying_label: str | None = None
    families: frozenset[str] = field(init=False)
    _mapped: frozenset[str] = field(init=False, repr=False)  # families the field mapping reads (no info series)

    def __post_init__(self) -> None:
        unknown = set(self.fields) - CANONICAL_FIELDS
        if unknown:
            raise ValueError(f"engine {self.name!r}: mapping names unknown fields {sorted(unknown)}")
        names: set[str] = set()
        for f in self.fields.values():
            for series in f.sources:
                names.update(family_names(series.family))
        object.__setattr__(self, "_mapped", frozenset(names))
        for extra in self.extra_families:
            names.update(family_names(extra))
        object.__setattr__(self, "families", frozenset(names))
        ident: set[str] = set()
        for name in self.identifying:
            ident.update(family_names(name))
        object.__setattr__(self, "identifying", frozenset(ident))

    def score(self, families: Families) -> int:
        """How many of this adapter's identifying families the page carries (0: not this engine); with an
        ``identifying_label``, also its other families whose samples carry that label."""
        wanted = self.identifying or self.families
        found = sum(1 for name in families if name in wanted)
        label = self.identifying_label
        if label is not None:
            found += sum(
                1
                for name, fam in families.items()
                if name in self.families and name not in wanted and any(label in s.labels for s in fam.samples)
            )
        return found

    def values(self, families: Families) -> dict[str, Any]:
        keep = self.prepare(families)
        out: dict[str, Any] = {}
        if keep is None and type(families) is LaidOutPage and families.shape:  # off a known layout's values, by plan
            flat = structural(families, (self.name, "flat fields"), partial(self._flat_plan, families))
            values = families.page_values
            for name, histogram_plan, values_plan, mean, scale in flat:
                if histogram_plan is not None:
                    out[name] = read_flat_histogram(values, histogram_plan, scale=scale)
                else:
                    out[name] = read_flat_values(values, values_plan, mean=mean)
        elif keep is None and page_shape(families) is not None:  # a known layout's families: by plan
            plan = structural(families, (self.name, "fields"), partial(self._plan, families))
            for name, f, planned in plan:
                if f.combine == "histogram":
                    out[name] = read_planned_histogram(families, cast(HistogramsPlan, planned), scale=f.scale)
                else:
                    out[name] = read_planned_values(families, cast(ValuesPlan, planned), mean=f.combine == "mean")
        else:
            for name, f in self.fields.items():
                if f.combine == "histogram":
                    out[name] = read_histogram(families, f.sources, keep, scale=f.scale)
                elif f.combine == "mean":
                    out[name] = read_mean(families, f.sources, keep)
                else:
                    out[name] = read_sum(families, f.sources, keep)
        out.update(self.derive(families, out))
        return out

    def _plan(self, families: Families) -> tuple[tuple[str, Field, ValuesPlan | HistogramsPlan], ...]:
        """Each field's sources as this page layout has them (``values`` then reads only values per page)."""
        return tuple(
            (
                name,
                f,
                plan_histograms(families, f.sources) if f.combine == "histogram" else plan_values(families, f.sources),
            )
            for name, f in self.fields.items()
        )

    def _flat_plan(
        self, page: LaidOutPage
    ) -> tuple[tuple[str, FlatHistogramsPlan | None, FlatValuesPlan, bool, float], ...]:
        """``_plan`` with each source's positions in the page's values (``read_flat_values``, ``read_flat_histogram``):
        per field its name, its plan as a histogram (None: not one) or else as values, whether a mean, its scale
        (typed apart, so that reading a page needs no ``cast`` call per field)."""
        plan = structural(page, (self.name, "fields"), partial(self._plan, page))
        return tuple(
            (
                name,
                flat_histograms_plan(page, cast(HistogramsPlan, planned)) if f.combine == "histogram" else None,
                () if f.combine == "histogram" else flat_values_plan(page, cast(ValuesPlan, planned)),
                f.combine == "mean",
                f.scale,
            )
            for name, f, planned in plan
        )

    def model(self, families: Families) -> str | None:
        return structural(families, (self.name, "model"), partial(self._model, families))

    def _model(self, families: Families) -> str | None:
        names = sorted(n for n in families if n in self.families)
        for label in self.model_labels:
            found = first_label(families, names, label)
            if found and found not in _NO_MODEL:
                return found
        return None

    def role(self, families: Families) -> str | None:
        """The role the page's own labels tell (a Dynamo worker's ``dynamo_component``, else the engine's own
        ``role_labels``), else None."""
        return structural(families, (self.name, "role"), partial(self._role, families))

    def _role(self, families: Families) -> str | None:
        # Every family, not only this adapter's: a Dynamo worker's engine series (``vllm:``) carry no Dynamo labels,
        # its ``dynamo_component_*`` series on the same page do.
        names = sorted(n for n in families if n.startswith("dynamo_component"))
        role = role_from_component(first_label(families, names, DYNAMO_METRIC_COMPONENT))
        if role is not None or not self.role_labels:
            return role
        own = sorted(n for n in families if n in self._mapped)
        for label in self.role_labels:
            role = role_from_component(first_label(families, own, label))
            if role is not None:
                return role
        return None

    def groups(self, families: Families) -> list[Group]:
        """The replicas a page holds, as the label values that tell them apart (model, Ray worker).

        One group (or none) is the usual page. Several models on one server (Triton, a Dynamo frontend) or
        several Ray actors on one node are several replicas: summing their queues would describe no replica.
        """
        if self.prepare is _no_prepare:  # then only names and labels decide
            return structural(families, (self.name, "groups"), partial(self._groups, families))
        return self._groups(families)

    def _groups(self, families: Families) -> list[Group]:
        labels = (*self.model_labels, *REPLICA_LABELS)
        keep = self.prepare(families)
        samples = []
        values: dict[str, set[str]] = {k: set() for k in labels}
        for name, fam in families.items():
            # info series (cache config) may come from another process: only the mapped families and those that
            # identify the engine (its own per-model series) tell replicas apart
            if name not in self._mapped and name not in self.identifying:
                continue
            for s in fam.samples:
                if "le" in s.labels or (keep is not None and not keep(s)):
                    continue  # a histogram's buckets repeat its _count's labels
                samples.append(s)
                for k in labels:
                    v = s.labels.get(k)
                    if v:
                        values[k].add(v)
        split = [k for k in labels if len(values[k]) > 1]
        if _WORKER_ID in split and values[_REPLICA_ID] and _helper_workers(samples):
            split.remove(_WORKER_ID)
        if not split:
            return []
        seen = {tuple((k, s.labels[k]) for k in split) for s in samples if all(s.labels.get(k) for k in split)}
        return sorted(seen)

    def adapt(self, families: Families, target: TargetInfo, timestamp: float) -> list[ReplicaSample]:
        """One sample per replica on the page (usually one): data-parallel engines of one pod are one replica
        to the scaler; distinct models or Ray workers are not (their replica name gets ``#<label values>``)."""
        replica = target.pod or target.url
        groups = self.groups(families)
        if len(groups) > MAX_REPLICAS_PER_PAGE:
            labels = ", ".join(k for k, _ in groups[0])
            raise ValueError(
                f"the page names {len(groups):,} replicas (values of {labels}); at most {MAX_REPLICAS_PER_PAGE:,} are "
                "read from one page (a label written per request?)"
            )
        if len(groups) <= 1:
            return [self._sample(target, replica, timestamp, families)]
        return [
            self._sample(target, f"{replica}#{','.join(v for _, v in group)}", timestamp, narrowed)
            for group, narrowed in zip(groups, _narrowed(families, groups), strict=True)
        ]

    def _sample(self, target: TargetInfo, replica: str, timestamp: float, families: Families) -> ReplicaSample:
        return ReplicaSample(
            namespace=target.namespace,
            deployment=target.deployment,
            replica=replica,
            node=target.node,
            engine=self.name,
            model=self.model(families),
            timestamp=timestamp,
            role=target.role or self.role(families),
            **self.values(families),
        )
