"""A replica's TTFT or ITL histogram whose count steps by more than any replica can
(``collector.validity.MAX_OBSERVATIONS_PER_S``) is no latency reading. One page whose TTFT +Inf bucket read 1e12 put
a trillion slow requests in the deployment's TTFT window for the rate window and in every TTFT window over the
replica's history (the SLO burn's hour) for the hour; now such a reading is unknown, as a missing histogram is, and a
histogram that moved for good (a second reading agrees) starts its windows again (session 29 helper F, hostile and
parallel input round 14)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collector.samples import Histogram, ReplicaSample
from collector.state import FleetState

T0, STEP, TICKS, ODD = 1_000.0, 5.0, 40, 20
BOUNDS = (0.1, 0.5, 1.0, float("inf"))
Counts = tuple[float, float, float, float]


def _sample(t: float, ttft: Counts | None, itl: Counts | None) -> ReplicaSample:
    base = ReplicaSample(
        namespace="prod", deployment="d", replica="r0", node="n", engine="vllm", model="m", timestamp=t
    )

    def h(c: Counts | None) -> Histogram | None:
        return None if c is None else Histogram(bounds=BOUNDS, counts=c, sum=c[-1] / 10, count=c[-1])

    return replace(base, ttft=h(ttft), itl=h(itl), requests_finished=10.0 * t, requests_running=1.0)


def _clean(i: int) -> Counts:
    return (8.0 * i, 9.0 * i, 10.0 * i, 10.0 * i)  # 2 requests/s, all within 1 s


def _read(ttft: list[Counts | None], itl: list[Counts | None]) -> list[tuple[object, ...]]:
    """Each tick: the deployment's TTFT and ITL windows, the replica's TTFT increase over its whole history."""
    state = FleetState()
    out = []
    for i, (a, b) in enumerate(zip(ttft, itl, strict=True)):
        t = T0 + STEP * i
        state.observe([_sample(t, a, b)], [], now=t)
        view = state.deployments()["prod/d"]
        out.append((view.ttft_window, view.itl_window, state.ttft_increase("prod/r0", 0.0)))
    return out


@pytest.mark.parametrize("which", ["ttft", "itl"])
def test_one_reading_no_replica_makes_reads_as_a_missing_one(which: str) -> None:
    clean: list[Counts | None] = [_clean(i) for i in range(TICKS)]
    odd, missing = list(clean), list(clean)
    c = _clean(ODD)
    odd[ODD], missing[ODD] = (c[0], c[1], c[2], 1e12), None
    got = _read(odd, clean) if which == "ttft" else _read(clean, odd)
    assert got == (_read(missing, clean) if which == "ttft" else _read(clean, missing))
    assert all(w is None or w.count < 1e6 for tick in got for w in tick)  # type: ignore[attr-defined]


def test_a_histogram_that_moved_for_good_starts_its_windows_again() -> None:
    # another process behind r0's URL: its TTFT counts run from 5e9 on; after the rate window it reads as clean
    moved: list[Counts | None] = [
        _clean(i) if i < ODD else tuple(5e9 + x for x in _clean(i))  # type: ignore[misc]
        for i in range(TICKS)
    ]
    clean: list[Counts | None] = [_clean(i) for i in range(TICKS)]
    got, want = _read(moved, clean), _read(clean, clean)
    assert all(w is None or w.count < 1e6 for tick in got for w in tick)  # type: ignore[attr-defined]
    assert got[-1][0] == want[-1][0]  # the deployment's window, once past the move
    since_move = got[-1][2]
    assert since_move is not None
    assert since_move.count == pytest.approx(10.0 * (TICKS - 1 - (ODD + 1)))  # from the reading that agreed on
