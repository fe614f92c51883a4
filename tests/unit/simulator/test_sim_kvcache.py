"""KV pool and prefix cache: accounting invariants, LRU eviction, refcounts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.kvcache import KvPool


def _pool(blocks: int = 100) -> KvPool:
    return KvPool(blocks, 16, 64)  # 4 blocks per prefix entry


def test_published_entries_stay_cached_but_count_as_free_once_released() -> None:
    pool = _pool()
    assert pool.allocate(10)
    assert pool.publish((1, 2)) == 8  # two entries moved out of the request's private blocks
    assert pool.usage == pytest.approx(0.10)  # still referenced: 2 private + 8 cached blocks in use
    pool.free(2)
    pool.release((1, 2))
    assert pool.usage == 0.0  # vLLM counts unreferenced cached blocks as free
    assert pool.cached_prefix((1, 2, 3)) == 2  # ...and they still hit


def test_eviction_is_lru_and_only_of_unreferenced_entries() -> None:
    pool = _pool(12)
    for ids in ((1,), (2,), (3,)):
        assert pool.allocate(4)
        pool.publish(ids)
    pool.release((1,))
    pool.release((2,))
    pool.acquire((1,))  # 1 is in use again: 2 is now the only evictable entry
    assert pool.allocate(4)  # needs one entry's room: evicts 2, not 1 or 3
    assert pool.cached_prefix((1,)) == 1
    assert pool.cached_prefix((2,)) == 0
    assert pool.cached_prefix((3,)) == 1
    assert not pool.allocate(1)  # everything left is referenced


def test_duplicate_publish_frees_the_copy() -> None:
    pool = _pool()
    pool.allocate(4)
    pool.publish((7,))
    pool.allocate(4)
    pool.publish((7,))  # computed by a second request meanwhile: shared, its copy freed
    assert pool.private_blocks == 0
    assert pool.free_blocks == 96


def test_prefix_caching_off_never_hits() -> None:
    pool = KvPool(100, 16, 64, prefix_caching=False)
    pool.allocate(4)
    assert pool.publish((1,)) == 0
    assert pool.cached_prefix((1,)) == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "publish", "release"]), st.integers(0, 6)), max_size=60))
def test_blocks_are_conserved_under_any_sequence(ops: list[tuple[str, int]]) -> None:
    pool = _pool(40)
    held: list[int] = []  # entries this test holds references on
    private = 0
    for op, n in ops:
        if op == "alloc" and pool.allocate(n):
            private += n
        elif op == "publish" and private >= 4:
            pool.publish((n,))
            private -= 4
            held.append(n)
        elif op == "release" and held:
            pool.release((held.pop(),))
        assert pool.private_blocks == private
        assert 0 <= pool.free_blocks <= pool.num_blocks
        assert pool.private_blocks + pool.active_cache_blocks + pool.evictable_blocks <= pool.num_blocks
