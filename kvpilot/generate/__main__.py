"""`python -m kvpilot.generate [--check]` (`make generate`, `make check-generated`)."""

from kvpilot.generate import main

raise SystemExit(main())
