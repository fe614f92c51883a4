"""Prompt tokens per request that reached its first token, over a window: the prompt mix of what a fleet admits,
where prompt tokens per finished request misstates it (a fleet filling from empty finishes fewer than it admits)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from collector.rates import counter_step


class PromptPerFirstToken:
    """Summed over replicas, each replica's step from one tick to the next in its prompt-token counter and in its
    TTFT histogram's count (a request's first token; vLLM counts a request's prompt tokens as its prefill ends,
    when its first token comes), reset-aware as the collector's (`collector.rates.counter_step`). A replica missing
    either, or absent from a tick, counts from its next two ticks on."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._last: dict[str, tuple[float, float]] = {}
        self._ticks: deque[tuple[float, float, float]] = deque()

    def update(self, now: float, replicas: Iterable[tuple[str, float | None, float | None]]) -> float | None:
        """One tick's ``(replica, prompt_tokens_total, first_tokens_total)``; the prompt tokens per first token
        over the window, None while no first token came in it."""
        prompt = first = 0.0
        last, self._last = self._last, {}
        for key, p, f in replicas:
            if p is None or f is None:
                continue
            before = last.get(key)
            self._last[key] = (p, f)
            if before is None:
                continue
            prompt += counter_step(before[0], p)
            first += counter_step(before[1], f)
        self._ticks.append((now, prompt, first))
        while self._ticks and now - self._ticks[0][0] >= self.window_s:
            self._ticks.popleft()
        total_prompt = sum(t[1] for t in self._ticks)
        total_first = sum(t[2] for t in self._ticks)
        return total_prompt / total_first if total_first > 0 else None
