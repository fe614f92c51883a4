"""Prometheus HTTP API answers decoded with orjson, and the per-deployment series turned into aggregates.

Runs in a worker thread (``collector.discovery.promql``): nothing here touches the event loop. No copy of the raw
answer is kept once decoded; ``stop`` (a ``threading.Event``) ends a long regrouping between series.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from collector.aggregates import DeploymentAggregate
from collector.promql.expressions import DEPLOYMENT_LABEL, HISTOGRAM_FIELDS, SIGNAL_LABEL
from collector.samples import Histogram

Series = Mapping[str, Any]  # {"metric": {labels}, "value": [t, "v"]}
_CHECK_EVERY = 4096


# What reading an answer laid out otherwise than the Prometheus API's raises (a series whose labels are null, a value
# that is not [time, "value"]), in the per-replica reading that takes the answers whole (``collector.promql.series``).
LAYOUT_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError)


class PromQLError(RuntimeError):
    """Prometheus could not be queried or answered something unreadable; the message says which URL and why."""


class Stopped(PromQLError):
    """The service is stopping: the tick's work was abandoned."""


# Of a text the server wrote (its error, the start of an answer it should not have sent), at most this many
# characters go into a PromQLError, which is logged every tick the fault lasts: a 3 MB `error` was a 3,000,034-
# character log line (helper H, session 18).
SERVER_TEXT_CHARS = 1000


def server_text(text: object, limit: int = SERVER_TEXT_CHARS, *, whole: bool = True) -> str:
    """``text`` (``str`` of it) fit for one log line: its first ``limit`` characters, saying how many more were cut
    (``whole`` False: ``text`` is itself only the start of what the server sent, so "or more"), with every
    character that is not printable written as its escape (``\\x1b``, ``\\n``, ``\\u202e``): a terminal control
    sequence, a line break or a bidi override from the server reaches neither the terminal nor the log's layout."""
    quoted = text if isinstance(text, str) else str(text)
    cut = len(quoted) - limit
    if cut > 0:
        quoted = quoted[:limit]
    if not quoted.isprintable():
        quoted = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in quoted)
    if cut <= 0 and whole:
        return quoted
    return f"{quoted}... ({max(cut, 0)} {'more' if whole else 'or more'} characters cut)"


# A vector answer larger than this is decoded in pieces of about this size. One orjson.loads holds the GIL from
# start to end: 26-38 ms of CPU for the 1.7 MB of 100 deployments' series (10,000 replicas, gc-timed in
# ``kvpilot run`` on the benchmark VM), during which the event loop, in another thread, answers nothing. Between
# pieces the interpreter hands the GIL to a thread that waits for it.
PIECE_BYTES = 128 * 1024
_RESULT = b'"result":['
_BETWEEN = b'},{"metric":'  # between two series of a result array: a raw quote never occurs inside a JSON string


def _loads(body: bytes | bytearray, where: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise PromQLError(f"{where}: the answer is not JSON ({e})") from None


def _in_pieces(body: bytes) -> Any | None:
    """A large vector answer decoded a piece of its result array at a time, cut where one series ends and the next
    begins; None where the answer is not laid out that way (whitespace between series, not a vector, small)."""
    start = body.find(_RESULT)
    if len(body) <= PIECE_BYTES or start < 0 or not body.startswith(b'{"metric":', start + len(_RESULT)):
        return None
    head = body[: start + len(_RESULT)]
    cuts: list[int] = []  # offsets of the ``}`` ending a series, each about PIECE_BYTES after the previous cut
    at = start
    while (at := body.find(_BETWEEN, at + PIECE_BYTES)) >= 0:
        cuts.append(at)
    if not cuts:
        return None
    first = orjson.loads(head + body[len(head) : cuts[0] + 1] + b"]}}")
    series: list[Any] = first["data"]["result"]
    for a, b in itertools.pairwise(cuts):
        series += orjson.loads(b"[" + body[a + 2 : b + 1] + b"]")
    last = orjson.loads(head + body[cuts[-1] + 2 :])  # the last series and whatever follows the array
    series += last["data"]["result"]
    last["data"]["result"] = series
    return last


def answer(body: bytes, where: str) -> Any:
    """The ``data`` of a Prometheus API answer; an error answer or unreadable JSON raises PromQLError. A large
    vector is decoded in pieces (``PIECE_BYTES``) so that no single call holds the GIL for long."""
    try:
        decoded = _in_pieces(body)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        decoded = None  # not the layout the cuts assumed: read it whole, which says what is wrong with it
    if decoded is None:
        decoded = _loads(body, where)
    if not isinstance(decoded, dict):  # was "None: [1, 2, 3]"
        raise PromQLError(f"{where}: not a Prometheus API answer: {server_text(decoded, 200)}")
    status = decoded.get("status")
    if status is None:  # was "None: None"
        raise PromQLError(f"{where}: not a Prometheus API answer (no status): {server_text(decoded, 200)}")
    if status != "success":
        kind, error = decoded.get("errorType"), decoded.get("error")
        if kind is None and error is None:  # was "None: None" (a proxy's {"status": "error"}, a key given twice)
            raise PromQLError(
                f"{where}: an answer of status {server_text(status, 100)} without errorType or error: "
                f"{server_text(decoded, 200)}"
            )
        raise PromQLError(f"{where}: {server_text(kind, 100)}: {server_text(error)}")
    if decoded.get("isPartial") is True:  # VictoriaMetrics: some storage nodes did not answer (a success, in part)
        raise PromQLError(
            f"{where}: a partial answer (isPartial: some of the database's storage nodes did not answer); a part of "
            "the fleet is not read as the whole"
        )
    if "data" not in decoded:  # was a KeyError out of the aggregates' reader: a traceback every tick
        raise PromQLError(f"{where}: a success without data: {server_text(decoded, 200)}")
    return decoded["data"]


def _is_series(s: Any) -> bool:
    """``{"metric": {labels: str}, "value": [time, "value"]}``, as Prometheus writes a series of a vector."""
    if not isinstance(s, dict):
        return False
    metric, value = s.get("metric"), s.get("value")
    return (
        isinstance(metric, dict)
        and all(isinstance(v, str) for v in metric.values())
        and isinstance(value, list)
        and len(value) == 2
        and isinstance(value[1], str)
    )


def vector(data: Any, where: str, *, check_series: bool = False) -> list[Series]:
    """The series of an instant-vector answer. ``check_series``: each series is checked too, PromQLError for one
    laid out otherwise (a series without labels or value was a TypeError or AttributeError deep in whatever read it,
    every tick, naming no URL); for the small answers, one series a deployment. The replicas' answers are not walked
    twice: their reader's errors are turned into PromQLError where it is called (``collector.discovery.promql``)."""
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PromQLError(f"{where}: expected an instant vector, got {server_text(data, 120)}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PromQLError(f"{where}: expected a list of series, got {server_text(result, 120)}")
    bad = next((s for s in result if not _is_series(s)), None) if check_series else None
    if bad is not None:
        raise PromQLError(
            f'{where}: a series not laid out as {{"metric": {{...}}, "value": [t, "v"]}}: {server_text(bad, 120)}'
        )
    return result


def _number(text: str) -> float | None:
    """A value or ``le`` as Prometheus writes it ("NaN", "+Inf", "-Inf" included: float() reads them); None for text
    that is no number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def aggregates(
    series: Sequence[Series],
    now: float,
    stop: threading.Event | None = None,
    *,
    unreadable: list[Series] | None = None,
) -> list[DeploymentAggregate]:
    """One ``DeploymentAggregate`` per (namespace, deployment) present, from series labelled with their signal.

    Series without a signal label, namespace or deployment are ignored (a recorded series from another tool). A series
    whose value, or bucket's ``le``, is no number (one engine's page with ``le="x"`` summed by the ad hoc query) is
    left out, as if absent, and appended to ``unreadable``: it costs its field of its deployment, not every
    deployment's reading (it was a ValueError ending the tick's whole collection, every tick). So is a value below 0
    of a signal that is no bucket: every one is a count, a rate, a sum or a ratio (a replica count of -5, from a
    recording rule gone wrong, was read as -5 replicas; absent, it reads as none)."""
    scalars: dict[tuple[str, str], dict[str, float]] = {}
    buckets: dict[tuple[str, str], dict[str, dict[float, float]]] = {}
    for i, s in enumerate(series):
        if stop is not None and i % _CHECK_EVERY == 0 and stop.is_set():
            raise Stopped("stopping: deployment aggregates abandoned")
        m = s["metric"]
        signal, namespace, deployment = m.get(SIGNAL_LABEL), m.get("namespace"), m.get(DEPLOYMENT_LABEL)
        if not signal or not namespace or not deployment:
            continue
        key = (namespace, deployment)
        value = _number(s["value"][1])
        le = m.get("le") if signal.endswith("_bucket") else None
        bound = None if le is None else _number(le)
        # no count, rate, sum or ratio of a deployment is below 0 (a negative count(up) would have been -5 replicas)
        below_zero = value is not None and value < 0 and le is None
        if value is None or (le is not None and bound is None) or below_zero:
            if unreadable is not None:
                unreadable.append(s)
            continue
        if signal.endswith("_bucket"):
            if bound is not None:
                buckets.setdefault(key, {}).setdefault(signal[: -len("_bucket")], {})[bound] = value
        else:
            scalars.setdefault(key, {})[signal] = value
    out: list[DeploymentAggregate] = []
    for key in sorted(scalars.keys() | buckets.keys()):
        values = scalars.get(key, {})
        hist = {name: _histogram(buckets.get(key, {}).get(name), values, name) for name in HISTOGRAM_FIELDS}
        out.append(
            DeploymentAggregate(
                namespace=key[0],
                deployment=key[1],
                timestamp=now,
                replicas=int(_finite(values.get("replicas")) or 0),
                ready_replicas=int(_finite(values.get("ready_replicas")) or 0),
                requests_waiting=_finite(values.get("requests_waiting")),
                requests_running=_finite(values.get("requests_running")),
                kv_usage_mean=_finite(values.get("kv_usage_mean")),
                kv_usage_max=_finite(values.get("kv_usage_max")),
                requests_finished_rate=_finite(values.get("requests_finished_rate")),
                arrival_rate=_finite(values.get("arrival_rate")),
                prompt_tokens_rate=_finite(values.get("prompt_tokens_rate")),
                generation_tokens_rate=_finite(values.get("generation_tokens_rate")),
                preemptions_rate=_finite(values.get("preemptions_rate")),
                prefix_hits_rate=_finite(values.get("prefix_hits_rate")),
                prefix_queries_rate=_finite(values.get("prefix_queries_rate")),
                ttft_window=hist["ttft"],
                itl_window=hist["itl"],
                queue_time_window=hist["queue_time"],
            )
        )
    return out


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _histogram(by_le: dict[float, float] | None, values: Mapping[str, float], name: str) -> Histogram | None:
    """Buckets in bound order, made cumulative-monotone (increase() extrapolates each bucket on its own, so a
    higher bucket can come out a hair below a lower one); None without an +Inf bucket."""
    if not by_le or math.inf not in by_le:
        return None
    bounds = tuple(sorted(by_le))
    counts: list[float] = []
    running = 0.0
    for b in bounds:
        v = by_le[b]
        running = max(running, v if math.isfinite(v) else running)
        counts.append(running)
    # The count is the +Inf bucket, as in a scraped histogram (the separately increased _count may differ by
    # the extrapolation of increase()).
    return Histogram(bounds=bounds, counts=tuple(counts), sum=_finite(values.get(f"{name}_sum")) or 0.0, count=running)
