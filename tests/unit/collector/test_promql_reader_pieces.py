"""The reader process hands its round back in pickled pieces (issue 17: one ``pickle.loads`` of the whole round
held the GIL, and the event loop, for 4-9 ms): the pieces unpickle to the same results, in order."""

from __future__ import annotations

import pickle

import pytest

from collector.discovery.promql import RESULTS_PER_PIECE, _pickled_in_pieces, _unpickled
from collector.samples import TargetInfo
from collector.scrape import ScrapeResult


def _results(n: int) -> list[ScrapeResult]:
    return [
        ScrapeResult(TargetInfo(url=f"promql://vllm/10.0.0.{i}:8000", pod=f"llm-{i}"), i % 3 != 0, 1.0, 0.01)
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("n", "per_piece", "pieces"),
    [
        (0, 16, 0),  # an empty round: nothing to send
        (5, 16, 1),  # fewer than a piece
        (32, 16, 2),  # whole pieces
        (33, 16, 3),  # a last, short piece
        (7, 1, 7),  # one result per piece
    ],
)
def test_pieces_unpickle_to_the_same_results_in_order(n: int, per_piece: int, pieces: int) -> None:
    results = _results(n)
    sent = _pickled_in_pieces(lambda: results, per_piece)
    assert len(sent) == pieces
    assert all(isinstance(p, bytes) for p in sent)  # what the pool pickles is a list of bytes, cheap to load
    assert _unpickled(pickle.loads(pickle.dumps(sent))) == results


def test_a_piece_is_small() -> None:
    # the largest piece of a round bounds how long one unpickling holds the GIL
    sent = _pickled_in_pieces(lambda: _results(120), RESULTS_PER_PIECE)
    assert max(len(p) for p in sent) < len(pickle.dumps(_results(120))) / 4
