"""A paged KV pool with a prefix cache over 512-token prefix blocks, LRU eviction of unreferenced entries.

Units are KV blocks of `block_size` tokens. A prefix entry (one trace prefix block id) pins
PREFIX_BLOCK_TOKENS / block_size KV blocks. Like vLLM V1, blocks of finished requests stay cached but count
as free: `usage` excludes unreferenced cache entries, which are evicted (LRU first) when a request needs room.
"""

from __future__ import annotations

from collections import OrderedDict


class KvPool:
    def __init__(self, num_blocks: int, block_size: int, entry_tokens: int, *, prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1 or entry_tokens < block_size:
            raise ValueError("KV pool needs num_blocks >= 1 and entry_tokens >= block_size >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.entry_tokens = entry_tokens
        self.entry_blocks = -(-entry_tokens // block_size)
        self.prefix_caching = prefix_caching
        self.private_blocks = 0
        self._refs: dict[int, int] = {}  # cached entry id -> number of running requests using it
        self._lru: OrderedDict[int, None] = OrderedDict()  # unreferenced entries, least recently used first

    @property
    def active_cache_blocks(self) -> int:
        return (len(self._refs) - len(self._lru)) * self.entry_blocks

    @property
    def evictable_blocks(self) -> int:
        return len(self._lru) * self.entry_blocks

    @property
    def free_blocks(self) -> int:
        """Blocks allocatable now, counting evictable cache entries (vLLM's free queue holds them)."""
        return self.num_blocks - self.private_blocks - self.active_cache_blocks

    @property
    def usage(self) -> float:
        return 1.0 - self.free_blocks / self.num_blocks

    def cached_prefix(self, ids: tuple[int, ...]) -> int:
        """How many leading ids are cached (the prefix-cache hit, in entries)."""
        if not self.prefix_caching:
            return 0
        n = 0
        for i in ids:
            if i not in self._refs:
                break
            n += 1
        return n

    def acquire(self, ids: tuple[int, ...]) -> None:
        """Reference cached entries (a hit): they leave the evictable LRU."""
        for i in ids:
            r = self._refs[i]
            if r == 0:
                del self._lru[i]
            self._refs[i] = r + 1

    def release(self, ids: tuple[int, ...]) -> None:
        """Drop references; entries nobody uses become evictable, most recently used last."""
        for i in ids:
            r = self._refs[i] - 1
            self._refs[i] = r
            if r == 0:
                self._lru[i] = None

    def allocate(self, blocks: int) -> bool:
        """Take `blocks` private blocks, evicting LRU cache entries if needed; False if they do not fit."""
        if blocks <= 0:
            return True
        if blocks > self.free_blocks:
            return False
        while self.num_blocks - self.private_blocks - len(self._refs) * self.entry_blocks < blocks:
            victim, _ = self._lru.popitem(last=False)
            del self._refs[victim]
        self.private_blocks += blocks
        return True

    def free(self, blocks: int) -> None:
        self.private_blocks -= blocks
        if self.private_blocks < 0:
            raise AssertionError("KV pool freed more blocks than it allocated")

    def publish(self, ids: tuple[int, ...]) -> int:
        """Turn a request's computed prefix blocks into referenced cache entries.

        Returns how many private blocks the request gave up (entries someone else cached meanwhile are
        shared instead, and their duplicate private blocks freed)."""
        if not self.prefix_caching:
            return 0
        moved = 0
        for i in ids:
            r = self._refs.get(i)
            if r is None:
                self._refs[i] = 1
            else:
                if r == 0:
                    del self._lru[i]
                self._refs[i] = r + 1
            moved += self.entry_blocks
        self.private_blocks -= moved
        return moved

    def clear(self) -> None:
        self.private_blocks = 0
        self._refs.clear()
        self._lru.clear()
