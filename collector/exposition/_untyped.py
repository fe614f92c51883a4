"""A text page without ``# TYPE`` lines, read as the page with them: its histograms and summaries whole again.

``curl … | grep -v '^#'`` (bug reports, tutorials) or a grep pattern that misses the comment lines leaves a page
whose families all lack a type. prometheus_client then makes each sample name a family of its own: histogram
``X`` becomes untyped ``X_bucket``, ``X_sum`` and ``X_count``, and a reader asking for ``X`` finds nothing, so a
replica's TTFT, ITL, E2E and queue time read unknown although every bucket is on the page. The text format
itself says what such names are (a ``_bucket`` series with ``le`` belongs to a histogram, a sample with
``quantile`` to a summary, ``_sum`` and ``_count`` to one of the two), so they are put back together:

- histogram ``X``: an untyped ``X_bucket`` whose every sample carries ``le``, beside an untyped ``X_sum`` or
  ``X_count`` (or both, or neither: buckets alone, as a page cut before a histogram's end leaves them: vLLM issue
  #6337's TTFT buckets, ``# TYPE`` histogram, without ``+Inf``, ``_sum`` and ``_count``), where the page has no
  family ``X`` with samples;
- summary ``X``: an untyped ``X`` whose every sample carries ``quantile``, beside an untyped ``X_sum`` or
  ``X_count``; or, with no ``X`` and no ``X_bucket``, an untyped ``X_sum`` and ``X_count`` together (a summary
  without quantiles, as prometheus_client writes one).

"Untyped" is a family without a TYPE line or declared ``untyped``; where the page declares a type for ``X``,
``X_bucket``, ``X_sum`` or ``X_count``, they are read as declared. This is the one place where kvpilot's text
parser knowingly returns other families than prometheus_client's (tests/unit/collector/
test_exposition_divergences.py); on a page whose families are typed it changes nothing. What it leaves as
written, and why:

- a counter's ``X_total`` stays family ``X_total`` (readers look a counter up under both names:
  collector/engines/_read.py), with its value;
- ``X_created`` stays its own family, as it is on a typed text page (prometheus_client writes it as a gauge);
- a selective read that asks for ``X_bucket`` itself gets it as written: the parts are put together only for a
  reader that asks for ``X``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection

from collector.exposition._model import MetricFamily

_PARTS = ("_bucket", "_sum", "_count")

Keep = Callable[[str], bool]

# Wanted selections seen (one or two per process) -> the same with their histogram/summary parts, and whether the
# selection itself holds a name and one of its parts (bounded).
_WITH_PARTS: dict[frozenset[object], tuple[frozenset[object], bool]] = {}


def widened(names: frozenset[object]) -> tuple[frozenset[object], bool]:
    """``names`` with the parts an untyped page splits each into (``X_bucket``, ``X_sum``, ``X_count`` for ``X``),
    and whether ``names`` holds both a name and one of its parts. When it does not, a page whose families are all in
    ``names`` holds no part read for itself, and ``assemble`` has nothing to do (``parse`` then skips it)."""
    known = _WITH_PARTS.get(names)
    if known is None:
        if len(_WITH_PARTS) >= 16:
            _WITH_PARTS.clear()
        parts = [name + part for name in names if isinstance(name, str) for part in _PARTS]
        known = _WITH_PARTS[names] = (names.union(parts), not names.isdisjoint(parts))
    return known


def keep_parts(keep: Keep) -> Keep:
    """``keep`` widened to the parts an untyped page splits a wanted family into (see ``widened``). A set's
    membership test stays one (the text parser passes over unwanted families by a pattern built from the set); the
    parts read but not put together are dropped again by ``assemble``."""
    names = getattr(keep, "__self__", None)
    if isinstance(names, frozenset) and getattr(keep, "__name__", "") == "__contains__":
        return widened(names)[0].__contains__
    if getattr(keep, "__name__", "") == "_everything":
        return keep

    def wide(name: str) -> bool:
        return keep(name) or (name.endswith(_PARTS) and keep(name[: name.rindex("_")]))

    return wide


_TYPE = operator.attrgetter("type")


def has_untyped(families: dict[str, MetricFamily]) -> bool:
    """Whether any family lacks a type: one pass in C, so that a page of typed families costs next to nothing."""
    return "unknown" in map(_TYPE, families.values())


def assemble(families: dict[str, MetricFamily], keep: Keep | None) -> dict[str, MetricFamily]:
    """``families`` as read with ``keep_parts(keep)``: untyped parts put together (see the module docstring), then
    only the families ``keep`` wants (a typed ``X_count`` read for a wanted ``X`` is dropped again; None: every
    family). On a page whose families all have a type this is a pass in C and a look at each name."""
    whole: dict[str, MetricFamily] = {}  # base name -> the family put together
    if has_untyped(families):
        for name in [name for name, fam in families.items() if fam.type == "unknown"]:
            base = _base(name)
            if base in whole or (keep is not None and not keep(base)):
                continue
            family = _put_together(families, base)
            if family is not None:
                whole[base] = family
    if not whole:
        if keep is None or all(map(keep, families)):  # the usual page: nothing read for the parts alone
            return families
        return {name: fam for name, fam in families.items() if keep(name)}
    out: dict[str, MetricFamily] = {}
    for name, fam in families.items():
        base = name if name in whole else _base(name)
        family = whole.get(base)
        if family is not None and (name == base or fam.type == "unknown"):
            if base not in out:
                out[base] = family  # where the first of its parts was on the page
        elif keep is None or keep(name):
            out[name] = fam
    return out


def _base(name: str) -> str:
    for part in _PARTS:
        if name.endswith(part):
            return name[: -len(part)]
    return name


def _all_carry(family: MetricFamily, label: str) -> bool:
    return bool(family.samples) and all(label in s.labels for s in family.samples)


def _none_carry(family: MetricFamily | None, labels: Collection[str]) -> bool:
    return family is None or not any(label in s.labels for s in family.samples for label in labels)


def _put_together(families: dict[str, MetricFamily], base: str) -> MetricFamily | None:
    """Family ``base`` made of its untyped parts on the page, or None when they do not make one."""
    head, bucket, total, count = (families.get(base + part) for part in ("", *_PARTS))
    if any(fam is not None and fam.type != "unknown" for fam in (head, bucket, total, count)):
        return None  # a declared type for any of them: read as declared
    if total is None and count is None and bucket is None:
        return None
    if not (_none_carry(total, ("le", "quantile")) and _none_carry(count, ("le", "quantile"))):
        return None
    rest = [*(total.samples if total is not None else ()), *(count.samples if count is not None else ())]
    help_text = head.help if head is not None else ""
    if bucket is not None:  # with X_sum or X_count, or buckets alone (a page cut before the histogram's end)
        if (head is not None and head.samples) or not _all_carry(bucket, "le"):
            return None
        return MetricFamily(base, "histogram", help_text, [*bucket.samples, *rest])
    if total is None and count is None:
        return None  # X (and no bucket) alone: nothing says it is a summary
    if head is not None and head.samples:
        if not _all_carry(head, "quantile"):
            return None
        return MetricFamily(base, "summary", help_text, [*head.samples, *rest])
    if total is None or count is None:
        return None  # a lone X_sum or X_count: nothing says what it is
    return MetricFamily(base, "summary", help_text, rest)
