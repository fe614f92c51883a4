"""Cost in `kvpilot run`: the settings section (defaults merged, bad types refused with the field), the simulator's
calibrated profiles as the recommendation's options, and the live loop's snapshot and /metrics with a price change."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from collector.clock import VirtualClock
from kvpilot.runtime.cost import cost_config, profile_candidates
from kvpilot.settings import SettingsError, load_settings
from scaler.cost import DEFAULT_GPU_PRICES, deployment_cost
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks
from tests.unit.scaler.test_cost import MODEL, _view


def test_settings_merge_onto_the_defaults_field_by_field():
    gpus = {"H100": {"price_per_hour_usd": 2.1}, "L40S": {"price_per_hour_usd": 0.9, "power_w": 350}}
    s = load_settings(None, cost={"gpus": gpus})
    assert s.cost.gpus["H100"].price_per_hour_usd == 2.1
    assert s.cost.gpus["H100"].power_w == 700.0
    assert s.cost.gpus["L4"].price_per_hour_usd == DEFAULT_GPU_PRICES["L4"].price_per_hour_usd  # kept
    assert s.cost.gpus["L40S"].power_w == 350
    assert set(load_settings(None).cost.gpus) == set(DEFAULT_GPU_PRICES)


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        # a deployment on a GPU type nobody priced
        ({"deployments": {"llm/chat": {"gpu_type": "H300"}}}, "deployments['llm/chat'].gpu_type 'H300' has no price"),
        ({"default": {"gpu_type": "B200"}}, "cost.default.gpu_type 'B200' has no price in cost.gpus (known: A100"),
        # a new type needs both numbers
        ({"gpus": {"B200": {"price_per_hour_usd": 5.0}}}, "cost.gpus.B200.power_w"),
        ({"gpus": {"H100": {"price_per_hour_usd": 0}}}, "cost.gpus.H100.price_per_hour_usd"),
        ({"deployments": {"chat": {"gpu_type": "H100"}}}, "must be 'namespace/name'"),
        ({"deployments": {"llm/chat": {"gpus_per_replica": 0}}}, "gpus_per_replica"),
        ({"gpus": {"bad name": {"price_per_hour_usd": 1, "power_w": 1}}}, "is not a GPU type name"),
    ],
)
def test_bad_cost_settings_name_the_field(cost, message):
    with pytest.raises(SettingsError) as e:
        load_settings(None, cost=cost)
    assert message in str(e.value)


def test_profiles_offer_every_priced_gpu_type_of_a_model():
    options = profile_candidates(list(DEFAULT_GPU_PRICES))
    by_type = {c.gpu_type: c for c in options[MODEL.lower()]}
    assert set(by_type) == {"H100", "H200", "A100", "L4"}
    assert by_type["L4"].max_model_len == 8192
    big = {(c.gpu_type, c.gpus_per_replica) for c in options["meta-llama/meta-llama-3-70b-instruct"]}
    assert big == {("H100", 4), ("A100", 4)}


def test_an_h200_fleet_is_advised_onto_h100_only_past_the_margin():
    # Per the calibrated profiles (the H200's fitted to ops measured on an H200) at 1,000 prompt / 200 output tokens,
    # 1,000 req/s take 42 H200 or 51 H100. At default prices ($3.59 / $2.69 an hour) the H100s would save 9 %,
    # inside the 10 % margin the profiles' error needs: no advice, and the message says why. At $2.40 an H100 they
    # save 19 %: advised. At 20 req/s whole replicas decide it the other way (1 H200 against 2 H100).
    cfg = cost_config(load_settings(None))
    small = deployment_cost(_view(replicas=4, arrival_per_replica=5.0, gpu_name="NVIDIA H200"), cfg).recommendation
    assert small is not None
    assert small.recommended is None
    cost = deployment_cost(_view(replicas=10, arrival_per_replica=100.0, gpu_name="NVIDIA H200"), cfg)
    assert cost.gpu_type == "H200"
    assert cost.recommendation is not None
    assert cost.recommendation.recommended is None
    assert "H100 would save 9 %, inside the 10 % margin" in cost.recommendation.message
    cheaper = cost_config(load_settings(None, cost={"gpus": {"H100": {"price_per_hour_usd": 2.4}}}))
    rec = deployment_cost(_view(replicas=10, arrival_per_replica=100.0, gpu_name="NVIDIA H200"), cheaper).recommendation
    assert rec is not None
    assert rec.recommended is not None
    assert rec.recommended.gpu_type == "H100"
    assert rec.current is not None
    assert rec.current.gpu_type == "H200"
    assert rec.recommended.usd_per_hour <= 0.9 * rec.current.usd_per_hour
    # on H100 already: nothing cheaper meets the SLO
    same = deployment_cost(_view(replicas=10, arrival_per_replica=100.0), cfg).recommendation
    assert same is not None
    assert same.recommended is None
    assert "H100 is the cheapest" in same.message
    assert cost_config(load_settings(None, cost={"recommend": False})).candidates == {}


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'kvpilot.db'}"


@pytest.mark.parametrize("price", [2.69, 5.0])
async def test_live_loop_exports_cost_and_a_price_change_moves_it(db, price) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock)  # one replica on one H100 (dcgm modelName "H100"), 100 output tokens x 4 req/s
    overrides = {"cost": {"gpus": {"H100": {"price_per_hour_usd": price}}}}
    service, restored, timer = make_service(db, clock, fleet, overrides=overrides)
    await service.start(restored)
    await run_ticks(service, timer, 4)
    await until(lambda: service.snapshot() is not None, what="a snapshot")
    snap = service.snapshot()
    assert snap is not None
    cost = snap.costs["llm/chat"]
    assert (cost.gpu_type, cost.gpus_per_replica, cost.replicas) == ("H100", 1, 1)
    assert cost.usd_per_hour == pytest.approx(price)
    assert cost.usd_per_million_tokens == pytest.approx(price / (400 * 3600) * 1e6, rel=0.05)
    text = generate_latest(service.registry).decode()
    assert f'kvpilot_cost_usd_per_hour{{deployment="llm/chat",gpu_type="H100",pool=""}} {price}' in text
    assert 'kvpilot_cost_usd_per_million_tokens{deployment="llm/chat",gpu_type="H100",pool=""}' in text
    service.stop.set()
    await service.wait()
