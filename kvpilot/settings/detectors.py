"""`detectors`: which detectors run and overrides of their thresholds (`detectors.thresholds`)."""

from __future__ import annotations

import dataclasses

from pydantic import Field, model_validator

from detectors.thresholds import Thresholds
from kvpilot.settings._section import _Section

Scalar = float | int | str | bool


class DetectorSettings(_Section):
    """Overrides of the detectors' own thresholds (``detectors.thresholds``), by section and field, so detectors,
    alert rules and this file share one set of defaults; ``only`` restricts which detectors run."""

    only: tuple[str, ...] | None = Field(default=None, description="Run only these detectors (by kind); unset: all.")
    kv: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the KV-exhaustion thresholds (table below)."
    )
    prefix: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the prefix-cache-miss thresholds (table below)."
    )
    gpu: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the stuck-GPU thresholds (table below)."
    )
    ttft: dict[str, Scalar] = Field(default_factory=dict, description="Overrides of the TTFT SLO (table below).")
    target: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the target-down threshold (table below)."
    )

    @model_validator(mode="after")
    def _applies(self) -> DetectorSettings:
        """every override names a known threshold and passes its range check"""
        self.thresholds(tick_s=5.0)  # unknown fields and out-of-range values fail at start, named
        return self

    def thresholds(self, *, tick_s: float) -> Thresholds:
        base = Thresholds(tick_s=tick_s)
        changes: dict[str, object] = {}
        for section in ("kv", "prefix", "gpu", "ttft", "target"):
            overrides = getattr(self, section)
            if not overrides:
                continue
            current = getattr(base, section)
            known = {f.name for f in dataclasses.fields(current)}
            unknown = sorted(set(overrides) - known)
            if unknown:
                raise ValueError(f"detectors.{section}: unknown field(s) {unknown}; known: {sorted(known)}")
            try:
                changes[section] = dataclasses.replace(current, **overrides)
            except (TypeError, ValueError) as e:
                raise ValueError(f"detectors.{section}: {e}") from None
        return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
