"""Which GPU each sample of a GPU exporter's family belongs to: shared by the page adapters' per-layout plans."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from collector.exposition import Sample

_K = TypeVar("_K", bound=Hashable)


def assign(
    samples: Sequence[Sample],
    key: Callable[[Sample], _K | None],
    gpus: dict[_K, int],
    fields: list[dict[str, Any]],
    label_fields: Callable[[_K, Sample], dict[str, Any]],
) -> tuple[tuple[int, int], ...]:
    """``(gpu position, sample index)`` for each sample ``key`` attributes to a GPU (None: to none), in page order. A
    GPU first seen here is appended: its key to ``gpus`` (with its position), its label-given fields to ``fields``."""
    reads = []
    for i, s in enumerate(samples):
        k = key(s)
        if k is None:
            continue
        at = gpus.get(k)
        if at is None:
            at = gpus[k] = len(fields)
            fields.append(label_fields(k, s))
        reads.append((at, i))
    return tuple(reads)
