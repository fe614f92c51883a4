from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.drains import Pools, two_pools

# `store`: a migrated SQLite file, and a real PostgreSQL database (marked integration), as the reliability suite's.
from tests.reliability.conftest import Store, postgres, store  # noqa: F401


@pytest.fixture
def pools(store: Store) -> Iterator[Pools]:  # noqa: F811  (the fixture imported above)
    """Two kvpilots on ``store``, each with its own pool (``tests.helpers.drains.two_pools``)."""
    with two_pools(store.url) as both:
        yield both
