"""A disaggregated deployment at request level: a prefill pool computes prompts and hands their KV cache over a
link to a decode pool, which generates the rest.

Each pool is a `RequestFleet` of its own (own profile, so own GPU type and KV pool, own cold start, own nodes and
router). A prefill replica serves each request as vLLM's prefill worker does behind Dynamo or llm-d: the prompt and
one token (``max_tokens=1``). The prompt's KV, ``prompt_tokens × kv_bytes_per_token`` bytes (from the model's shape:
2 × layers × KV heads × head dim × 2 bytes, `simulator.calibration.ModelShape`), then crosses the sending replica's
link, one transfer after another at ``link_bytes_per_s``. A decode replica admits the request when its KV pool has
blocks for the whole prompt (admission waits otherwise, as vLLM's scheduler does for a remote prefill), computes
only the last prompt token, and generates. TTFT on the decode replica and in `finished()` is the client's: from
arrival, through prefill and the transfer, to decode's first token. A request preempted on decode recomputes its
prompt there (its KV was dropped), as vLLM does.

Both pools render the engine's own metrics (``simulator.exposition.render_replica``); their role is what discovery
says (``roles()``), as it is for real engines.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import defaultdict, deque

import numpy as np

from simulator.config import FleetConfig
from simulator.gpus import Nodes
from simulator.histogram import LATENCY_GRID, Histogram
from simulator.replica import FinishedRequest, Replica, _Seq
from simulator.request_fleet import RequestFleet
from simulator.snapshot import FleetSnapshot
from simulator.trace.model import Request, RequestColumns, Trace

PREFILL = "prefill"
DECODE = "decode"
# One 400 Gb/s RDMA NIC per prefill replica (ConnectX-7 class, the NIXL transport's usual path): 50 GB/s.
DEFAULT_LINK_BYTES_PER_S = 50e9


class DecodeReplica(Replica):
    """A decode worker: a request arrives with its prompt's KV, so its first admission allocates blocks for the whole
    prompt and computes only the last token; a readmission after a preemption recomputes, through the prefix cache."""

    def _lookup(self, s: _Seq) -> None:
        if s.scheduled_s >= 0:
            super()._lookup(s)
            return
        s.computed = s.target - 1

    def _unlookup(self, s: _Seq) -> None:
        if s.scheduled_s >= 0:
            super()._unlookup(s)
            return
        s.computed = 0


class _Pool(RequestFleet):
    """One pool: a fleet on nodes named after its role, its initial replicas placed there."""

    def __init__(self, config: FleetConfig, trace: Trace, role: str) -> None:
        if role == DECODE:
            self.replica_class = DecodeReplica
        super().__init__(dataclasses.replace(config, replicas=0), trace)
        self.cfg = config
        self.role = role
        self.nodes = Nodes(config.profile.gpu, config.gpus_per_node, prefix=f"{role}-node-")
        for _ in range(config.replicas):
            self._add_replica(ready_at=0.0 if config.start_ready else config.cold_start_s)

    def hand_over(self, req: Request, now: float) -> None:
        """A request whose KV has arrived, routed at ``now`` (held at the pool's gateway while none is ready)."""
        self._advance_replicas(now)
        self.arrivals_total += 1
        self._route(req, now)


@dataclasses.dataclass(frozen=True)
class DisaggConfig:
    prefill: FleetConfig
    decode: FleetConfig
    link_bytes_per_s: float = DEFAULT_LINK_BYTES_PER_S
    kv_bytes_per_token: int | None = None  # None: the prefill profile's (both pools hold the same model)

    def __post_init__(self) -> None:
        if not self.link_bytes_per_s > 0:
            raise ValueError(f"disaggregated config: link_bytes_per_s must be > 0, got {self.link_bytes_per_s}")
        if self.prefill.profile.model_name != self.decode.profile.model_name:
            raise ValueError(
                "disaggregated config: prefill and decode serve different models "
                f"({self.prefill.profile.model_name!r}, {self.decode.profile.model_name!r}): no KV moves between them"
            )
        if self.kv_bytes_per_token is not None and self.kv_bytes_per_token < 1:
            raise ValueError(f"disaggregated config: kv_bytes_per_token must be >= 1, got {self.kv_bytes_per_token}")

    @property
    def kv_bytes(self) -> int:
        return self.kv_bytes_per_token or self.prefill.profile.kv_bytes_per_token


@dataclasses.dataclass
class KvTransfers:
    """What crossed the links: counts, bytes, and the time from a prompt's prefill to its KV's arrival."""

    count: int = 0
    bytes_total: float = 0.0
    waited_s_total: float = 0.0  # queued behind earlier transfers on the same link
    seconds: Histogram = dataclasses.field(default_factory=lambda: Histogram(LATENCY_GRID))  # queue + transfer


class DisaggregatedFleet:
    def __init__(self, config: DisaggConfig, trace: Trace) -> None:
        self.cfg = config
        cols = trace.columns
        self._outputs: dict[tuple[float, int], deque[int]] = defaultdict(deque)
        for a, p, o in zip(
            cols.arrival_s.tolist(), cols.prompt_tokens.tolist(), cols.output_tokens.tolist(), strict=True
        ):
            self._outputs[(a, p)].append(o)
        one_token = RequestColumns(
            cols.arrival_s, cols.prompt_tokens, np.ones_like(cols.output_tokens), cols.prefix_blocks
        )
        empty = RequestColumns(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), [])
        dep = config.prefill.deployment
        self.prefill = _Pool(
            dataclasses.replace(config.prefill, deployment=f"{dep}-prefill"),
            Trace(f"{trace.name}/prefill", trace.duration_s, _columns=one_token),
            PREFILL,
        )
        self.decode = _Pool(
            dataclasses.replace(config.decode, deployment=f"{config.decode.deployment}-decode", loop=False),
            Trace(f"{trace.name}/decode", trace.duration_s, _columns=empty),
            DECODE,
        )
        self.time = 0.0
        self.transfers = KvTransfers()
        self._handoffs: list[tuple[float, int, Request]] = []
        self._serial = 0
        self._link_free: dict[str, float] = {}
        self._prefilled = 0  # how many of the prefill pool's finished requests were handed over

    # -- public ------------------------------------------------------------------------------------------------
    def set_replicas(self, *, prefill: int | None = None, decode: int | None = None) -> None:
        if prefill is not None:
            self.prefill.set_replicas(prefill)
        if decode is not None:
            self.decode.set_replicas(decode)

    def advance_to(self, t: float) -> None:
        if t < self.time:
            raise ValueError(f"cannot advance backwards from {self.time} to {t}")
        # Prefill does not depend on decode: run it to t, then hand over, in time order, every KV that has arrived.
        self.prefill.advance_to(t)
        done = self.prefill.finished()
        for f in done[self._prefilled :]:
            self._transfer(f)
        self._prefilled = len(done)
        while self._handoffs and self._handoffs[0][0] <= t:
            arrived, _, req = heapq.heappop(self._handoffs)
            self.decode.hand_over(req, arrived)
        self.decode.advance_to(t)
        self.time = t

    def finished(self) -> list[FinishedRequest]:
        """Requests that completed, as the client saw them (TTFT from arrival to decode's first token)."""
        return self.decode.finished()

    def in_flight(self) -> list[tuple[float, float | None]]:
        moving = [(req.arrival_s, None) for _, _, req in self._handoffs]
        return [*self.prefill.in_flight(), *moving, *self.decode.in_flight()]

    def snapshots(self) -> dict[str, FleetSnapshot]:
        return {PREFILL: self.prefill.snapshot(), DECODE: self.decode.snapshot()}

    def roles(self) -> dict[str, str]:
        """Replica name -> role, what a disaggregated deployment's pod labels tell discovery."""
        return {r.name: pool.role for pool in (self.prefill, self.decode) for r in pool.replicas}

    @property
    def kv_in_transit(self) -> int:
        return len(self._handoffs)

    # -- the link ----------------------------------------------------------------------------------------------
    def _transfer(self, f: FinishedRequest) -> None:
        prefilled_at = f.arrival_s + f.e2e_s
        start = max(prefilled_at, self._link_free.get(f.replica, 0.0))
        size = f.prompt_tokens * self.cfg.kv_bytes
        arrived = start + size / self.cfg.link_bytes_per_s
        self._link_free[f.replica] = arrived
        tr = self.transfers
        tr.count += 1
        tr.bytes_total += size
        tr.waited_s_total += start - prefilled_at
        tr.seconds.observe(arrived - prefilled_at)
        outputs = self._outputs.get((f.arrival_s, f.prompt_tokens))
        output_tokens = outputs.popleft() if outputs else 1
        req = Request(f.arrival_s, f.prompt_tokens, max(1, output_tokens))
        heapq.heappush(self._handoffs, (arrived, self._serial, req))
        self._serial += 1
