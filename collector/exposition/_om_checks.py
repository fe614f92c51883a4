"""OpenMetrics rules on values, timestamps and histograms, as prometheus_client's OpenMetrics parser applies them.

Kept apart from the line-by-line state machine because they are the format's semantics, not its syntax.
Each raises ValueError; the caller turns it into a ParseError naming the line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# A timestamp as the oracle compares it: integer-or-decimal text becomes (sec, nsec); any other float
# syntax stays a float. The oracle cannot compare the two kinds (it crashes), so neither do we.
TimeKey = tuple[int, int] | float


@dataclass(frozen=True, slots=True)
class Stamp:
    seconds: float  # what the sample carries
    key: TimeKey  # what ordering and duplicate checks compare


def parse_stamp(text: str) -> Stamp:
    """The oracle's ``_parse_timestamp``: int, then "sec.frac" to the nanosecond, then float."""
    try:
        return _parse_stamp(text)
    except OverflowError:  # an integer second count no float holds (the oracle crashes on it)
        raise ValueError(f"timestamp {text[:40]!r} is out of range") from None


def _parse_stamp(text: str) -> Stamp:
    if "_" in text or text != text.strip():
        raise ValueError(f"invalid timestamp {text!r}")
    try:
        sec = int(text)
        return Stamp(float(sec), (sec, 0))
    except ValueError:
        pass
    whole, dot, frac = text.partition(".")
    try:
        if not dot:
            raise ValueError
        sec, nsec = int(whole), int(frac[:9].ljust(9, "0"))
        if nsec < 0 or nsec >= 1_000_000_000:
            raise ValueError
    except ValueError:
        number = float(text)
        if math.isnan(number) or math.isinf(number):
            raise ValueError(f"invalid timestamp {text!r}") from None
        return Stamp(number, number)
    if sec == 0 and nsec and whole.startswith("-"):
        # the oracle negates the fraction only of a negative second count, so it reads "-0.5" as +0.5
        raise ValueError(f"negative timestamp above -1 ({text!r}) is not supported")
    signed = -nsec if sec < 0 else nsec
    return Stamp(float(sec) + float(signed) / 1e9, (sec, signed))


def later(a: TimeKey, b: TimeKey) -> bool:
    """``a > b`` for two timestamps of one group."""
    if isinstance(a, tuple) != isinstance(b, tuple):
        raise ValueError("timestamps of one group mix integer and float notation")
    return a > b  # type: ignore[operator]  # both tuples or both floats


def is_integral(token: str, value: float) -> bool:
    """Whether the oracle holds this value as an int, or as a float with an integral value."""
    try:
        int(token)
    except ValueError:
        return value.is_integer()
    return True


def is_uncanonical(text: str) -> bool:
    """+Inf must be written "+Inf"; other numbers may be written any way float() reads."""
    return float(text) == math.inf and text != "+Inf"


def check_histogram(name: str, samples: Sequence[tuple[str, dict[str, str], float, TimeKey | None]]) -> None:
    """The oracle's ``_check_histogram``: per group, ordered buckets ending at +Inf, count == +Inf bucket."""
    group: dict[str, str] | None = None
    timestamp: TimeKey | None = None
    bucket: float | None = None
    count: float | None = None
    value = 0.0
    has_sum = has_gsum = has_negative_buckets = has_negative_gsum = False

    def finish() -> None:
        if bucket != math.inf:
            raise ValueError(f"+Inf bucket missing: {name}")
        if count is not None and value != count:
            raise ValueError(f"count does not match +Inf value: {name}")
        if has_sum and count is None:
            raise ValueError(f"_count must be present if _sum is present: {name}")
        if has_gsum and count is None:
            raise ValueError(f"_gcount must be present if _gsum is present: {name}")
        if not (has_sum or has_gsum) and count is not None:
            raise ValueError(f"_sum/_gsum must be present if _count is present: {name}")
        if has_negative_buckets and has_sum:
            raise ValueError(f"cannot have _sum with negative buckets: {name}")
        if not has_negative_buckets and has_negative_gsum:
            raise ValueError(f"cannot have negative _gsum with non-negative buckets: {name}")

    for sample_name, labels, sample_value, stamp in samples:
        suffix = sample_name[len(name) :]
        g = {k: v for k, v in labels.items() if k != "le"} if suffix == "_bucket" else labels
        if not suffix:
            continue
        if g != group or stamp != timestamp:
            if group is not None:
                finish()
            count = bucket = None
            has_negative_buckets = has_sum = has_gsum = has_negative_gsum = False
            value = 0.0
        group, timestamp = g, stamp
        if suffix == "_bucket":
            b = float(labels["le"])
            if b < 0:
                has_negative_buckets = True
            if bucket is not None and b <= bucket:
                raise ValueError(f"buckets out of order: {name}")
            if sample_value < value:
                raise ValueError(f"bucket values out of order: {name}")
            bucket, value = b, sample_value
        elif suffix in ("_count", "_gcount"):
            count = sample_value
        elif suffix == "_sum":
            has_sum = True
        elif suffix == "_gsum":
            has_gsum = True
            if sample_value < 0:
                has_negative_gsum = True
    if group is not None:
        finish()
