"""Prometheus series back into what a scrape of their targets would have produced: the selector of the families the
adapters read, the series regrouped by target (``job``, ``instance``), rebuilt into the `MetricFamily` / `Sample`
objects the text parser builds from a page, and adapted by the same adapters into a `ScrapeResult` per target.
Pure functions over decoded answers, so the PromQL source (``collector.discovery.promql``) runs them in its reader
process."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

from collector.adapt import WANTED_FAMILIES, AdaptedPage, NoGpuFamilies, adapt_families
from collector.exposition import MetricFamily, Sample
from collector.gpus import amd
from collector.promql import decode, expressions
from collector.samples import GoneGpuSample, TargetInfo
from collector.scrape import ScrapeResult

# Labels Prometheus attaches to every series of a target (not part of the page the target served).
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "node", "container", "service", "endpoint", expressions.DEPLOYMENT_LABEL}
)
log = logging.getLogger(__name__)
SUFFIXES = ("_bucket", "_sum", "_count", "_total")
# External labels that tell apart copies of one series kept by several Prometheus servers (an HA pair behind a
# Thanos Querier or a federation without deduplication): prometheus-operator's `prometheus_replica`, the `replica`
# of Thanos' docs, the Cortex/Mimir HA tracker's `__replica__`. Two series that differ only in these (or not at all)
# are one series read twice: one is read, never their sum, as Thanos' `--query.replica-label` deduplication does.
REPLICA_LABELS = ("prometheus_replica", "replica", "__replica__")


def families_selector(wanted: Sequence[str] | frozenset[str] = WANTED_FAMILIES) -> str:
    """``{__name__=~"..."}`` matching every sample name of the wanted families (and ``up``)."""
    return '{__name__=~"' + names_regex(wanted) + '|up"}'


def names_regex(wanted: Sequence[str] | frozenset[str] = WANTED_FAMILIES) -> str:
    """An RE2 regex (Prometheus anchors it) matching every sample name of the wanted families."""
    return _names_regex(frozenset(wanted))


@lru_cache(maxsize=32)
def _names_regex(wanted: frozenset[str]) -> str:
    # Kept: every PromQL round asks with the same few sets, and escaping ~100 names cost ~1 ms of the event loop's
    # CPU each time (twice a tick in aggregates mode, in every shard's instance as in one unsharded).
    bases = sorted({_strip_total(n) for n in wanted})
    alternatives = "|".join(re.escape(b) for b in bases)
    # RE2 has non-capturing groups. `\:` is not valid RE2: unescape ':'.
    return "(?:" + alternatives.replace("\\:", ":") + ")(?:_total|_bucket|_sum|_count)?"


def _strip_total(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _split(name: str, wanted: frozenset[str]) -> tuple[str, str]:
    """(family base name, suffix) of a sample name, preferring the longest wanted family."""
    if name in wanted and not name.endswith("_total"):
        return name, ""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in wanted or base + "_total" in wanted:
                return base, suffix
    return name, ""


def rebuild_families(
    series: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, str],
    wanted: frozenset[str] = WANTED_FAMILIES,
    replica_pods: frozenset[tuple[str, str]] = frozenset(),
    replica_labels: Sequence[str] = REPLICA_LABELS,
) -> dict[str, MetricFamily]:
    """Families as the text parser would build them from the page these series were scraped from.

    ``series`` are Prometheus query results (``metric`` labels incl. ``__name__``, ``value``);
    ``metadata`` maps a metric name to its type. Without metadata the type is inferred from suffixes.
    ``replica_pods``: ``(namespace, pod)`` of the replicas read with them: a GPU exporter's series naming one of
    them keeps its ``namespace``, ``pod`` and ``container`` (the GPU's workload, as the page wrote it and
    ``honor_labels`` kept it), so the GPU joins its replica by pod as when scraped; any other ``pod`` on a GPU
    series is taken for the target's own (the exporter's pod) and dropped, as every other series' is.
    ``replica_labels``: series that differ only in these (or not at all) are one, read once (``REPLICA_LABELS``)."""
    grouped: dict[str, list[tuple[str, str, dict[str, str], float]]] = {}
    # each series once: (name, labels) -> (its copy's replica label values, where it is in grouped)
    seen: dict[tuple[str, frozenset[tuple[str, str]]], tuple[tuple[str, ...], str, int]] = {}
    for s in series:
        labels = dict(s["metric"])
        name = labels.pop("__name__")
        copy = tuple(labels.pop(label, "") for label in replica_labels)
        attributed = (
            replica_pods and _is_gpu_name(name) and (labels.get("namespace", ""), labels.get("pod", "")) in replica_pods
        )
        for label in _NOT_WORKLOAD if attributed else TARGET_LABELS:
            labels.pop(label, None)
        base, suffix = _split(name, wanted)
        sample = (name, suffix, labels, float(s["value"][1]))
        key = (name, frozenset(labels.items()))
        earlier = seen.get(key)
        if earlier is None:
            samples = grouped.setdefault(base, [])
            seen[key] = (copy, base, len(samples))
            samples.append(sample)
        elif copy < earlier[0]:  # the copy of the first replica in label order is read, the same one every tick
            seen[key] = (copy, earlier[1], earlier[2])
            grouped[earlier[1]][earlier[2]] = sample
    families: dict[str, MetricFamily] = {}
    for base, samples in grouped.items():
        kind = metadata.get(base) or metadata.get(base + "_total") or _infer(samples)
        if (kind == "counter" and any(suffix == "_total" for _, suffix, _, _ in samples)) or kind in (
            "histogram",
            "summary",
        ):
            fam_name = base
        else:
            fam_name = samples[0][0] if len({n for n, _, _, _ in samples}) == 1 else base
        fam = families.setdefault(fam_name, MetricFamily(fam_name, kind))
        fam.samples.extend(Sample(name, labels, value) for name, _, labels, value in samples)
    return families


_WORKLOAD_LABELS = frozenset({"namespace", "pod", "container"})
_NOT_WORKLOAD = TARGET_LABELS - _WORKLOAD_LABELS


def _is_gpu_name(name: str) -> bool:
    return name.startswith("DCGM_") or name in _AMD_NAMES


def _infer(samples: Sequence[tuple[str, str, dict[str, str], float]]) -> str:
    suffixes = {suffix for _, suffix, _, _ in samples}
    if "_bucket" in suffixes:
        return "histogram"
    if any("quantile" in labels for _, _, labels, _ in samples):
        return "summary"
    if suffixes == {"_total"}:
        return "counter"
    return "gauge"


def _target(key: tuple[str, str], series: Sequence[Mapping[str, Any]]) -> TargetInfo:
    job, instance = key
    first = series[0]["metric"]
    names = {s["metric"].get("__name__", "") for s in series}
    # A target relabelled with a deployment is a replica, even when all Prometheus has of it is `up == 0`.
    is_gpu = all(_is_gpu_name(n) or n == "up" for n in names) and not first.get(expressions.DEPLOYMENT_LABEL)
    pod = first.get("pod") or instance
    return TargetInfo(
        # Prometheus does not keep the metrics path, and one instance may serve several jobs' pages:
        # the identity is where the series came from, not a URL to scrape.
        url=f"promql://{job}/{instance}",
        kind="gpu" if is_gpu else "engine",
        namespace=first.get("namespace") or "default",
        deployment=first.get("deployment") or _deployment_from_pod(pod) or job,
        pod=pod,
        node=first.get("node") or _hostname_node(first, pod),
    )


# AMD's GPU exporters' sample names (their gauges have no suffix): a target serving only these is a GPU page.
_AMD_NAMES = amd.DME_FAMILIES | amd.SMI_FAMILIES


def _hostname_node(labels: Mapping[str, Any], pod: str) -> str:
    """dcgm-exporter's ``Hostname`` as the node, unless it is the exporter pod's own name (``os.Hostname()`` in a pod
    without ``NODE_NAME``; collector/gpus/dcgm.py): then the node is unknown and no finding names it."""
    host = labels.get("Hostname") or labels.get("hostname") or ""
    return "" if host == pod else host


_POD_SUFFIX = re.compile(r"-(?:[a-z0-9]{6,10}-[a-z0-9]{5}|\d+)$")


def _deployment_from_pod(pod: str) -> str:
    """``llama-7d9f8c6b5-x2x9q`` -> ``llama`` (Deployment), ``llama-3`` -> ``llama`` (StatefulSet)."""
    return _POD_SUFFIX.sub("", pod) if _POD_SUFFIX.search(pod) else ""


def read_answers(
    answers: Sequence[tuple[str, bytes]],
    down: Sequence[tuple[str, bytes]] | None,
    metadata: Mapping[str, str],
    now: float,
    jobs: frozenset[str],
    started: float,
    *,
    stop: threading.Event | None = None,
    replica_labels: Sequence[str] = REPLICA_LABELS,
    prefer: Mapping[str, tuple[str, ...]] | None = None,
) -> list[ScrapeResult]:
    """In the reader (process or thread): decode the answers, regroup their series by target, adapt each target's
    as its page. ``down`` (aggregates mode, where every target answered is kept): more answers; an inference
    target's ``up == 0`` series, here or in ``answers`` (a part of a union, tagged), reports it down. In ``replicas``
    mode (``down`` None) only ``jobs``' targets, or those serving a wanted family or labelled with a deployment
    (``_inference_target``), are kept. ``stop`` (a thread's reader; a process is ended instead): set, reading ends
    with ``Stopped`` at the next answer or target.
    ``replica_labels``: the labels that tell copies of one series apart (``rebuild_families``); each target's page
    is read from one copy (``_one_copy``), ``prefer`` (target URL -> copy, the last read) kept while as complete."""
    by_target: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    gone: dict[tuple[str, str], list[Mapping[str, Any]]] = {}  # the tagged part of GPUs that left their exporter
    for where, body in [*answers, *(down or ())]:
        _check(stop)
        for s in decode.vector(decode.answer(body, where), where):
            m = s["metric"]
            part = m.pop(expressions.PART_LABEL, None)  # kvpilot's own tag of a part of a union, no target's label
            into = gone if part == expressions.VANISHED_PART else by_target
            into.setdefault((m.get("job", ""), m.get("instance", "")), []).append(s)
    _one_job_per_page(by_target)
    duration = time.perf_counter() - started
    pods: frozenset[tuple[str, str]] | None = None  # the replicas' pods: looked for once a GPU target is read
    results = []
    for key, group in sorted(by_target.items()):
        if down is not None or key[0] in jobs or (not jobs and _inference_target(group)):
            _check(stop)
            target = _target(key, group)
            if target.kind == "gpu" and pods is None:
                pods = _replica_pods(by_target.values())
            gpu_pods = pods if target.kind == "gpu" and pods is not None else frozenset()
            page, copy = _one_copy(group, replica_labels, (prefer or {}).get(target.url))
            result = _adapt(target, page, metadata, now, duration, gpu_pods, replica_labels)
            results.append(replace(result, copy=copy) if copy and any(copy) else result)
    return _with_gone(results, gone, metadata, now, duration, stop, replica_labels)


def _inference_target(group: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a target is read without ``jobs`` (``replicas`` mode): it serves a wanted family, or its ``up`` carries
    a ``deployment`` label, the inference targets of ``aggregates`` mode, which counts them from ``up``. Such a target
    with only ``up == 0`` is down since before kvpilot read it (loading, crashed, hung): reported down, so that
    ``FleetState`` counts it as a replica not ready, as ``count(up)`` does in ``aggregates`` mode."""
    return any(s["metric"].get("__name__") != "up" or s["metric"].get(expressions.DEPLOYMENT_LABEL) for s in group)


def _one_copy(
    group: Sequence[Mapping[str, Any]], replica_labels: Sequence[str], preferred: tuple[str, ...] | None
) -> tuple[Sequence[Mapping[str, Any]], tuple[str, ...]]:
    """A target's series from one Prometheus copy (its ``up`` from all: down only when every copy says so), and
    that copy's replica label values: the copy with the most series, ``preferred`` (the last read) among the most,
    else the first in label order. Per target, not per series: two servers scrape at different moments, so one
    copy's counters are a few seconds behind the other's, and a page mixing them, or a series hopping between them,
    reads as a counter going down, a restart (``collector.promql.copies`` evens out the switches left)."""
    counts: dict[tuple[str, ...], int] = {}
    for s in group:
        m = s["metric"]
        if m.get("__name__") != "up":
            copy = tuple(m.get(label, "") for label in replica_labels)
            counts[copy] = counts.get(copy, 0) + 1
    if len(counts) < 2:
        return group, next(iter(counts), ())
    most = max(counts.values())
    chosen = (
        preferred
        if preferred is not None and counts.get(preferred) == most
        else min(c for c, n in counts.items() if n == most)
    )
    page = [
        s
        for s in group
        if s["metric"].get("__name__") == "up"
        or tuple(s["metric"].get(label, "") for label in replica_labels) == chosen
    ]
    return page, chosen


def _with_gone(
    results: list[ScrapeResult],
    gone: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    metadata: Mapping[str, str],
    now: float,
    duration: float,
    stop: threading.Event | None,
    replica_labels: Sequence[str],
) -> list[ScrapeResult]:
    """``results`` with the GPUs of ``gone`` (their exporter's last series of them, ``expressions.vanished_dcgm``)
    added to their exporter's result as `GoneGpuSample`: ``FleetState`` tracks each as absent (``vanished``)."""
    read = []
    for key, group in sorted(gone.items()):
        _check(stop)
        target = _target(key, group)
        gpus = tuple(
            GoneGpuSample.of(g)
            for g in _adapt(target, group, metadata, now, duration, frozenset(), replica_labels).gpus
        )
        if gpus:
            read.append(ScrapeResult(target=target, ok=True, timestamp=now, duration_s=duration, gpus=gpus))
    return with_gpus(results, read)


def with_gpus(results: list[ScrapeResult], more: Sequence[ScrapeResult]) -> list[ScrapeResult]:
    """``results`` with the GPUs of ``more`` added to the result of the same target (a target answering no other
    series: its result from ``more``); a target reported down keeps none."""
    if not more:
        return results
    at = {r.target.url: n for n, r in enumerate(results)}
    for extra in more:
        n = at.get(extra.target.url)
        if n is None:
            at[extra.target.url] = len(results)
            results.append(extra)
        elif results[n].ok:
            results[n] = replace(results[n], gpus=results[n].gpus + extra.gpus)
    return results


def gone_gpus(results: Sequence[ScrapeResult]) -> list[ScrapeResult]:
    """Each target's `GoneGpuSample`s among ``results``, as results of their own (``with_gpus`` hands them again)."""
    out = []
    for r in results:
        gone = tuple(g for g in r.gpus if isinstance(g, GoneGpuSample))
        if gone:
            out.append(ScrapeResult(target=r.target, ok=True, timestamp=r.timestamp, duration_s=0.0, gpus=gone))
    return out


def _one_job_per_page(by_target: dict[tuple[str, str], list[Mapping[str, Any]]]) -> None:
    """Two jobs scraping one pod's page (a ServiceMonitor and a PodMonitor on it): the same ``instance``, ``namespace``
    and ``pod`` serving the same series names under two ``job``s is one target read twice. The first job in name
    order is kept, the others dropped (one line logged), so its replica counts once, not twice. The same instance
    serving different names (``instance`` relabelled to the pod, two ports), or other pods (one address, several
    paths), or no ``pod`` label to tell, is read as that many pages, as before."""
    jobs_of: dict[str, list[str]] = {}
    for job, instance in by_target:
        jobs_of.setdefault(instance, []).append(job)
    for instance, jobs in jobs_of.items():
        if len(jobs) < 2:
            continue
        kept: dict[tuple[str, str, frozenset[str]], str] = {}
        for job in sorted(jobs):
            group = by_target[(job, instance)]
            pod = next((s["metric"].get("pod") for s in group if s["metric"].get("__name__") != "up"), None)
            if not pod:
                continue
            names = frozenset(s["metric"].get("__name__", "") for s in group) - {"up"}
            first = kept.setdefault((group[0]["metric"].get("namespace", ""), pod, names), job)
            if first != job:
                del by_target[(job, instance)]
                _log_twice_scraped(instance, first, job)


@lru_cache(maxsize=256)
def _log_twice_scraped(instance: str, kept: str, dropped: str) -> None:
    """Once per (instance, jobs): the read repeats it every tick."""
    log.warning(
        "PromQL source: instance %r is scraped by jobs %r and %r with the same series; reading %r only (a target "
        "counted twice doubles its replica's queue and rates)",
        instance[:200],
        kept[:200],
        dropped[:200],
        kept[:200],
    )


def _replica_pods(groups: Iterable[Sequence[Mapping[str, Any]]]) -> frozenset[tuple[str, str]]:
    """``(namespace, pod)`` of the inference targets among the answers': those serving a series other than ``up``
    and a GPU exporter's (a GPU exporter's ``up`` names its own pod, which no GPU serves)."""
    pods = set()
    for group in groups:
        m = next((s["metric"] for s in group if _is_replica_name(s["metric"].get("__name__", ""))), None)
        if m is not None and m.get("pod"):
            pods.add((m.get("namespace", ""), m["pod"]))
    return frozenset(pods)


def _is_replica_name(name: str) -> bool:
    return name != "up" and not _is_gpu_name(name)


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise decode.Stopped("stopping: the answers' reading abandoned")


def _adapt(
    target: TargetInfo,
    series: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, str],
    now: float,
    duration: float,
    replica_pods: frozenset[tuple[str, str]],
    replica_labels: Sequence[str] = REPLICA_LABELS,
) -> ScrapeResult:
    """``replica_pods``: for a GPU target, the replicas' pods its GPUs may name (``rebuild_families``)."""
    up = [float(s["value"][1]) for s in series if s["metric"].get("__name__") == "up"]
    if up and max(up) == 0:  # every copy (REPLICA_LABELS) says down; one Prometheus scraping it reads its series
        error = "down in Prometheus (up == 0)"
        return ScrapeResult(target=target, ok=False, timestamp=now, duration_s=duration, error=error)
    page = [s for s in series if s["metric"].get("__name__") != "up"]
    try:
        adapted = adapt_families(
            rebuild_families(page, metadata, replica_pods=replica_pods, replica_labels=replica_labels), target, now
        )
    except ValueError as e:
        if not (isinstance(e, NoGpuFamilies) and e.empty):
            return ScrapeResult(
                target=target, ok=False, timestamp=now, duration_s=duration, error=f"unreadable series: {e}"
            )
        # Prometheus is asked only for the families the adapters read, so a "GPU" target with none is an inference
        # job's target of which Prometheus has only `up` (``_target`` cannot tell): no GPUs and no error, as before
        adapted = AdaptedPage(None)
    return ScrapeResult(
        target=target,
        ok=True,
        timestamp=now,
        duration_s=duration,
        engine=adapted.engine,
        replicas=tuple(adapted.replicas),
        gpus=tuple(adapted.gpus),
    )
