"""collector.frozen.fast_init: the per-scrape dataclasses built through their slots are the instances their dataclass
``__init__`` builds — every field, equality, hash, repr, frozen, ``__post_init__``'s checks, the same signature."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.adapt import AdaptedPage
from collector.frozen import fast_init
from collector.health import TargetHealth
from collector.samples import GoneGpuSample, GpuSample, Histogram, ReplicaSample, TargetInfo
from collector.scrape import ScrapeResult

FAST = [Histogram, ReplicaSample, GpuSample, TargetHealth, ScrapeResult, AdaptedPage]

floats = st.one_of(st.none(), st.floats(allow_nan=False), st.just(math.inf))
texts = st.one_of(st.none(), st.text(max_size=5))


def _value(f: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    """Some value for field ``f`` (types are not checked by either ``__init__``: any object will do)."""
    if f.name in ("bounds", "counts"):
        return st.just((1.0, math.inf))
    return st.one_of(floats, texts, st.integers(), st.booleans(), st.tuples(st.integers()), st.just({"x": 1.0}))


def _built_both_ways(cls: type, args: dict[str, Any]) -> tuple[Any, Any]:
    fast = cls(**args)
    slow = object.__new__(cls)
    cls.__dataclass_init__(slow, **args)  # type: ignore[attr-defined]
    return fast, slow


def _fields_of(obj: Any) -> list[Any]:
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
@given(data=st.data())
def test_the_same_instance_as_the_dataclass_init(cls: type, data: st.DataObject) -> None:
    # every field given or left to its default, in any mix: the same fields, ==, hash and repr as the dataclass builds
    args = {}
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required or data.draw(st.booleans()):
            args[f.name] = data.draw(_value(f))
    fast, slow = _built_both_ways(cls, args)
    assert type(fast) is cls
    assert _fields_of(fast) == _fields_of(slow)
    assert fast == slow
    assert repr(fast) == repr(slow)
    if cls.__hash__ is not None:
        try:
            expected = hash(slow)
        except TypeError:  # an unhashable field value: unhashable both ways
            with pytest.raises(TypeError):
                hash(fast)
        else:
            assert hash(fast) == expected


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
def test_the_same_signature(cls: type) -> None:
    # positional order, defaults, keyword-only fields: a caller cannot tell the two apart
    fast = inspect.signature(cls.__init__)
    slow = inspect.signature(cls.__dataclass_init__)  # type: ignore[attr-defined]
    assert [(p.name, p.kind) for p in fast.parameters.values()] == [(p.name, p.kind) for p in slow.parameters.values()]
    for name, p in slow.parameters.items():
        if p.default is not inspect.Parameter.empty and not repr(p.default).startswith("<factory>"):
            assert fast.parameters[name].default is p.default


def test_positional_arguments_and_errors_as_before() -> None:
    # (case) positional in field order
    assert Histogram((1.0, math.inf), (1.0, 2.0), 3.0, 2.0) == Histogram(
        bounds=(1.0, math.inf), counts=(1.0, 2.0), sum=3.0, count=2.0
    )
    # (case) a missing argument, an unknown one: TypeError as the dataclass says it
    with pytest.raises(TypeError, match="missing"):
        ReplicaSample("ns")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        TargetHealth(url="u", up=True, bogus=1)  # type: ignore[call-arg]
    # (case) __post_init__ still runs: a histogram without +Inf, or of unequal lengths, is refused
    with pytest.raises(ValueError, match="must end with an \\+Inf"):
        Histogram((1.0, 2.0), (1.0, 2.0), 0.0, 0.0)
    with pytest.raises(ValueError, match="1 bounds but 2 counts"):
        Histogram((math.inf,), (1.0, 2.0), 0.0, 0.0)


def test_still_frozen_and_factories_fresh() -> None:
    a = GpuSample("n", "0", None, None, 1.0)
    b = GpuSample("n", "0", None, None, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.node = "m"  # type: ignore[misc]
    # (case) a default_factory field: a new dict per instance, as the dataclass makes it; one passed is kept
    assert a.extra == {}
    assert a.extra is not b.extra
    given_extra = {"x": 1.0}
    assert GpuSample("n", "0", None, None, 1.0, extra=given_extra).extra is given_extra
    assert AdaptedPage("vllm").replicas == []
    assert AdaptedPage("vllm").replicas is not AdaptedPage("vllm").replicas
    # (case) replace() goes through the new __init__ and gives what it gave
    s = ReplicaSample("ns", "d", "r", "n", "vllm", None, 1.0, kv_usage=0.5)
    assert dataclasses.replace(s, kv_usage=None) == ReplicaSample("ns", "d", "r", "n", "vllm", None, 1.0)


def test_a_subclass_keeps_its_own_init() -> None:
    # GoneGpuSample is a dataclass of its own: its __init__ is the one @dataclass made for it, and it still builds
    gone = GoneGpuSample.of(GpuSample("n", "0", "u", "m", 1.0, utilisation=0.5))
    assert type(gone) is GoneGpuSample
    assert gone.utilisation == 0.5
    assert gone.uuid == "u"


def test_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    with pytest.raises(TypeError, match="not a slotted dataclass"):
        fast_init(NoSlots)

    @dataclasses.dataclass(frozen=True, slots=True)
    class NotInInit:
        x: int
        y: int = dataclasses.field(default=0, init=False)

    with pytest.raises(TypeError, match="not set by __init__"):
        fast_init(NotInInit)


def test_keyword_only_fields() -> None:
    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Kw:
        a: int
        b: str = "b"

    assert Kw(a=1) == Kw(a=1, b="b")
    with pytest.raises(TypeError):
        Kw(1)  # type: ignore[misc]


def test_target_info_is_left_as_is() -> None:
    # built once per target, not per scrape: kept on the dataclass's own __init__
    assert not hasattr(TargetInfo, "__dataclass_init__")


def test_a_subclass_instance_built_by_the_parent_init_keeps_its_class() -> None:
    # the fields are stored on a twin class of the same slots, and only an instance of the class itself is turned
    # into it and back: a subclass's instance (were its __init__ to call the parent's) stays what it is
    gone = object.__new__(GoneGpuSample)
    GpuSample.__init__(gone, "n", "0", "u", "m", 1.0, utilisation=0.5)
    assert type(gone) is GoneGpuSample
    assert gone == GoneGpuSample("n", "0", "u", "m", 1.0, utilisation=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gone.node = "m"  # type: ignore[misc]


def test_a_class_with_another_base_is_built_through_its_slots() -> None:
    # (case) a base class of its own: no twin of the same layout is made, the slots' descriptors store the fields
    class Base:
        __slots__ = ()

    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithBase(Base):
        x: int
        y: str = "y"

    fast, slow = _built_both_ways(WithBase, {"x": 1})
    assert type(fast) is WithBase
    assert _fields_of(fast) == _fields_of(slow) == [1, "y"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.x = 2  # type: ignore[misc]


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
def test_an_instance_is_never_left_as_its_twin(cls: type) -> None:
    # built, or built again by replace(): no instance is left of the twin the fields were stored on
    args = {f.name: (1.0, math.inf) if f.name in ("bounds", "counts") else 1.0 for f in dataclasses.fields(cls)}
    built = cls(**args)
    assert type(built) is cls
    assert type(dataclasses.replace(built)) is cls
    assert not [o for o in gc.get_objects() if type(o).__name__ == f"_{cls.__name__}Fields"]
