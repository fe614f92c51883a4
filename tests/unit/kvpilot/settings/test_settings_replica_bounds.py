"""Replica bounds are counts Kubernetes holds (int32: a Deployment's spec.replicas, KEDA's maxReplicaCount): one past
2,147,483,647 is refused naming the field. ``max_replicas: 99999999999999999999999999999999`` was accepted, and a
``min_replicas`` that large asked for a count no decision row, KEDA int64 field or scale subresource takes."""

from __future__ import annotations

import pytest

from kvpilot.settings import SettingsError, load_settings

LARGEST = 2**31 - 1


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ({"default": {"max_replicas": LARGEST + 1}}, "scaler.default.max_replicas"),
        ({"default": {"min_replicas": LARGEST + 1, "max_replicas": LARGEST}}, "scaler.default.min_replicas"),
        ({"deployments": {"llm/chat": {"max_replicas": 10**32}}}, "scaler.deployments.llm/chat.max_replicas"),
        ({"pools": {"prefill": {"min_replicas": 10**20}}}, "scaler.pools.prefill.min_replicas"),
    ],
)
def test_a_replica_bound_past_int32_is_refused_naming_it(section: dict[str, object], where: str) -> None:
    with pytest.raises(SettingsError, match=rf"{where}.*less than or equal to {LARGEST}"):
        load_settings(scaler=section)


def test_the_largest_int32_is_taken() -> None:
    settings = load_settings(scaler={"default": {"min_replicas": LARGEST, "max_replicas": LARGEST}})
    assert settings.scaler.default.max_replicas == LARGEST
