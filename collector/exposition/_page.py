"""A page read off a layout (collector.exposition._layout). Its own module, left out of the mypyc build: a
compiled class cannot subclass ``dict``."""

from __future__ import annotations

from collector.exposition._model import MetricFamily


class LaidOutPage(dict[str, MetricFamily]):
    """A page's families as read off a layout: a plain dict of them, plus ``shape``, the tuple of its families'
    shapes in order (what ``collector.engines._read.page_shape`` would work out from them), the same object on
    every page of the layout, so that readers keying plans on it need not build it per page. Treat as read-only
    (adding or removing a family would leave ``shape`` describing the page it was)."""

    __slots__ = ("shape",)

    def __init__(self, families: dict[str, MetricFamily], shape: tuple[object, ...]) -> None:
        super().__init__(families)
        self.shape = shape
