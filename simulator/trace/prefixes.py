"""Deterministic shared-prefix structure for traces that carry none (Azure, ServeGen, synthetic).

Real fleets see prompts that start with one of a few popular system prompts / few-shot templates and then
diverge. We model exactly that, seeded, so that the prefix-cache hit rate of a replay is reproducible:

- `groups` templates; template g has popularity ∝ 1/(g+1)^zipf_s (Zipf) and a shared length drawn once,
  uniformly in [min_shared_tokens, max_shared_tokens];
- a request of p prompt tokens continues a recent conversation with probability `session_fraction`: it
  then starts with the full blocks of one of the previous `session_window` requests' prompts (a multi-turn
  chat resends its history), as far as its own length allows;
- otherwise it picks a template with probability `share_fraction` and shares its first
  min(shared length, p) tokens, in 512-token blocks; its remaining full blocks get ids unique to it.

Ids of template blocks are `template_id * 4096 + position` under a high bit so they never collide with the
per-request ids; ids are chain ids (id at position i implies the whole prefix up to i), like Mooncake's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.trace.model import PREFIX_BLOCK_TOKENS

_TEMPLATE_BASE = 1 << 40
_MAX_TEMPLATE_BLOCKS = 4096


@dataclass(frozen=True)
class PrefixModel:
    groups: int = 32
    zipf_s: float = 1.1
    share_fraction: float = 0.7
    min_shared_tokens: int = 512
    max_shared_tokens: int = 4096
    session_fraction: float = 0.4
    session_window: int = 256

    def __post_init__(self) -> None:
        if self.groups < 1:
            raise ValueError(f"prefix groups must be >= 1, got {self.groups}")
        if not 0.0 <= self.share_fraction <= 1.0:
            raise ValueError(f"share_fraction must be in [0, 1], got {self.share_fraction}")
        if not 0 < self.min_shared_tokens <= self.max_shared_tokens:
            raise ValueError("need 0 < min_shared_tokens <= max_shared_tokens")


def synthesize_prefixes(
    prompt_tokens: NDArray[np.int64], *, seed: int, model: PrefixModel | None = None, id_offset: int = 0
) -> list[tuple[int, ...]]:
    """Prefix block ids for each prompt; deterministic for (prompts, seed, model, id_offset)."""
    m = model or PrefixModel()
    rng = np.random.default_rng([seed, 0x5EED])
    weights = 1.0 / np.arange(1, m.groups + 1, dtype=np.float64) ** m.zipf_s
    shared_len = rng.integers(m.min_shared_tokens, m.max_shared_tokens + 1, size=m.groups)
    n = len(prompt_tokens)
    shares = rng.random(n) < m.share_fraction
    continues = rng.random(n) < m.session_fraction
    back = rng.integers(1, m.session_window + 1, size=n)
    group = rng.choice(m.groups, size=n, p=weights / weights.sum())
    out: list[tuple[int, ...]] = []
    next_unique = id_offset
    for i, p in enumerate(prompt_tokens.tolist()):
        full = p // PREFIX_BLOCK_TOKENS
        shared = 0
        ids: list[int] = []
        if continues[i] and i - int(back[i]) >= 0:
            ids = list(out[i - int(back[i])][:full])
            shared = len(ids)
        elif shares[i]:
            g = int(group[i])
            shared = min(full, int(shared_len[g]) // PREFIX_BLOCK_TOKENS, _MAX_TEMPLATE_BLOCKS)
            base = _TEMPLATE_BASE + g * _MAX_TEMPLATE_BLOCKS
            ids = [base + k for k in range(shared)]
        rest = full - shared
        ids.extend(range(next_unique, next_unique + rest))
        next_unique += rest
        out.append(tuple(ids))
    return out
