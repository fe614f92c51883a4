"""`detectors`: which detectors run and overrides of their thresholds (`detectors.thresholds`)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from detectors.registry import DETECTORS
from detectors.thresholds import Thresholds
from kvpilot.settings._section import _Section
from kvpilot.settings.sources import FieldError


def _one_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One line for a value no branch takes (a list, a map), not one per branch of the union."""
    try:
        return handler(value)
    except ValidationError:
        raise ValueError(f"must be a number, a string, true/false or null, not {type(value).__name__}") from None


# null is taken here and refused, naming the field, where the threshold itself does not allow None
Scalar = Annotated[float | int | str | bool | None, WrapValidator(_one_error)]


_NULLS = frozenset({"null", "none", "~", ""})


def _from_text(cls: type, name: str, value: Any) -> Any:
    """A value given as text (every KVPILOT_* environment variable, a quoted YAML scalar) as the threshold's own
    type: a number for a numeric field, None for "null" where the field takes it. Anything else is returned as is,
    for the threshold's own check."""
    declared = typing.get_type_hints(cls).get(name)
    if not isinstance(value, str) or declared is None:  # an unknown field is refused by name afterwards
        return value
    kinds = typing.get_args(declared) or (declared,)
    text = value.strip()
    if type(None) in kinds and text.lower() in _NULLS:
        return None
    if int in kinds and float not in kinds:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{cls.__name__}.{name} must be a whole number, got {value!r}") from None
    if float in kinds:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{cls.__name__}.{name} must be a number, got {value!r}") from None
    return value


def _nullable(cls: type) -> tuple[str, ...]:
    """The fields of a thresholds dataclass that take None (`float | None`): None turns their rule off."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if type(None) in typing.get_args(hints[f.name]))


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

    @field_validator("only", mode="after")
    @classmethod
    def _known_kinds(cls, only: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """every kind in `only` is a detector's (an unknown one would fail every tick's detect stage)"""
        unknown = [kind for kind in only or () if kind not in DETECTORS]
        if unknown:
            raise ValueError(f"unknown detector(s) {unknown}; known: {sorted(DETECTORS)}")
        return only

    @field_validator("kv", "prefix", "gpu", "ttft", "target", mode="after")
    @classmethod
    def _typed(cls, overrides: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """numbers given as text (every KVPILOT_* variable) read as numbers, so what applies is what is shown"""
        assert info.field_name is not None
        section = typing.get_type_hints(Thresholds)[info.field_name]
        return {name: _from_text(section, name, value) for name, value in overrides.items()}

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
            nullable = _nullable(type(current))
            for name, value in overrides.items():
                if value is None and name not in nullable:
                    takes = f"only {', '.join(nullable)} take null" if nullable else "none of its fields takes null"
                    raise FieldError((section, name), f"must be a number, not null (in detectors.{section} {takes})")
            try:
                changes[section] = dataclasses.replace(current, **overrides)
            except (TypeError, ValueError) as e:
                raise ValueError(f"detectors.{section}: {e}") from None
        return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
