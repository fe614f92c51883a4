# `store`: a migrated SQLite file, and a real PostgreSQL database (marked integration), as the reliability suite's.
from tests.reliability.conftest import postgres, store  # noqa: F401
