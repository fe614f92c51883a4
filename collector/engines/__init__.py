"""Engine adapters: one file per engine, registered in ``ENGINES``; detection from the families present."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from collector.engines import llamacpp, sglang, tgi, trtllm, vllm
from collector.exposition import MetricFamily
from collector.samples import ReplicaSample, TargetInfo


class EngineAdapter(Protocol):
    """What the collector needs from an engine: which families it reads, how to recognise and adapt a page."""

    @property
    def name(self) -> str: ...

    @property
    def families(self) -> frozenset[str]: ...

    def score(self, families: Mapping[str, MetricFamily]) -> int: ...

    def adapt(
        self, families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float
    ) -> list[ReplicaSample]: ...


ENGINES: dict[str, EngineAdapter] = {
    adapter.name: adapter for adapter in (vllm.ADAPTER, sglang.ADAPTER, tgi.ADAPTER, trtllm.ADAPTER, llamacpp.ADAPTER)
}


class UnknownEngine(ValueError):
    """A page whose families match no engine adapter (or not the one asked for)."""


def _seen(families: Mapping[str, MetricFamily], limit: int = 5) -> str:
    names = sorted(families)
    if not names:
        return "no families at all"
    shown = ", ".join(names[:limit])
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"families seen: {shown}{more}"


def detect_engine(families: Mapping[str, MetricFamily]) -> str:
    """The engine whose families the page carries most; ``UnknownEngine`` when none or a tie.

    A page is reported rather than guessed: adapting the wrong engine would yield a replica whose every
    value is unknown, which downstream reads as "no data" instead of "misconfigured target".
    """
    scores = sorted(((a.score(families), name) for name, a in ENGINES.items()), reverse=True)
    best, name = scores[0]
    if best == 0:
        raise UnknownEngine(f"no engine adapter ({', '.join(ENGINES)}) matches this page; {_seen(families)}")
    if len(scores) > 1 and scores[1][0] == best:
        raise UnknownEngine(f"page matches {name} and {scores[1][1]} equally; pass the engine explicitly")
    return name


def require_engine(name: str, families: Mapping[str, MetricFamily]) -> EngineAdapter:
    """The adapter named, checked against the page: a page with none of its families is an error."""
    adapter = ENGINES.get(name)
    if adapter is None:
        raise UnknownEngine(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    if adapter.score(families) == 0:
        raise UnknownEngine(f"page has none of the {name} families; {_seen(families)}")
    return adapter


__all__ = ["ENGINES", "EngineAdapter", "UnknownEngine", "detect_engine", "require_engine"]
