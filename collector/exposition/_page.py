"""A page read off a layout (collector.exposition._layout): its values by position, its families built only when
asked for. Its own module, left out of the mypyc build: a compiled class cannot subclass ``Mapping``'s mixins."""

from __future__ import annotations

from collections.abc import Callable, Iterator, KeysView, Mapping

from collector.exposition._model import MetricFamily, ParseError, Sample

SampleSpec = tuple[str, dict[str, str], float | None, int]  # name, labels, timestamp, position of its value
# name, type, help, unit, samples, shape, and the family's values picked off the page's values in sample order
FamilySpec = tuple[str, str, str, str, list[SampleSpec], object, Callable[[list[float]], tuple[float, ...]]]
# What a page read around bad lines says of them (collector.exposition._partial.PartialPage): its errors, the families
# left out, the metric names set aside.
ReadAround = tuple[tuple[ParseError, ...], frozenset[str], tuple[str, ...]]
_WHOLE: ReadAround = ((), frozenset(), ())


class LaidOutPage(Mapping[str, MetricFamily]):
    """A page's families as read off a layout, read-only. ``shape`` is the tuple of its families' shapes in order
    (what ``collector.engines._read.page_shape`` would work out from them), the same object on every page of the
    layout, so that readers keying plans on it need not build it per page.

    The page is its values, in the layout's order: readers that planned per layout take a family's values by
    position (``family_values``) and never build its samples; a family is built (and kept) the first time it is
    looked up, so a page read as a plain mapping equals the page the parser returns.

    A page of the layout of a page read around bad lines says what was left out as ``PartialPage`` says it:
    ``errors``, ``dropped`` and ``names`` (empty on a page read whole). The class stays one (readers test
    ``type(page) is LaidOutPage`` for their fast path)."""

    __slots__ = ("_built", "_specs", "_values", "dropped", "errors", "names", "shape")

    def __init__(
        self,
        specs: dict[str, FamilySpec],
        shape: tuple[object, ...],
        values: list[float],
        read_around: ReadAround = _WHOLE,
    ) -> None:
        self._specs = specs
        self._values = values
        self._built: dict[str, MetricFamily] = {}
        self.shape = shape
        self.errors, self.dropped, self.names = read_around

    @property
    def page_values(self) -> list[float]:
        """Every value the page read, in the layout's order (``positions`` says whose is where)."""
        return self._values

    def positions(self, name: str) -> tuple[int, ...]:
        """Where the values of family ``name``'s samples are in ``page_values``, in the order of its samples (the
        same on every page of the layout: readers work out their positions once per layout)."""
        return tuple(spec[3] for spec in self._specs[name][4])

    def family_values(self, name: str) -> tuple[float, ...]:
        """The values of family ``name``'s samples, in the order of its samples, without building them."""
        return self._specs[name][6](self._values)

    def __getitem__(self, name: str) -> MetricFamily:
        family = self._built.get(name)
        if family is None:
            fam, typ, help_text, unit, samples, shape, _pick = self._specs[name]
            values = self._values
            family = MetricFamily(
                fam, typ, help_text, [Sample(n, labels, values[i], ts) for n, labels, ts, i in samples], unit, shape
            )
            self._built[name] = family
        return family

    def get(self, name: str, default: MetricFamily | None = None) -> MetricFamily | None:  # type: ignore[override]
        return self[name] if name in self._specs else default

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def keys(self) -> KeysView[str]:
        return self._specs.keys()

    def __repr__(self) -> str:
        return f"LaidOutPage({dict(self)!r})"
