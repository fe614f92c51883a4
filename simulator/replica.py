"""One engine replica at request level: continuous batching with chunked prefill over a paged KV pool.

The scheduler follows vLLM V1's: each step first serves running requests in order (one decode token, or the
next prefill chunk within `max_num_batched_tokens`), preempting the newest running request (recompute) when
the pool cannot grow, then admits waiting requests FCFS while slots, token budget and KV blocks allow.

Speed: when a step has no prefill, nothing changes but token counts until the next request finishes, the
pool could run out, or the caller's horizon is reached; those k identical decode steps are applied at once
with their exact total time (`ReplicaProfile.decode_steps_time`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from simulator.histogram import ITL_GRID, LATENCY_GRID, TTFT_BUCKETS, Histogram, token_buckets
from simulator.kvcache import KvPool
from simulator.profile import ReplicaProfile
from simulator.trace.model import PREFIX_BLOCK_TOKENS, Request


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    arrival_s: float
    ttft_s: float
    e2e_s: float
    prompt_tokens: int
    output_tokens: int
    replica: str = ""


# Identity, not value, equality: two identical requests in a batch are still two requests.
@dataclass(slots=True, eq=False)
class _Seq:
    req: Request
    routed_s: float
    full_ids: tuple[int, ...]  # prefix ids of the prompt's full blocks
    target: int = 0  # tokens to prefill (prompt, plus generated tokens after a recompute preemption)
    computed: int = 0
    generated: int = 0
    held: int = 0  # leading ids of full_ids this request references in the cache
    private: int = 0
    scheduled_s: float = -1.0
    first_token_s: float = -1.0


def _kv_tokens(s: _Seq) -> int:
    """Tokens whose KV the request holds: computed prompt (or recompute) tokens plus tokens generated since."""
    return s.computed + s.generated - (s.target - s.req.prompt_tokens)


@dataclass
class ReplicaCounters:
    """Monotonic counters and histograms since the engine process started (reset on crash/restart)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0
    finished: int = 0
    aborted: int = 0
    busy_s: float = 0.0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_GRID))
    e2e: Histogram = field(default_factory=lambda: Histogram(LATENCY_GRID))
    queue: Histogram = field(default_factory=lambda: Histogram(LATENCY_GRID))
    prefill: Histogram = field(default_factory=lambda: Histogram(LATENCY_GRID))
    decode: Histogram = field(default_factory=lambda: Histogram(LATENCY_GRID))
    inference: Histogram = field(default_factory=lambda: Histogram(LATENCY_GRID))
    prompt_len: Histogram = field(default_factory=lambda: Histogram(token_buckets(32768)))
    output_len: Histogram = field(default_factory=lambda: Histogram(token_buckets(32768)))


class Replica:
    # Upper bound on the identical decode steps applied as one event; bench/simulator.py sets 1 to measure the
    # step-by-step peer.
    MAX_DECODE_STEPS_PER_EVENT = 1 << 30

    def __init__(self, name: str, profile: ReplicaProfile, *, now: float, ready_at: float) -> None:
        self.name = name
        self.profile = profile
        self.clock = now
        self.started_s = now
        self.ready_at = ready_at
        self.draining = False
        self.hung = False
        self.pool = KvPool(
            profile.num_gpu_blocks,
            profile.block_size,
            PREFIX_BLOCK_TOKENS,
            prefix_caching=profile.enable_prefix_caching,
        )
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.c = ReplicaCounters()
        self.finished: list[FinishedRequest] = []
        self._full_blocks_per_entry = PREFIX_BLOCK_TOKENS // profile.block_size

    # -- state -------------------------------------------------------------------------------------------------
    def ready(self, t: float) -> bool:
        return t >= self.ready_at

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    def submit(self, req: Request, now: float) -> None:
        n_full = req.prompt_tokens // PREFIX_BLOCK_TOKENS
        self.waiting.append(_Seq(req, now, req.prefix_blocks[:n_full], target=req.prompt_tokens))

    def restart(self, now: float, ready_at: float) -> int:
        """A crash: the process dies with its requests and counters, and loads again. Returns requests lost."""
        lost = self.load
        self.waiting.clear()
        self.running.clear()
        self.pool.clear()
        self.c = ReplicaCounters()
        self.clock = now
        self.started_s = now
        self.ready_at = ready_at
        self.hung = False
        return lost

    # -- simulation --------------------------------------------------------------------------------------------
    def advance_to(self, t: float) -> None:
        """Run engine steps until the clock reaches t (the last step may end a little after t)."""
        while self.clock < t:
            if self.clock < self.ready_at:
                self.clock = min(self.ready_at, t)
            elif self.hung or not (self.running or self.waiting):
                self.clock = t
            else:
                self._step(t)

    def _slowdown(self) -> float:
        since = self.clock - self.ready_at
        p = self.profile
        if since >= p.warmup_s:
            return 1.0
        return 1.0 + (p.warmup_slowdown - 1.0) * (1.0 - since / p.warmup_s)

    def _step(self, horizon: float) -> None:
        p = self.profile
        budget = p.max_num_batched_tokens
        prefill_tokens = 0
        decoders: list[_Seq] = []
        chunks: list[tuple[_Seq, int]] = []
        i = 0
        while i < len(self.running) and budget > 0:
            s = self.running[i]
            c = min(s.target - s.computed, budget) if s.computed < s.target else 1
            if not self._grow(s, self._blocks_for(s, _kv_tokens(s) + c) - s.private):
                break  # s preempted itself: nothing after it is running
            if s.computed < s.target:
                chunks.append((s, c))
                prefill_tokens += c
            else:
                decoders.append(s)
            budget -= c
            i += 1
        while self.waiting and budget > 0 and len(self.running) < p.max_num_seqs:
            s = self.waiting[0]
            self._lookup(s)
            c = min(s.target - s.computed, budget)
            need = self._blocks_for(s, s.computed + c) - s.private
            if not self.pool.allocate(need):
                self._unlookup(s)
                break
            s.private += need
            self.waiting.popleft()
            if s.scheduled_s < 0:
                s.scheduled_s = self.clock
            self.running.append(s)
            chunks.append((s, c))
            prefill_tokens += c
            budget -= c
        if not chunks and not decoders:
            # Nothing fits (a single request larger than the pool): drop the head so the replica cannot wedge.
            if self.waiting:
                self.waiting.popleft()
                self.c.aborted += 1
            return
        context = sum(_kv_tokens(s) for s in decoders)
        if chunks:
            dt = p.step_time(prefill_tokens, len(decoders), context) * self._slowdown()
            self._finish_step(dt, decoders, 1, chunks)
            return
        k = self._decode_horizon(decoders, horizon, context)
        dt = p.decode_steps_time(k, len(decoders), context) * self._slowdown()
        self._finish_step(dt, decoders, k, [])

    def _decode_horizon(self, decoders: list[_Seq], horizon: float, context: int) -> int:
        p = self.profile
        k = min(min(s.req.output_tokens - s.generated for s in decoders), self.MAX_DECODE_STEPS_PER_EVENT)
        one = p.step_time(0, len(decoders), context) * self._slowdown()
        k = min(k, max(1, math.ceil((horizon - self.clock) / one)))
        if self.waiting and len(self.running) < p.max_num_seqs:
            k = 1  # a waiting request might fit after an eviction-free step; stay exact
        safe = p.block_size * (self.pool.free_blocks // len(decoders))
        k = max(1, min(k, safe))
        # Allocate the exact blocks those k steps need (guaranteed to fit when k <= safe).
        for s in decoders:
            need = self._blocks_for(s, _kv_tokens(s) + k) - s.private
            if need > 0:
                if not self.pool.allocate(need):
                    return 1
                s.private += need
        return k

    def _finish_step(self, dt: float, decoders: list[_Seq], k: int, chunks: list[tuple[_Seq, int]]) -> None:
        end = self.clock + dt
        c = self.c
        c.busy_s += dt
        if decoders:
            c.itl.observe(dt / k, len(decoders) * k)
        for s in decoders:
            s.generated += k
        c.generation_tokens += len(decoders) * k
        for s, n in chunks:
            s.computed += n
            if s.computed >= s.target:
                self._publish(s)
                if s.first_token_s < 0:
                    s.first_token_s = end
                    c.ttft.observe(end - s.req.arrival_s)
                    c.queue.observe(s.scheduled_s - s.req.arrival_s)
                    c.prefill.observe(end - s.scheduled_s)
                    c.prompt_tokens += s.req.prompt_tokens
                s.generated += 1
                c.generation_tokens += 1
        self.clock = end
        done = [s for s in self.running if s.computed >= s.target and s.generated >= s.req.output_tokens]
        for s in done:
            self.running.remove(s)
            self._free(s)
            c.finished += 1
            e2e = end - s.req.arrival_s
            c.e2e.observe(e2e)
            c.decode.observe(end - s.first_token_s)
            c.inference.observe(end - s.scheduled_s)
            c.prompt_len.observe(s.req.prompt_tokens)
            c.output_len.observe(s.req.output_tokens)
            self.finished.append(
                FinishedRequest(
                    s.req.arrival_s, s.first_token_s - s.req.arrival_s, e2e, s.req.prompt_tokens, s.generated, self.name
                )
            )

    # -- KV bookkeeping ------------------------------------------------------------------------------------------
    def _blocks_for(self, s: _Seq, tokens: int) -> int:
        return -(-max(tokens - s.held * PREFIX_BLOCK_TOKENS, 0) // self.profile.block_size)

    def _grow(self, s: _Seq, need: int) -> bool:
        """Allocate `need` blocks for s, preempting the newest running requests until it fits."""
        while not self.pool.allocate(need):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is s:
                return False
        s.private += max(need, 0)
        return True

    def _preempt(self, s: _Seq) -> None:
        self.running.remove(s)
        self._free(s)
        s.target = s.req.prompt_tokens + s.generated
        s.computed = 0
        self.c.preemptions += 1
        self.waiting.appendleft(s)

    def _free(self, s: _Seq) -> None:
        self.pool.free(s.private)
        self.pool.release(s.full_ids[: s.held])
        s.private = 0
        s.held = 0

    def _lookup(self, s: _Seq) -> None:
        hit = self.pool.cached_prefix(s.full_ids)
        # vLLM always recomputes the last prompt token, so a full hit leaves one token to prefill.
        hit_tokens = min(hit * PREFIX_BLOCK_TOKENS, s.req.prompt_tokens - 1)
        hit = hit_tokens // PREFIX_BLOCK_TOKENS
        self.pool.acquire(s.full_ids[:hit])
        s.held = hit
        s.computed = hit * PREFIX_BLOCK_TOKENS
        self.c.prefix_queries += s.req.prompt_tokens
        self.c.prefix_hits += s.computed

    def _unlookup(self, s: _Seq) -> None:
        self.c.prefix_queries -= s.req.prompt_tokens
        self.c.prefix_hits -= s.computed
        self.pool.release(s.full_ids[: s.held])
        s.held = 0
        s.computed = 0

    def _publish(self, s: _Seq) -> None:
        new = s.full_ids[s.held :]
        if new:
            s.private -= self.pool.publish(new)
            s.held = len(s.full_ids)
