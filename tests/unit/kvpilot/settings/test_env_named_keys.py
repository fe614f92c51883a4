"""A key that names something outside kvpilot (a deployment's "namespace/name", a GPU type) is matched as written,
but a variable's name is read in lower case: ``KVPILOT_SCALER__DEPLOYMENTS__Prod/Chat__MIN_REPLICAS`` set deployment
``prod/chat``, which a PromQL label ``Prod/Chat`` never matches, in silence. Such a variable is refused, saying
how to write the key; a key in lower case in the name, and a key with capitals in a JSON value, still work."""

from __future__ import annotations

import pytest

from kvpilot.settings import SettingsError, load_settings


def test_a_deployment_key_with_capitals_in_a_variable_name_is_refused_saying_how_to_write_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KVPILOT_SCALER__DEPLOYMENTS__Prod/Chat__MIN_REPLICAS", "2")
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert str(e.value) == (
        "invalid configuration (KVPILOT_* environment):\n"
        "  KVPILOT_SCALER__DEPLOYMENTS__Prod/Chat__MIN_REPLICAS: a variable's name is read in lower case, so this "
        "would set scaler.deployments key 'prod/chat', not 'Prod/Chat'; write a key with capitals in the settings "
        """file, or as JSON in KVPILOT_SCALER__DEPLOYMENTS='{"Prod/Chat": {...}}' (a key in lower case may stay in """
        "the name)"
    )
    monkeypatch.delenv("KVPILOT_SCALER__DEPLOYMENTS__Prod/Chat__MIN_REPLICAS")
    monkeypatch.setenv("KVPILOT_SCALER__DEPLOYMENTS", '{"Prod/Chat": {"min_replicas": 2}}')
    assert load_settings().scaler.deployments["Prod/Chat"].min_replicas == 2


@pytest.mark.parametrize(
    "name",
    [
        "KVPILOT_COST__GPUS__H100__PRICE_PER_HOUR_USD",  # the built-in type is "H100": this made a new one, "h100"
        "kvpilot_cost__deployments__Prod/Chat__gpu_type",
        "KVPILOT_COLLECTOR__ARRIVALS__DEPLOYMENTS__ML/Chat",
    ],
)
def test_every_named_key_is_checked(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "2")
    with pytest.raises(SettingsError, match="a variable's name is read in lower case"):
        load_settings()


def test_a_key_in_lower_case_in_the_name_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_SCALER__DEPLOYMENTS__prod/chat__MIN_REPLICAS", "3")
    monkeypatch.setenv("KVPILOT_COST__GPUS", '{"H100": {"price_per_hour_usd": 2.1}}')
    settings = load_settings()
    assert settings.scaler.deployments["prod/chat"].min_replicas == 3
    assert settings.cost.gpus["H100"].price_per_hour_usd == 2.1
    assert settings.cost.gpus["H100"].power_w == 700.0  # merged onto the built-in type, not a new one
