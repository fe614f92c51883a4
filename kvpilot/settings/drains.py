"""`drains`: draining nodes whose GPUs are stuck (kvpilot.actuation.drain)."""

from __future__ import annotations

from pydantic import Field

from kvpilot.settings._section import _Section


class DrainSettings(_Section):
    """Draining nodes whose GPUs are stuck."""

    dry_run: bool = Field(default=True, description="Record drain actions without cordoning or evicting anything.")
    max_concurrent: int = Field(default=1, ge=0, description="Most nodes drained (approved or executing) at once.")
    breaker_share: float = Field(
        default=0.2, gt=0, le=1, description="Refuse to drain when more than this share of nodes is flagged."
    )
    budget: int = Field(
        default=4,
        ge=0,
        description=(
            "Most drains started within budget_window_s (approved and executing ones included): a drained node stays "
            "cordoned until an operator uncordons it, so max_concurrent alone frees a slot each time a drain ends."
        ),
    )
    budget_window_s: float = Field(
        default=86400.0, gt=0, description="The window drains.budget counts over, in seconds (a day by default)."
    )
    require_approval: bool = Field(
        default=True, description="A drain waits for an admin's approval through the API before it runs."
    )
