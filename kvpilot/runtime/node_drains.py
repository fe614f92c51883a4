"""Node → state of the live drain actions, as the actuator task last read them from the store; the loop copies the
map into each snapshot (``kvpilot_node_drain_state``, actuation's draining nodes, the demo's view).

The wiring hands one ``NodeDrains`` to both: the service writes it, the loop reads it, and neither reaches into the
other.
"""

from __future__ import annotations

from collections.abc import Mapping


class NodeDrains:
    def __init__(self) -> None:
        self._by_node: dict[str, str] = {}

    def current(self) -> dict[str, str]:
        """A copy: a snapshot keeps the map of its tick."""
        return dict(self._by_node)

    def replace(self, by_node: Mapping[str, str]) -> None:
        """The map read now; swapped whole, so a reader in another thread sees the old one or the new one."""
        self._by_node = dict(by_node)
