"""The PromQL kvpilot asks of a large fleet: one source for the recording rules it ships (``alerts.recording``)
and for the ad-hoc queries it runs where those rules are not installed.

Per deployment (labels ``namespace`` and ``deployment``): the signals ``FleetState`` would sum over ready
replicas — queue, KV usage mean/max, request and token rates, arrival rate, replica counts — and the TTFT, ITL
and queue-time histograms as bucket increases summed ``by (le, namespace, deployment)``. Every series carries
``kvpilot_signal="<name>"`` so that one query returns them all and the answer names what each series is.

Per replica, only where a detector needs one (chosen server-side, so the answer grows with the sick replicas,
not the fleet): KV usage from the level where kv_exhaustion starts projecting, requests running with no token
progress (stuck_gpu, the planner's stuck replicas), NVIDIA GPUs with an XID, a double-bit ECC error or a failed
row remap, AMD GPUs serving a stuck replica or with an uncorrectable ECC error. vLLM V1 names; the ``deployment``
label comes from relabelling (docs/scaling-large-fleets.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

DEPLOYMENT_LABEL = "deployment"
SIGNAL_LABEL = "kvpilot_signal"
BY = f"namespace, {DEPLOYMENT_LABEL}"
RECORD_PREFIX = "deployment:kvpilot_"
RULE_WINDOW = "1m"  # recorded at a fixed window; FleetState's default rate_window_s is the same 60 s
# Inference targets are the ones relabelled with a deployment: `up` of anything else is not a replica.
TARGET_SELECTOR = f'{DEPLOYMENT_LABEL}!=""'

Expr = Callable[[str, str], str]  # (window, selector) -> PromQL


@dataclass(frozen=True, slots=True)
class Signal:
    name: str  # the kvpilot_signal label value, and the DeploymentAggregate field it fills
    record: str  # the recorded series' name
    expr: Expr


def _sum(metric: str) -> Expr:
    return lambda w, s: f"sum by ({BY}) ({metric}{{{s}}})"


def _rate(metric: str) -> Expr:
    return lambda w, s: f"sum by ({BY}) (rate({metric}{{{s}}}[{w}]))"


def _kv(op: str) -> Expr:
    # A pod's usage is the mean over its data-parallel engines (collector.engines.vllm), then over pods.
    return lambda w, s: f"{op} by ({BY}) (avg by ({BY}, pod) (vllm:kv_cache_usage_perc{{{s}}}))"


def _arrival(w: str, s: str) -> str:
    # FleetState: finished rate + d(waiting + running)/dt. deriv() over a subquery of the deployment's sum.
    in_flight = f"sum by ({BY}) (vllm:num_requests_waiting{{{s}}}) + sum by ({BY}) (vllm:num_requests_running{{{s}}})"
    return f"clamp_min({_rate('vllm:request_success_total')(w, s)} + deriv(({in_flight})[{w}:]), 0)"


def _histogram(metric: str, part: str) -> Expr:
    by = f"le, {BY}" if part == "bucket" else BY
    return lambda w, s: f"sum by ({by}) (increase({metric}_{part}{{{s}}}[{w}]))"


_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "queue_time": "vllm:request_queue_time_seconds",
}

SIGNALS: tuple[Signal, ...] = (
    Signal("replicas", f"{RECORD_PREFIX}replicas:count", lambda w, s: f"count by ({BY}) (up{{{s}}})"),
    Signal("ready_replicas", f"{RECORD_PREFIX}ready_replicas:sum", lambda w, s: f"sum by ({BY}) (up{{{s}}})"),
    Signal("requests_waiting", f"{RECORD_PREFIX}requests_waiting:sum", _sum("vllm:num_requests_waiting")),
    Signal("requests_running", f"{RECORD_PREFIX}requests_running:sum", _sum("vllm:num_requests_running")),
    Signal("kv_usage_mean", f"{RECORD_PREFIX}kv_usage:avg", _kv("avg")),
    Signal("kv_usage_max", f"{RECORD_PREFIX}kv_usage:max", _kv("max")),
    Signal("requests_finished_rate", f"{RECORD_PREFIX}requests_finished:rate1m", _rate("vllm:request_success_total")),
    Signal("arrival_rate", f"{RECORD_PREFIX}arrival:rate1m", _arrival),
    Signal("prompt_tokens_rate", f"{RECORD_PREFIX}prompt_tokens:rate1m", _rate("vllm:prompt_tokens_total")),
    Signal("generation_tokens_rate", f"{RECORD_PREFIX}generation_tokens:rate1m", _rate("vllm:generation_tokens_total")),
    Signal("preemptions_rate", f"{RECORD_PREFIX}preemptions:rate1m", _rate("vllm:num_preemptions_total")),
    Signal("prefix_hits_rate", f"{RECORD_PREFIX}prefix_hits:rate1m", _rate("vllm:prefix_cache_hits_total")),
    Signal("prefix_queries_rate", f"{RECORD_PREFIX}prefix_queries:rate1m", _rate("vllm:prefix_cache_queries_total")),
    *(
        Signal(f"{field}_{part}", f"{RECORD_PREFIX}{field}_seconds_{part}:increase1m", _histogram(metric, part))
        for field, metric in _HISTOGRAMS.items()
        for part in ("bucket", "sum", "count")
    ),
)
HISTOGRAM_FIELDS = tuple(_HISTOGRAMS)


def selector(extra: str = "") -> str:
    """The label matchers every raw series is read with: inference targets, narrowed by ``extra``."""
    return TARGET_SELECTOR + (f",{extra}" if extra else "")


def rules_query(extra: str = "") -> str:
    """Every recorded series (the rules installed answer it; an empty answer means they are not)."""
    return f'{{__name__=~"{RECORD_PREFIX}.+"' + (f",{extra}" if extra else "") + "}"


def adhoc_query(window: str, extra: str = "") -> str:
    """The same series as ``rules_query`` computed now, each labelled with its signal, in one query."""
    s = selector(extra)
    parts = [f'label_replace({sig.expr(window, s)}, "{SIGNAL_LABEL}", "{sig.name}", "", "")' for sig in SIGNALS]
    return " or ".join(parts)


def sick_replicas(window: str, extra: str, *, kv_from: float, limit: int) -> str:
    """``(namespace, pod)`` of replicas a per-replica detector must see, at most ``limit`` (highest value
    first: stuck replicas by requests held, then the fullest KV pools)."""
    kv = f"max by (namespace, pod) (vllm:kv_cache_usage_perc{{{selector(extra)}}}) >= {kv_from:g}"
    return f"topk({limit}, ({stuck_replicas(window, extra)}) or ({kv}))"


def stuck_replicas(window: str, extra: str) -> str:
    """``(namespace, pod)`` of replicas holding running requests with no token generated over ``window``, valued
    by the requests they hold."""
    s = selector(extra)
    return (
        f"max by (namespace, pod) (vllm:num_requests_running{{{s}}}) > 0 unless on (namespace, pod) "
        f"(sum by (namespace, pod) (rate(vllm:generation_tokens_total{{{s}}}[{window}])) > 0)"
    )


def replica_series(names_regex: str, window: str, extra: str, *, kv_from: float, limit: int) -> str:
    """Every wanted family's raw series, for the sick replicas only."""
    sick = sick_replicas(window, extra, kv_from=kv_from, limit=limit)
    return f'{{__name__=~"{names_regex}",{selector(extra)}}} and on (namespace, pod) ({sick})'


GPU_FAULTS = (
    "DCGM_FI_DEV_XID_ERRORS != 0",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS > 0",
)


def gpu_series(names_regex: str, extra: str = "") -> str:
    """Every DCGM series of the GPUs that show a fault, and nothing of the healthy ones."""
    sel = f",{extra}" if extra else ""
    faults = " or ".join(f"({f.replace(' ', f'{{{extra}}} ', 1) if extra else f})" for f in GPU_FAULTS)
    return f'{{__name__=~"{names_regex}"{sel}}} and on (instance, gpu) ({faults})'


# AMD device-metrics-exporter (collector.gpus.amd): a GPU is one (exporter target, its host, gpu_id, partition): the
# target is (job, instance), as kvpilot reads it, so that two jobs on one address (or one exporter's several pages)
# never share a GPU; the names with either prefix the exporter ships (none, or ``amd_``).
AMD_GPU = "job, instance, hostname, gpu_id, gpu_partition_id"
AMD_PREFIXES = ("", "amd_")


def _amd_names(*names: str) -> str:
    return "|".join(p + n for n in names for p in AMD_PREFIXES)


def amd_gpu_series(names_regex: str, window: str, extra: str = "", *, limit: int) -> str:
    """Every device-metrics-exporter series of the AMD GPUs a detector must see, and nothing of the others: those
    serving a stuck replica (the stuck-GPU detector's hang and idle-while-running read their utilisation; joined
    by the ``namespace`` and ``pod`` the exporter labels a GPU with, the ``topk(limit)`` replicas holding the most
    requests) and those with an uncorrectable ECC error (shown, as DCGM's double-bit errors are). No XID is read:
    AMD has none. ``gpu_health`` comes with a selected GPU's series but selects none (the exporter writes 0 for
    every GPU of a node whose gpuagent it cannot reach)."""
    sel = f",{extra}" if extra else ""
    serving = (
        f'{{__name__=~"{_amd_names("gpu_gfx_activity", "gpu_gfx_busy_instantaneous")}"{sel}}} '
        f"and on (namespace, pod) (topk({limit}, {stuck_replicas(window, extra)}))"
    )
    ecc = f'{{__name__=~"{_amd_names("gpu_ecc_uncorrect_total")}"{sel}}} > 0'
    return f'{{__name__=~"{names_regex}"{sel}}} and on ({AMD_GPU}) (({serving}) or ({ecc}))'


# -- GPUs that left their exporter (``vanished``) -------------------------------------------------------------------

# A GPU as each exporter names it (collector.gpus.dcgm, .amd): its exporter target (job, instance), its host, and its
# index (and MIG instance, AMD partition, UUID). A series that changes only in other labels (the pod using the GPU, a
# driver version) is the same GPU.
DCGM_GPU = "job, instance, Hostname, gpu, UUID, uuid, GPU_I_ID"
AMD_MODE = "gpu_compute_partition_type, gpu_memory_partition_type"
VANISHED_PART = "vanished"


def vanished_dcgm(names_regex: str, lookback: str, extra: str = "") -> str:
    """The last series of every dcgm-exporter GPU listed within ``lookback`` and not now, by an exporter that
    answers (``up == 1``): a GPU fallen off the bus (XID 79). Not one whose exporter is down (``target_down``), nor a
    MIG re-cut: a GPU whose UUID its exporter now lists under another GPU or instance (MIG turned on or off, an
    instance destroyed), as ``FleetState`` rules for a scraped page. The answer holds the gone GPUs' series only."""
    was, now = _listed(names_regex, "gpu", lookback, extra)
    gone = f"group by ({DCGM_GPU}) ({was}) unless on ({DCGM_GPU}) group by ({DCGM_GPU}) ({now})"
    for uuid in ("UUID", "uuid"):
        gone = f"({gone}) unless on (job, instance, {uuid}) group by (job, instance, {uuid}) ({_with(now, uuid)})"
    return _gone_series(was, DCGM_GPU, gone)


def vanished_amd(names_regex: str, lookback: str, extra: str = "") -> str:
    """``vanished_dcgm`` for AMD's device-metrics-exporter: a GPU (or partition) listed within ``lookback`` and not
    now, by an exporter that answers. Not a re-cut: its ``gpu_uuid`` listed now under another GPU or partition, or
    its node listing GPUs now, none in its partition mode (SPX <-> CPX/DPX done a node at a time: the old keys go,
    new ones come in another mode). A partition gone while its node still lists its mode is lost."""
    was, now = _listed(names_regex, "gpu_id", lookback, extra)
    node = "job, instance, hostname"
    gone = f"group by ({AMD_GPU}, gpu_uuid, {AMD_MODE}) ({was}) unless on ({AMD_GPU}) group by ({AMD_GPU}) ({now})"
    gone = f"({gone}) unless on (job, instance, gpu_uuid) group by (job, instance, gpu_uuid) ({_with(now, 'gpu_uuid')})"
    lost = (
        f"(({gone}) and on ({node}, {AMD_MODE}) group by ({node}, {AMD_MODE}) ({now})) "
        f"or (({gone}) unless on ({node}) group by ({node}) ({now}))"
    )
    return _gone_series(was, AMD_GPU, lost)


# amd_smi_exporter (collector.gpus.amd SMI_READS) names no pod, host, UUID or partition, and labels a GPU's index
# with a label named after each metric (amd_gpu_use_percent{gpu_use_percent="0"}): a GPU is its target's node
# (Prometheus' `node` label, relabelled from the pod's node) and that index. Its utilisation stands for the GPU.
SMI_WITNESS = ("amd_gpu_use_percent", "gpu_use_percent")


def smi_gpu_series(names_regex: str, window: str, extra: str = "", *, limit: int) -> str:
    """Every amd_smi_exporter series of the GPUs on a node (the ``node`` label, on the exporter's and the replicas'
    series alike) where one of the ``topk(limit)`` stuck replicas runs: the stuck-GPU detector joins a GPU that names
    no pod to the replicas of its node, as when scraped. amd_smi_exporter exports no ECC or XID: no GPU is selected
    by a fault. Without a ``node`` label nothing is selected."""
    sel = f",{extra}" if extra else ""
    s = selector(extra)
    stuck = (
        f'max by (namespace, pod, node) (vllm:num_requests_running{{{s},node!=""}}) > 0 unless on (namespace, pod) '
        f"(sum by (namespace, pod) (rate(vllm:generation_tokens_total{{{s}}}[{window}])) > 0)"
    )
    return f'{{__name__=~"{names_regex}",node!=""{sel}}} and on (node) group by (node) (topk({limit}, {stuck}))'


def vanished_smi(lookback: str, extra: str = "") -> str:
    """``vanished_dcgm`` for amd_smi_exporter: a GPU whose utilisation its exporter listed within ``lookback`` and
    not now, while the exporter answers; the answer is that series' last value. No re-cut rule: the exporter names
    no partition or UUID."""
    name, index = SMI_WITNESS
    was, now = _listed(name, index, lookback, extra)
    gpu = f"job, instance, {index}"
    return _gone_series(was, gpu, f"group by ({gpu}) ({was}) unless on ({gpu}) group by ({gpu}) ({now})")


def _listed(names_regex: str, index: str, lookback: str, extra: str) -> tuple[str, str]:
    """(every GPU series' last value within ``lookback``, the series listed now)."""
    now = f'{{__name__=~"{names_regex}",{index}!=""' + (f",{extra}" if extra else "") + "}"
    return f"last_over_time({now}[{lookback}])", now


def _with(selector: str, label: str) -> str:
    return selector[:-1] + f',{label}!=""}}'


def _gone_series(was: str, gpu: str, gone: str) -> str:
    # last_over_time keeps the metric name: the answer reads as the GPU's page did when it was last listed
    return f"{was} and on ({gpu}) (({gone}) and on (job, instance) (up == 1))"


def down_targets(extra: str = "") -> str:
    return f"up{{{selector(extra)}}} == 0"


# -- several queries in one request --------------------------------------------------------------------------------

PART_LABEL = "kvpilot_part"


def tagged(query: str, part: str) -> str:
    """``query``'s series with the label ``kvpilot_part="<part>"`` added (``label_replace`` keeps the metric name): in
    a ``union``, no series of this part can have a label set equal to another part's, so none is dropped."""
    return f'label_replace({query}, "{PART_LABEL}", "{part}", "", "")'


def union(*queries: str) -> str:
    """One query answering every series of each of ``queries``: ``(a) or (b) or ...``. ``or`` keeps every series of
    its left side and those of its right side whose label set, the metric name aside, the left has not: the parts
    must not share label sets (different targets, or a part ``tagged``), or a part loses series."""
    return " or ".join(f"({q})" for q in queries)


# -- narrowing to some deployments (a shard's) -------------------------------------------------------------------

# Bytes of deployment names per matcher. Past it, the deployments are split over several matchers, each asked in
# its own queries: the ad-hoc aggregate query repeats its selector 24 times, so 8 KiB of names is ~200 KB of POST
# body, well under the 10 MiB a Go server (Prometheus, Thanos, Mimir) parses of a form.
MAX_MATCHER_BYTES = 8 * 1024
_RE2_SPECIAL = re.compile(r"[\\.^$|?*+()\[\]{}]")


def known_deployments(extra: str = "") -> str:
    """Every deployment with an inference target, one small series each (``count`` of its targets): what a shard's
    matchers are chosen from."""
    return f"count by ({BY}) (up{{{selector(extra)}}})"


def deployment_matchers(deployments: Iterable[tuple[str, str]], max_bytes: int = MAX_MATCHER_BYTES) -> list[str]:
    """Label matchers that select these ``(namespace, deployment)`` pairs, split so that no matcher's names pass
    ``max_bytes`` (a longer name gets a matcher of its own); none for none. Each is
    ``namespace=~"...",deployment=~"..."``: a plain alternation of literals, which Prometheus answers from its index
    (set matches) rather than by running the regex. A name shared across namespaces may select a little more than
    asked (a pair's name with another pair's namespace): a superset, which the caller cuts exactly. Every pair of a
    name goes to the same matcher, so no two matchers select the same series."""
    by_name: dict[str, set[str]] = {}
    for ns, name in deployments:
        by_name.setdefault(name, set()).add(ns)
    chunks: list[dict[str, set[str]]] = []
    size = max_bytes
    for name in sorted(by_name):
        if size + len(name) + 1 > max_bytes:
            chunks.append({})
            size = 0
        chunks[-1][name] = by_name[name]
        size += len(name) + 1
    return [
        f"namespace=~{any_of(set().union(*chunk.values()))},{DEPLOYMENT_LABEL}=~{any_of(chunk)}" for chunk in chunks
    ]


def any_of(values: Iterable[str]) -> str:
    """A PromQL string holding an RE2 regex (anchored by Prometheus) matching exactly these values."""
    alternatives = "|".join(_RE2_SPECIAL.sub(lambda m: "\\" + m.group(), v) for v in sorted(set(values)))
    return json.dumps(alternatives)
