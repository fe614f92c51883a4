"""What a parsed page is made of (families of samples) and the sink both format backends fill.

The sink holds what every backend shares: families are keyed and merged exactly as the oracle's
families would be when collected into a dict by name (the first family of a name fixes its type and
help; later families of the same name add their samples), and the ``max_samples`` cap the backends
count kept samples against.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


class ParseError(ValueError):
    """Malformed exposition text; names the 1-based line where parsing failed. ``whole_page``: the fault is the
    page's, not the line's (the sample cap, the time budget), so no reader may read around the line."""

    def __init__(
        self, message: str, *, line_no: int | None = None, line: str | None = None, whole_page: bool = False
    ) -> None:
        super().__init__(_described(message, line_no, line))
        self.message = message
        self.line_no = line_no
        self.line = line
        self.whole_page = whole_page

    def move_to(self, line_no: int) -> None:
        """Say the error is on line ``line_no`` (for a parser that learns the true number only once it fails)."""
        self.line_no = line_no
        self.args = (_described(self.message, line_no, self.line),)


def _described(message: str, line_no: int | None, line: str | None) -> str:
    where = f"line {line_no}: " if line_no is not None else ""
    shown = f" ({line[:200]!r})" if line is not None else ""
    return f"{where}{message}{shown}"


@dataclass(slots=True)
class Sample:
    """One sample line. Treat as read-only: it is not frozen only because a frozen dataclass takes
    three times as long to build, and a page builds thousands."""

    name: str  # full sample name, e.g. "vllm:time_to_first_token_seconds_bucket"
    labels: dict[str, str]
    value: float
    timestamp: float | None = None  # seconds since the epoch


@dataclass(slots=True)
class MetricFamily:
    # Family name as prometheus_client names it: counters lose their "_total" suffix (text format),
    # histogram/summary families carry the base name.
    name: str
    type: str  # counter | gauge | histogram | summary | unknown | info | stateset | gaugehistogram
    help: str = ""
    samples: list[Sample] = field(default_factory=list)
    unit: str = ""  # OpenMetrics "# UNIT"; always "" for the text format
    # The same object for this family on every page of one layout (collector.exposition._layout), else None:
    # readers may key what they derive from names and labels alone on it (collector/engines/_read.py).
    shape: object | None = field(default=None, compare=False, repr=False)


Wanted = Collection[str] | Callable[[str], bool] | None

# A /metrics page of a large inference node holds tens of thousands of samples; two million is far
# beyond any real page yet bounds what a hostile or broken target can make us allocate.
DEFAULT_MAX_SAMPLES = 2_000_000


def selector(wanted: Wanted) -> Callable[[str], bool]:
    """Turn ``wanted`` into a predicate over family names (everything when None)."""
    if wanted is None:
        return _everything
    if callable(wanted):
        return wanted
    if isinstance(wanted, str):  # a str is a collection of its characters: surely a mistake
        raise TypeError(f"wanted must be a collection of family names, not the single name {wanted!r}")
    return frozenset(wanted).__contains__


def _everything(_name: str) -> bool:
    return True


# Backends look at the CPU clock once per this many samples read: rarely enough to cost nothing per line.
BUDGET_CHECK_EVERY = 2048

Watchdog = Callable[[], str | None]
"""Called every ``BUDGET_CHECK_EVERY`` samples read: a reason to stop reading the page, or None."""

# Each thread's watchdog, by thread id: a plain dict, whose lookup costs a page's parse a tenth of what reading a
# threading.local did (a parse of a small page is a few microseconds; each item is set and removed by its own thread).
_watchdogs: dict[int, Watchdog] = {}
_thread_id = threading.get_ident


@contextmanager
def watched_by(watchdog: Watchdog) -> Iterator[None]:
    """Within the block, every parse on this thread asks ``watchdog`` from time to time whether to go on,
    and stops with ``ParseError(reason)`` when it gives a reason. A parse on a worker thread cannot be
    cancelled; this is how its caller bounds it (``collector.scrape`` gives each page a CPU-time budget)."""
    thread = _thread_id()
    previous = _watchdogs.get(thread)
    _watchdogs[thread] = watchdog
    try:
        yield
    finally:
        if previous is None:
            del _watchdogs[thread]
        else:
            _watchdogs[thread] = previous


class Sink:
    """Collects the families a backend emits, merged by name; carries the sample cap and the watchdog."""

    __slots__ = ("families", "max_samples", "watchdog")

    def __init__(self, max_samples: int) -> None:
        self.families: dict[str, MetricFamily] = {}
        self.max_samples = max_samples
        self.watchdog: Watchdog | None = _watchdogs.get(_thread_id()) if _watchdogs else None

    def check_budget(self, line_no: int) -> None:
        """Stop the parse if the thread's watchdog says so (see ``watched_by``)."""
        if self.watchdog is not None:
            reason = self.watchdog()
            if reason is not None:
                raise ParseError(reason, line_no=line_no, whole_page=True)

    def add(self, name: str, typ: str, help_text: str, samples: list[Sample], unit: str = "") -> None:
        family = self.families.get(name)
        if family is None:
            self.families[name] = MetricFamily(name, typ, help_text, samples, unit)
        else:
            family.samples.extend(samples)


def decode_utf8(data: bytes) -> str:
    """UTF-8 as the formats require; an invalid byte is reported with its line, shown repaired."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_no = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        end = data.find(b"\n", e.start)
        shown = data[start : end if end >= 0 else len(data)].decode("utf-8", "replace")
        raise ParseError(f"invalid UTF-8 at byte {e.start}", line_no=line_no, line=shown) from None
