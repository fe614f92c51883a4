"""Metric-name prefixes that stacks put in front of an engine's names, and what to say about a page no adapter reads.

Ray Serve LLM re-exports vLLM's series as ``ray_vllm:…``, and Ray releases that sanitise metric names as
``ray_vllm_…`` (the engine's ``vllm:`` namespace written ``vllm_``); other stacks rename the same way. A prefix is
either configured per target (``prefix:``) or found on the page: the text whose removal turns the most family names
into an adapter's names (restoring a sanitised ``<namespace>:`` where that is what makes them match). Removing it
leaves a page the engine's adapter reads as is.

A prefix that is a namespace of its own (``lmdeploy:``, ``fastdeploy:``, ``aphrodite:``: one word and a colon) stands
in place of an engine's namespace rather than in front of it: vLLM-compatible servers keep vLLM's names under their
own (LMDeploy's ``lmdeploy:num_requests_waiting``, FastDeploy's ``fastdeploy:gpu_cache_usage_perc``). Removing it puts
back the engine namespace under which the page's names are most often an adapter's (vLLM's before SGLang's where as
many are), so such a page reads as vLLM, not as NIM (whose names are vLLM's without any namespace). Where one of
these projects names a series differently from vLLM, ``RENAMED`` says what vLLM calls it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

from collector.exposition import MetricFamily, Sample

Families = Mapping[str, MetricFamily]

# Families every Python, Go or Rust exporter adds: they say nothing about which engine serves the page.
RUNTIME_PREFIXES = ("python_", "process_", "go_", "promhttp_", "tokio_")
_KVPILOT_PREFIX = "kvpilot_"


# vLLM-compatible servers' own names for what vLLM names otherwise, by their namespace: name there -> vLLM's name.
# Several of a server's names for one vLLM name are summed (read as one family).
RENAMED: dict[str, dict[str, str]] = {
    # LMDeploy (InternLM/lmdeploy lmdeploy/metrics/loggers.py, PrometheusStatLogger): `time_per_output_token_seconds`
    # is observed once per request (its mean time per output token), `iter_token_latency` per token: vLLM's
    # inter-token latency. `num_api_requests_waiting` counts requests its API server holds until an engine instance
    # (request handle) is free, beside the engine's own `num_requests_waiting`: both are queued at this replica
    # (the server's log line: "API server (completed/routed/waiting): 1 / 50 / 50, Engine (running/waiting): 45 / 5",
    # InternLM/lmdeploy pull request #4297), so both are the replica's waiting requests.
    "lmdeploy": {
        "iter_token_latency": "inter_token_latency_seconds",
        "num_api_requests_waiting": "num_requests_waiting",
    },
    # FastDeploy (PaddlePaddle/FastDeploy): `num_requests_enqueued` holds requests queued and not yet scheduled,
    # `num_requests_waiting` those scheduled and waiting for KV blocks; with `num_requests_running` they cover every
    # request the server holds (its metrics test, tests/ci_use/metrics: "enqueued + waiting cover the non-running").
    "fastdeploy": {"num_requests_enqueued": "num_requests_waiting"},
    # GPUStack (gpustack/gpustack gpustack/assets/metrics_config/metrics_config.yaml): a worker's unified page renames
    # each engine's series into `gpustack:` (vLLM's, SGLang's and MindIE's alike), mostly to vLLM's names; these
    # three differ. `kv_cache_usage_ratio` is vLLM's `kv_cache_usage_perc` (SGLang's `token_usage`, MindIE's
    # `npu_cache_usage_perc`: a fraction in each); `request_preemptions` is `num_preemptions`; and
    # `time_per_output_token_seconds` is vLLM's per-request `request_time_per_output_token_seconds` (what vLLM 0.11+
    # maps there), so it is not read as the inter-token latency (`inter_token_latency_seconds` is that).
    "gpustack": {
        "kv_cache_usage_ratio": "kv_cache_usage_perc",
        "request_preemptions": "num_preemptions",
        "time_per_output_token_seconds": "request_time_per_output_token_seconds",
    },
}


# The vLLM-compatible servers known to write vLLM's names under a namespace of their own. Written sanitised
# (``lmdeploy_num_requests_running``, as a stack that rewrites names for Prometheus would), such a namespace reads
# exactly like a stack's prefix in front of NIM's bare names (vLLM's without ``vllm:``); nothing on the page tells
# the two apart (NIM writes vLLM V0's and V1's names alike). So it is read as a namespace only for these servers,
# whose own names (``RENAMED``) then count as on a page written with the colon: an unknown ``foo_`` before vLLM's
# bare names is still a prefix before NIM's.
SANITISED_NAMESPACES = frozenset({"lmdeploy", "fastdeploy", "aphrodite", "gpustack"})


def is_namespace(prefix: str) -> bool:
    """Whether ``prefix`` is a namespace of its own (one word and a colon, ``lmdeploy:``; or ``lmdeploy_``, a known
    compatible server's namespace written sanitised), standing in place of an engine's namespace rather than in
    front of it."""
    if len(prefix) > 1 and prefix.endswith(":"):
        return ":" not in prefix[:-1]
    return prefix.endswith("_") and prefix[:-1] in SANITISED_NAMESPACES


_SAMPLE_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def _renamed(prefix: str, rest: str) -> str:
    """vLLM's name for the server's ``rest`` (a family's or a sample's: ``request_preemptions_total`` is renamed with
    its family ``request_preemptions``, as the parser's selector asks by either)."""
    renames = RENAMED.get(prefix[:-1])
    if not renames:
        return rest
    if rest in renames:
        return renames[rest]
    for suffix in _SAMPLE_SUFFIXES:
        if rest.endswith(suffix) and rest[: -len(suffix)] in renames:
            return renames[rest[: -len(suffix)]] + suffix
    return rest


def namespace_behind(names: Iterable[str], prefix: str, namespaces: Iterable[str], known: Collection[str]) -> str:
    """The engine namespace that ``prefix``, a namespace of its own, stands in for on a page of these family names
    (``"vllm:"``): the one under which the most of them are ``known`` names, the first of ``namespaces`` where
    several are as good; ``""`` when none (then the names are read bare, as NIM's or MindIE's are)."""
    if not is_namespace(prefix) or not known:
        return ""
    rests = [_renamed(prefix, n[len(prefix) :]) for n in names if len(n) > len(prefix) and n.startswith(prefix)]
    best, most = "", 0
    for namespace in namespaces:
        count = sum(1 for rest in rests if f"{namespace}:{rest}" in known)
        if count > most:
            best, most = f"{namespace}:", count
    return best


def restore_namespace(bare: str, namespaces: Collection[str]) -> str:
    """``vllm_num_requests_running`` → ``vllm:num_requests_running`` where ``vllm`` is an engine namespace that a
    stack wrote with ``_`` (Prometheus-sanitised names); any other name unchanged."""
    head, sep, rest = bare.partition("_")
    return f"{head}:{rest}" if sep and rest and head in namespaces else bare


def unprefixed(name: str, prefix: str, namespaces: Collection[str]) -> str | None:
    """The engine's own name behind ``prefix``, or None when ``name`` does not carry it."""
    if len(name) <= len(prefix) or not name.startswith(prefix):
        return None
    return restore_namespace(name[len(prefix) :], namespaces)


def prefixed_wanted(prefix: str, wanted: Collection[str], namespaces: Collection[str]) -> Callable[[str], bool]:
    """A parser selector for a prefixed page: wanted names, with or without the prefix (for a namespace of its own,
    also with any engine namespace in its place)."""
    swapped = is_namespace(prefix)

    def keep(name: str) -> bool:
        if name in wanted:
            return True
        bare = unprefixed(name, prefix, namespaces)
        if bare is None:
            return False
        if bare in wanted:
            return True
        if swapped:
            rest = _renamed(prefix, name[len(prefix) :])
            return any(f"{namespace}:{rest}" in wanted for namespace in namespaces)
        return False

    return keep


def strip_prefix(
    families: Families, prefix: str, namespaces: Collection[str] = (), known: Collection[str] = ()
) -> dict[str, MetricFamily]:
    """The page as the engine itself would have served it: ``prefix`` removed from family and sample names (and a
    sanitised engine namespace restored; for a prefix that is a namespace of its own, the engine namespace it stands
    for put back, ``namespace_behind`` against ``known``, and the server's own names renamed, ``RENAMED``).

    Families without the prefix are kept as they are (a stack's own series, GPU series); where both a prefixed
    and an unprefixed family of one name exist, the unprefixed one (the engine's own) wins.
    """
    into = namespace_behind(families, prefix, namespaces, known)

    def bare_name(name: str) -> str | None:
        if not into:
            return unprefixed(name, prefix, namespaces)
        if len(name) <= len(prefix) or not name.startswith(prefix):
            return None
        return into + name[len(prefix) :]

    out: dict[str, MetricFamily] = {}
    merged: dict[str, MetricFamily] = {}
    for name, fam in families.items():
        bare = bare_name(name)
        if bare is None:
            out.setdefault(name, fam)
            continue
        renamed = into + _renamed(prefix, name[len(prefix) :]) if into else bare
        if bare in families or renamed in families:  # the engine's own family of that name wins
            continue
        samples = [
            Sample(
                renamed + s.name[len(name) :] if s.name.startswith(name) else bare_name(s.name) or s.name,
                s.labels,
                s.value,
                s.timestamp,
            )
            for s in fam.samples
        ]
        if renamed in merged:  # two of the server's names for one of vLLM's: one family of both
            first = merged[renamed]
            samples = [*first.samples, *samples]
            fam = first
        merged[renamed] = out[renamed] = MetricFamily(renamed, fam.type, fam.help, samples, fam.unit)
    return out


def _boundaries(name: str) -> Iterable[int]:
    """Where a prefix may end: after a ``_`` or ``:`` (never inside a word)."""
    for i, ch in enumerate(name[:-1]):
        if ch in "_:":
            yield i + 1


def find_prefix(
    names: Iterable[str], known: Collection[str], namespaces: Collection[str] = ()
) -> tuple[str, int] | None:
    """The prefix that turns the most family names into ``known`` names, and how many; None when none does.

    The shortest cut that matches wins for each name, so ``ray_vllm_num_requests_running`` counts for ``ray_``
    (vLLM's name, namespace restored) rather than ``ray_vllm_`` (which would leave NIM's bare name). A cut after a
    namespace of its own (``lmdeploy:``) also matches where an engine namespace in its place makes a known name.
    """

    def _behind_namespace(head: str, rest: str) -> bool:
        if not is_namespace(head):
            return False
        rest = _renamed(head, rest)
        return any(f"{namespace}:{rest}" in known for namespace in namespaces)

    counts: Counter[str] = Counter()
    for name in names:
        if name in known:
            continue
        for cut in _boundaries(name):
            bare = name[cut:]
            if bare in known or restore_namespace(bare, namespaces) in known or _behind_namespace(name[:cut], bare):
                counts[name[:cut]] += 1
                break
    if not counts:
        return None
    prefix, count = max(counts.items(), key=lambda kv: (kv[1], len(kv[0])))
    return prefix, count


def _stem(name: str) -> str:
    """A family's leading word: up to its first ``:`` (engine namespaces), else its first ``_``."""
    colon = name.find(":")
    if colon > 0:
        return name[: colon + 1]
    under = name.find("_")
    return name[: under + 1] if under > 0 else name


def common_stems(names: Iterable[str], limit: int = 3) -> list[tuple[str, int]]:
    """The most frequent leading words of the family names (runtime families left out), most frequent first."""
    counts = Counter(_stem(n) for n in names if not n.startswith(RUNTIME_PREFIXES))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


def is_kvpilot_page(names: Collection[str]) -> bool:
    """kvpilot's own /metrics: every non-runtime family is one of ours."""
    own = [n for n in names if not n.startswith(RUNTIME_PREFIXES)]
    return bool(own) and all(n.startswith(_KVPILOT_PREFIX) for n in own)
