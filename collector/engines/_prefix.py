"""Metric-name prefixes that stacks put in front of an engine's names, and what to say about a page no adapter reads.

Ray Serve LLM re-exports vLLM's series as ``ray_vllm:…``, and Ray releases that sanitise metric names as
``ray_vllm_…`` (the engine's ``vllm:`` namespace written ``vllm_``); other stacks rename the same way. A prefix is
either configured per target (``prefix:``) or found on the page: the text whose removal turns the most family names
into an adapter's names (restoring a sanitised ``<namespace>:`` where that is what makes them match). Removing it
leaves a page the engine's adapter reads as is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

from collector.exposition import MetricFamily, Sample

Families = Mapping[str, MetricFamily]

# Families every Python, Go or Rust exporter adds: they say nothing about which engine serves the page.
RUNTIME_PREFIXES = ("python_", "process_", "go_", "promhttp_", "tokio_")
_KVPILOT_PREFIX = "kvpilot_"


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
    """A parser selector for a prefixed page: wanted names, with or without the prefix."""

    def keep(name: str) -> bool:
        if name in wanted:
            return True
        bare = unprefixed(name, prefix, namespaces)
        return bare is not None and bare in wanted

    return keep


def strip_prefix(families: Families, prefix: str, namespaces: Collection[str] = ()) -> dict[str, MetricFamily]:
    """The page as the engine itself would have served it: ``prefix`` removed from family and sample names (and a
    sanitised engine namespace restored).

    Families without the prefix are kept as they are (a stack's own series, GPU series); where both a prefixed
    and an unprefixed family of one name exist, the unprefixed one (the engine's own) wins.
    """
    out: dict[str, MetricFamily] = {}
    for name, fam in families.items():
        bare = unprefixed(name, prefix, namespaces)
        if bare is None:
            out.setdefault(name, fam)
            continue
        if bare in families:
            continue
        samples = [
            Sample(unprefixed(s.name, prefix, namespaces) or s.name, s.labels, s.value, s.timestamp)
            for s in fam.samples
        ]
        out[bare] = MetricFamily(bare, fam.type, fam.help, samples, fam.unit)
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
    (vLLM's name, namespace restored) rather than ``ray_vllm_`` (which would leave NIM's bare name).
    """
    counts: Counter[str] = Counter()
    for name in names:
        if name in known:
            continue
        for cut in _boundaries(name):
            bare = name[cut:]
            if bare in known or restore_namespace(bare, namespaces) in known:
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
