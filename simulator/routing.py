"""Request routers across ready replicas, one class per policy, registered in ROUTERS.

prefix_affinity keeps, like llm-d's prefix-cache scorer, an index of which replica was last sent each prefix
block, and sends a request to the replica holding its longest leading match; without a match, or when that
replica queues more than `spill_waiting` requests, it falls back to the least loaded replica.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from simulator.replica import Replica
from simulator.trace.model import Request


class Router(Protocol):
    def choose(self, request: Request, replicas: Sequence[Replica]) -> Replica: ...


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: Request, replicas: Sequence[Replica]) -> Replica:
        r = replicas[self._next % len(replicas)]
        self._next += 1
        return r


class LeastLoaded:
    def choose(self, request: Request, replicas: Sequence[Replica]) -> Replica:
        return min(replicas, key=lambda r: r.load)


class PrefixAffinity:
    def __init__(self, spill_waiting: int = 8, index_size: int = 500_000) -> None:
        self.spill_waiting = spill_waiting
        self.index_size = index_size
        self._least = LeastLoaded()
        self._index: OrderedDict[int, str] = OrderedDict()  # prefix block id -> replica name, LRU bounded

    def choose(self, request: Request, replicas: Sequence[Replica]) -> Replica:
        by_name = {r.name: r for r in replicas}
        best: Replica | None = None
        for block in request.prefix_blocks:
            name = self._index.get(block)
            if name is None or name not in by_name or (best is not None and by_name[name] is not best):
                break
            best = by_name[name]
        if best is None or len(best.waiting) > self.spill_waiting:
            best = self._least.choose(request, replicas)
        self._remember(request.prefix_blocks, best.name)
        return best

    def _remember(self, blocks: tuple[int, ...], name: str) -> None:
        index = self._index
        for b in blocks:
            index[b] = name
            index.move_to_end(b)
        while len(index) > self.index_size:
            index.popitem(last=False)


ROUTERS: dict[str, type[RoundRobin] | type[LeastLoaded] | type[PrefixAffinity]] = {
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "prefix_affinity": PrefixAffinity,
}


def make_router(name: str) -> Router:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown routing {name!r} (known: {', '.join(ROUTERS)})") from None
