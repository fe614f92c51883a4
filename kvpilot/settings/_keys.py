"""The keys a mapping of the settings may hold, for the hint under a key that is none of them ("did you mean
collector.interval_s?"): a misspelt key in the file was refused as "Extra inputs are not permitted", naming neither the
key meant nor the keys there are, where a misspelt KVPILOT_* section already got a "did you mean"."""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

_LISTED_UP_TO = 24  # keys listed when none is close; a longer list would bury the error


def unknown_key_hint(model: type[BaseModel], loc: Sequence[str | int]) -> str:
    """For an unknown key at ``loc`` (its path from ``model``): "; did you mean <path>?" naming the closest key of the
    mapping it is in, else the keys that mapping holds; "" where the mapping is not a settings model's."""
    *parent, key = loc
    keys = _keys_at(model, parent)
    if not keys or not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key, keys, n=1)
    if close:
        return f"; did you mean {'.'.join(str(p) for p in (*parent, close[0]))}?"
    if len(keys) > _LISTED_UP_TO:
        return ""
    where = ".".join(str(p) for p in parent)
    return f"; {where + ' holds' if where else 'the settings are'}: {', '.join(keys)}"


def _keys_at(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    tp: Any = model
    for part in path:
        tp = _step(_unwrap(tp), part)
        if tp is None:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return sorted(f.alias or name for name, f in tp.model_fields.items())
    return []


def _step(tp: Any, part: str | int) -> Any:
    """The type one key or index below ``tp``: a model's field, a mapping's value, a list's item; None past a leaf."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        fields = {f.alias or name: f for name, f in tp.model_fields.items()}
        field = fields.get(part) if isinstance(part, str) else None
        return None if field is None else field.annotation
    origin = get_origin(tp)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return get_args(tp)[1] if len(get_args(tp)) == 2 else None
    if isinstance(origin, type) and issubclass(origin, Sequence) and not issubclass(origin, str):
        return get_args(tp)[0] if get_args(tp) else None
    return None


def _unwrap(tp: Any) -> Any:
    """``Annotated[X, ...]`` is X; ``X | None`` (any union) is its first member that has keys below it."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _unwrap(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        for member in get_args(tp):
            inner = _unwrap(member)
            if (isinstance(inner, type) and issubclass(inner, BaseModel)) or get_origin(inner) is not None:
                return inner
        return None
    return tp
