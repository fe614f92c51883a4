"""The declarative engine adapter: a mapping from canonical fields to the series that feed them.

Each engine file is mostly data, a ``dict`` from a ``ReplicaSample`` field to the series names that
have carried it (current first, older after), plus a ``derive`` hook for the few values that need
arithmetic. Anything the mapping does not find stays ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from collector.engines._read import (
    Families,
    SampleFilter,
    Series,
    family_names,
    first_label,
    read_histogram,
    read_mean,
    read_sum,
)
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
    families: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        unknown = set(self.fields) - CANONICAL_FIELDS
        if unknown:
            raise ValueError(f"engine {self.name!r}: mapping names unknown fields {sorted(unknown)}")
        names: set[str] = set()
        for f in self.fields.values():
            for series in f.sources:
                names.update(family_names(series.family))
        for extra in self.extra_families:
            names.update(family_names(extra))
        object.__setattr__(self, "families", frozenset(names))

    def score(self, families: Families) -> int:
        """How many of this adapter's families the page carries (0: not this engine)."""
        return sum(1 for name in families if name in self.families)

    def values(self, families: Families) -> dict[str, Any]:
        keep = self.prepare(families)
        out: dict[str, Any] = {}
        for name, f in self.fields.items():
            if f.combine == "histogram":
                out[name] = read_histogram(families, f.sources, keep, scale=f.scale)
            elif f.combine == "mean":
                out[name] = read_mean(families, f.sources, keep)
            else:
                out[name] = read_sum(families, f.sources, keep)
        out.update(self.derive(families, out))
        return out

    def model(self, families: Families) -> str | None:
        names = sorted(n for n in families if n in self.families)
        for label in self.model_labels:
            found = first_label(families, names, label)
            if found:
                return found
        return None

    def adapt(self, families: Families, target: TargetInfo, timestamp: float) -> list[ReplicaSample]:
        """One sample per page: data-parallel engines of one pod are one replica to the scaler."""
        base = ReplicaSample(
            namespace=target.namespace,
            deployment=target.deployment,
            replica=target.pod or target.url,
            node=target.node,
            engine=self.name,
            model=self.model(families),
            timestamp=timestamp,
        )
        return [replace(base, **self.values(families))]
