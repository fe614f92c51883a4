"""Reading values out of parsed families: the few primitives every adapter shares.

Families are keyed as prometheus_client names them (counters without ``_total``), but a page without
``# TYPE`` lines keys a counter by its full sample name; every lookup here tries both, so adapters
name a series once.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar, cast

from collector.exposition import MetricFamily, Sample
from collector.exposition._page import LaidOutPage
from collector.samples import Histogram

Families = Mapping[str, MetricFamily]
SampleFilter = Callable[[Sample], bool]

_INF = math.inf


@dataclass(frozen=True, slots=True)
class Series:
    """One place a value can come from: a family, optionally narrowed to samples carrying some labels."""

    family: str
    match: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> Series:
        """``"fam"`` or ``"fam{label=value,other=value}"`` (values unquoted): the form mappings are written in."""
        name, brace, rest = spec.partition("{")
        if not brace:
            return cls(spec)
        if not rest.endswith("}"):
            raise ValueError(f"series spec {spec!r}: missing closing brace")
        match: dict[str, str] = {}
        for pair in filter(None, rest[:-1].split(",")):
            key, eq, value = pair.partition("=")
            if not eq:
                raise ValueError(f"series spec {spec!r}: {pair!r} is not label=value")
            match[key.strip()] = value.strip()
        return cls(name, match)

    def __str__(self) -> str:
        if not self.match:
            return self.family
        return self.family + "{" + ",".join(f"{k}={v}" for k, v in self.match.items()) + "}"


def _keys(name: str) -> tuple[str, ...]:
    keys = (name, name + "_total")
    namespace, colon, rest = name.partition(":")
    if not (colon and namespace and rest):
        return keys
    flat = f"{namespace}_{rest}"
    return (*keys, flat, flat + "_total")


_FAMILY_KEYS: dict[str, tuple[str, ...]] = {}  # adapters ask for a fixed set of names: worked out once each


def family_names(name: str) -> tuple[str, ...]:
    """The keys a family can be found under: typed (``x``) and untyped counter (``x_total``); for an engine's
    namespaced name (``vllm:x``) also the same written ``vllm_x``, as stacks that sanitise metric names serve it
    (Ray's ``ray_vllm_x`` is that behind a prefix). The engine's own spelling is tried first."""
    keys = _FAMILY_KEYS.get(name)
    if keys is None:
        if len(_FAMILY_KEYS) >= 10_000:  # only adapters' constant names come here; bounded all the same
            _FAMILY_KEYS.clear()
        keys = _FAMILY_KEYS[name] = _keys(name)
    return keys


def _lookup(families: Families, name: str) -> tuple[str, MetricFamily] | None:
    """``name``'s family on the page and its key: the first with samples, else the first present.

    A declared family without samples gives way to one that has them: prometheus_client serving OpenMetrics
    with underscore escaping (what it answers an Accept header that lists OpenMetrics) writes the metadata as
    ``# TYPE vllm:x gauge`` and the samples as ``vllm_x`` (prometheus/client_python#1177), which the parser keeps
    as two families. Once both are escaped, ``family_names``' ``vllm_x`` finds the family whole.
    """
    first = None
    for key in family_names(name):
        fam = families.get(key)
        if fam is not None:
            if fam.samples:
                return key, fam
            if first is None:
                first = (key, fam)
    return first


def find_family(families: Families, name: str) -> MetricFamily | None:
    for key in family_names(name):  # ``_lookup`` inlined for the usual page, where the first family found has samples
        fam = families.get(key)
        if fam is not None:
            if fam.samples:
                return fam
            found = _lookup(families, name)
            return None if found is None else found[1]
    return None


# What a reader derives from a family's names and labels alone, for families read off a known page layout
# (``MetricFamily.shape``): the same on every page of the layout, so worked out once. Keyed by the shape and
# the label match; bounded by forgetting everything at once (layouts are few; a full cache means churn).
_PLANS: dict[tuple[object, str, tuple[tuple[str, str], ...]], object] = {}
_MAX_PLANS = 100_000  # ~20 per distinct layout; a fleet of 1,000 targets with one layout each fits


def _planned(fam: MetricFamily, kind: str, match: Mapping[str, str], build: Callable[[], object]) -> object:
    key = (fam.shape, kind, tuple(match.items()))
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[key] = build()
    return plan


_T = TypeVar("_T")
_STRUCTURAL: dict[tuple[object, ...], object] = {}


def page_shape(families: Families) -> tuple[object, ...] | None:
    """The shapes of a page's families when it was read off a known layout (see ``MetricFamily.shape``), else None."""
    if type(families) is LaidOutPage:  # the layout's own tuple, not rebuilt per page and per question
        return families.shape or None
    shapes = tuple(f.shape for f in families.values())
    return shapes if shapes and None not in shapes else None


def family_values(families: Families, key: str) -> Sequence[float]:
    """The values of family ``key``'s samples, in order: off a laid-out page by position, without building its
    samples (``LaidOutPage.family_values``)."""
    if type(families) is LaidOutPage:
        return families.family_values(key)
    return [s.value for s in families[key].samples]


def structural(families: Families, what: Hashable, compute: Callable[[], _T]) -> _T:
    """``compute()``, remembered per page layout: for what follows from a page's names and labels alone (which
    engine, which GPU exporters, which replicas), not from its values."""
    shape = page_shape(families)
    if shape is None:
        return compute()
    key = (shape, what)
    if key in _STRUCTURAL:
        return cast(_T, _STRUCTURAL[key])
    if len(_STRUCTURAL) >= _MAX_PLANS:
        _STRUCTURAL.clear()
    value = _STRUCTURAL[key] = compute()
    return value


def _value_indices(fam: MetricFamily, match: Mapping[str, str]) -> tuple[int, ...]:
    names = {fam.name, fam.name + "_total"}
    return tuple(
        i
        for i, s in enumerate(fam.samples)
        if s.name in names and not any(s.labels.get(k) != v for k, v in match.items())
    )


def value_samples(families: Families, series: Series, keep: SampleFilter | None = None) -> list[Sample]:
    """Plain-value samples of ``series`` (not buckets, sums or ``_created``), label-filtered."""
    fam = find_family(families, series.family)
    if fam is None:
        return []
    if fam.shape is not None:
        indices = cast(
            tuple[int, ...], _planned(fam, "values", series.match, partial(_value_indices, fam, series.match))
        )
        samples = fam.samples
        picked = [samples[i] for i in indices]
        return picked if keep is None else [s for s in picked if keep(s)]
    names = {fam.name, fam.name + "_total"}
    out = []
    for s in fam.samples:
        if s.name not in names:
            continue
        if any(s.labels.get(k) != v for k, v in series.match.items()):
            continue
        if keep is not None and not keep(s):
            continue
        out.append(s)
    return out


def _fsum(values: Iterable[float]) -> float:
    """math.fsum, but a sum beyond the float range is infinite (collector.validity makes it unknown), not an error."""
    try:
        return math.fsum(values)
    except OverflowError:
        return _INF


def _finite(samples: Iterable[Sample]) -> list[float]:
    return [s.value for s in samples if math.isfinite(s.value)]


def first_present(
    families: Families, sources: Iterable[Series], keep: SampleFilter | None = None
) -> tuple[Series, list[float]] | None:
    """The first source (in mapping order: current names before older ones) with a finite value."""
    for series in sources:
        values = _finite(value_samples(families, series, keep))
        if values:
            return series, values
    return None


def read_sum(families: Families, sources: Iterable[Series], keep: SampleFilter | None = None) -> float | None:
    found = first_present(families, sources, keep)
    return None if found is None else _fsum(found[1])


def read_mean(families: Families, sources: Iterable[Series], keep: SampleFilter | None = None) -> float | None:
    found = first_present(families, sources, keep)
    return None if found is None else _fsum(found[1]) / len(found[1])


def _parse_le(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)  # accepts "+Inf", "1", "1.0", "1e3"
    except ValueError:
        return None


@dataclass(slots=True)
class _Group:
    buckets: dict[float, float] = field(default_factory=dict)
    sum: float | None = None
    count: float | None = None

    def to_histogram(self) -> Histogram | None:
        buckets = dict(self.buckets)
        if _INF not in buckets:
            if self.count is None:
                return None  # neither +Inf nor _count: the total is unknown
            buckets[_INF] = self.count
        bounds = tuple(sorted(buckets))
        return Histogram(
            bounds=bounds,
            counts=tuple(buckets[b] for b in bounds),
            sum=math.nan if self.sum is None else self.sum,
            count=buckets[_INF] if self.count is None else self.count,
        )


def _histogram_groups(fam: MetricFamily, match: Mapping[str, str], keep: SampleFilter | None) -> Iterator[Histogram]:
    """One Histogram per distinct label set (everything but ``le``) of a histogram family."""
    bucket, total, count = fam.name + "_bucket", fam.name + "_sum", fam.name + "_count"
    groups: dict[tuple[tuple[str, str], ...], _Group] = {}
    for s in fam.samples:
        if any(s.labels.get(k) != v for k, v in match.items()):
            continue
        if keep is not None and not keep(s):
            continue
        g = groups.setdefault(tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")), _Group())
        if s.name == bucket:
            le = _parse_le(s.labels.get("le"))
            if le is not None and not math.isnan(le):
                g.buckets[le] = s.value
        elif s.name == total:
            g.sum = s.value
        elif s.name == count:
            g.count = s.value
    for g in groups.values():
        h = g.to_histogram()
        if h is not None:
            yield h


# A histogram family's label sets as read off its names and labels: per set, its bounds (+Inf included), the
# sample holding each bound's count (the +Inf one may be ``_count``), and the ``_sum`` and ``_count`` samples
# (-1: absent).
_HistogramPlan = tuple[tuple[tuple[float, ...], tuple[int, ...], int, int], ...]


def _histogram_plan(fam: MetricFamily, match: Mapping[str, str]) -> _HistogramPlan:
    """``_histogram_groups``' grouping, on sample positions instead of values."""
    bucket, total, count = fam.name + "_bucket", fam.name + "_sum", fam.name + "_count"
    groups: dict[tuple[tuple[str, str], ...], tuple[dict[float, int], list[int]]] = {}
    for i, s in enumerate(fam.samples):
        if any(s.labels.get(k) != v for k, v in match.items()):
            continue
        buckets, ends = groups.setdefault(
            tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")), ({}, [-1, -1])
        )
        if s.name == bucket:
            le = _parse_le(s.labels.get("le"))
            if le is not None and not math.isnan(le):
                buckets[le] = i
        elif s.name == total:
            ends[0] = i
        elif s.name == count:
            ends[1] = i
    plan = []
    for buckets, (sum_at, count_at) in groups.values():
        places = dict(buckets)
        if _INF not in places:
            if count_at < 0:
                continue  # neither +Inf nor _count: the total is unknown
            places[_INF] = count_at
        bounds = tuple(sorted(places))
        plan.append((bounds, tuple(places[b] for b in bounds), sum_at, count_at))
    return tuple(plan)


def _planned_histograms(fam: MetricFamily, match: Mapping[str, str]) -> list[Histogram]:
    plan = cast(_HistogramPlan, _planned(fam, "histogram", match, partial(_histogram_plan, fam, match)))
    return _histograms_at(plan, [s.value for s in fam.samples])


def _histograms_at(plan: _HistogramPlan, values: Sequence[float]) -> list[Histogram]:
    """The plan's histograms, from the values of the family's samples (by position)."""
    out = []
    for bounds, places, sum_at, count_at in plan:
        counts = tuple([values[i] for i in places])
        out.append(
            Histogram(
                bounds=bounds,
                counts=counts,
                sum=values[sum_at] if sum_at >= 0 else math.nan,
                count=values[count_at] if count_at >= 0 else counts[-1],
            )
        )
    return out


# A field's sources as one page layout has them, in mapping order (current names first): for a value, each present
# source's family key and the positions of its plain-value samples; for a histogram, each present histogram family's
# key and label sets (``_HistogramPlan``). ``read_sum``, ``read_mean`` and ``read_histogram`` without a sample
# filter, with the names and labels worked out once per layout (``structural``): per page only values are read, by
# position (``family_values``: off a laid-out page, no sample is built).
ValuesPlan = tuple[tuple[str, tuple[int, ...]], ...]
HistogramsPlan = tuple[tuple[str, _HistogramPlan], ...]


def plan_values(families: Families, sources: Iterable[Series]) -> ValuesPlan:
    plan = []
    for series in sources:
        found = _lookup(families, series.family)
        if found is not None:
            plan.append((found[0], _value_indices(found[1], series.match)))
    return tuple(plan)


def read_planned_values(families: Families, plan: ValuesPlan, *, mean: bool) -> float | None:
    """``read_mean`` (``mean``) or ``read_sum`` of the page, from the sources' plan."""
    for key, places in plan:
        family = family_values(families, key)
        values = [v for v in [family[i] for i in places] if math.isfinite(v)]
        if values:
            return _fsum(values) / len(values) if mean else _fsum(values)
    return None


# The same plans for a page read off a layout (``LaidOutPage``), with each source's positions in the page's own values
# (``LaidOutPage.page_values``) worked out once per layout: per page, a field is one pick of values, with no look-up of
# its family and no pick of the family's values first. The same values in the same order as the plans' readers take.
_Pick = Callable[[Sequence[float]], tuple[float, ...]]
_ValuesPick = Callable[[Sequence[float]], Sequence[float]]
FlatValuesPlan = tuple[_ValuesPick, ...]
FlatHistogramsPlan = tuple[tuple[tuple[tuple[float, ...], _Pick, int, int], ...], ...]


def _tuple_picker(positions: Sequence[int]) -> _Pick:
    """The items at ``positions`` as a tuple (``itemgetter`` gives a lone item for one position)."""
    if len(positions) == 1:
        only = positions[0]
        return lambda values: (values[only],)
    if not positions:
        return lambda _values: ()
    return cast(_Pick, operator.itemgetter(*positions))


def _values_picker(positions: Sequence[int]) -> _ValuesPick:
    """The items at ``positions``, picked in C: a lone position as a one-item slice of the page's values (a list)."""
    if len(positions) == 1:
        only = positions[0]
        return cast(_ValuesPick, operator.itemgetter(slice(only, only + 1)))
    return _tuple_picker(positions)


def flat_values_plan(page: LaidOutPage, plan: ValuesPlan) -> FlatValuesPlan:
    out = []
    for key, places in plan:
        positions = page.positions(key)
        out.append(_values_picker([positions[i] for i in places]))
    return tuple(out)


def read_flat_values(values: Sequence[float], plan: FlatValuesPlan, *, mean: bool) -> float | None:
    """``read_planned_values`` of a laid-out page's ``page_values``, from its flat plan (``_fsum`` inlined: this runs
    for every field of every page)."""
    for pick in plan:
        found = list(filter(math.isfinite, pick(values)))
        if found:
            try:
                total = math.fsum(found)
            except OverflowError:
                total = _INF
            return total / len(found) if mean else total
    return None


def flat_histograms_plan(page: LaidOutPage, plan: HistogramsPlan) -> FlatHistogramsPlan:
    out = []
    for key, groups in plan:
        at = page.positions(key)
        out.append(
            tuple(
                (
                    bounds,
                    _tuple_picker([at[i] for i in places]),
                    at[sum_at] if sum_at >= 0 else -1,
                    at[count_at] if count_at >= 0 else -1,
                )
                for bounds, places, sum_at, count_at in groups
            )
        )
    return tuple(out)


def read_flat_histogram(values: Sequence[float], plan: FlatHistogramsPlan, *, scale: float = 1.0) -> Histogram | None:
    """``read_planned_histogram`` of a laid-out page's ``page_values``, from its flat plan."""
    for groups in plan:
        parts = []
        for bounds, pick, sum_at, count_at in groups:
            counts = pick(values)
            parts.append(
                Histogram(
                    bounds=bounds,
                    counts=counts,
                    sum=values[sum_at] if sum_at >= 0 else math.nan,
                    count=values[count_at] if count_at >= 0 else counts[-1],
                )
            )
        merged = parts[0] if len(parts) == 1 else merge_histograms(parts)
        if merged is not None:
            return merged if scale == 1.0 else scale_histogram(merged, scale)
    return None


def _find_histogram(families: Families, name: str) -> tuple[str, MetricFamily] | None:
    """The histogram family ``name`` is served as (its key on the page), under any of ``family_names``.

    A histogram served without buckets (``_count`` and ``_sum`` only: a vLLM page listed so, index 52461312685) is,
    once a grep drops its TYPE line, a summary without quantiles to the parser (``collector.exposition._untyped``):
    the two cannot be told apart, and their ``_count`` and ``_sum`` mean the same. Such a summary is read as the
    histogram it stands for (every request under +Inf); a summary with quantiles is not."""
    for key in family_names(name):
        fam = families.get(key)
        if fam is None:
            continue
        if fam.type == "histogram" or (fam.type == "summary" and not any("quantile" in s.labels for s in fam.samples)):
            return key, fam
    return None


def plan_histograms(families: Families, sources: Iterable[Series]) -> HistogramsPlan:
    plan = []
    for series in sources:
        found = _find_histogram(families, series.family)
        if found is not None:
            plan.append((found[0], _histogram_plan(found[1], series.match)))
    return tuple(plan)


def read_planned_histogram(families: Families, plan: HistogramsPlan, *, scale: float = 1.0) -> Histogram | None:
    """``read_histogram`` of the page, from the sources' plan."""
    for key, groups in plan:
        merged = merge_histograms(_histograms_at(groups, family_values(families, key)))
        if merged is not None:
            return scale_histogram(merged, scale)
    return None


def merge_histograms(parts: list[Histogram]) -> Histogram | None:
    """Sum histograms (engines, label sets) into one, keeping only the bounds every part has.

    Cumulative counts at a bound every part shares add up exactly; at a bound only some parts have they
    cannot, so such bounds are dropped rather than interpolated. +Inf is always shared.
    """
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    shared = set(parts[0].bounds)
    for h in parts[1:]:
        shared &= set(h.bounds)
    bounds = tuple(sorted(shared))
    counts = tuple(_fsum(h.counts[h.bounds.index(b)] for h in parts) for b in bounds)
    return Histogram(
        bounds=bounds,
        counts=counts,
        sum=_fsum(h.sum for h in parts),
        count=_fsum(h.count for h in parts),
    )


def scale_histogram(h: Histogram, factor: float) -> Histogram:
    """Change the unit of the observed values (bounds and sum), e.g. milliseconds to seconds."""
    if factor == 1.0:
        return h
    return Histogram(tuple(b * factor for b in h.bounds), h.counts, h.sum * factor, h.count)


def read_histogram(
    families: Families, sources: Iterable[Series], keep: SampleFilter | None = None, *, scale: float = 1.0
) -> Histogram | None:
    """The first source that is a histogram with data, merged over its label sets."""
    for series in sources:
        found = _find_histogram(families, series.family)
        if found is None:
            continue
        fam = found[1]
        if fam.shape is not None and keep is None:
            merged = merge_histograms(_planned_histograms(fam, series.match))
        else:
            merged = merge_histograms(list(_histogram_groups(fam, series.match, keep)))
        if merged is not None:
            return scale_histogram(merged, scale)
    return None


def first_label(families: Families, names: Iterable[str], label: str) -> str | None:
    """The first non-empty value of ``label`` on any sample of the named families."""
    for name in names:
        fam = find_family(families, name)
        if fam is None:
            continue
        for s in fam.samples:
            value = s.labels.get(label)
            if value:
                return value
    return None
