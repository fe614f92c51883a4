"""KV bytes handed from prefill to decode come from the model's shape (issue 14): 2 (K and V) x layers x KV heads x
head dim x 2 bytes a token, for every profiled model, so a 70B deployment moves 2.5 times an 8B's per token."""

from __future__ import annotations

import pytest

from simulator.calibration import LLAMA2_7B, LLAMA3_8B, LLAMA3_70B, ModelShape
from simulator.config import FleetConfig
from simulator.disagg import DisaggConfig, DisaggregatedFleet
from simulator.profile import PROFILES
from tests.unit.simulator.test_sim_disagg import _trace

# each profiled model's shape, from its Hugging Face config.json (simulator.calibration)
SHAPES: dict[str, ModelShape] = {
    "meta-llama/Meta-Llama-3-8B-Instruct": LLAMA3_8B,
    "meta-llama/Meta-Llama-3-70B-Instruct": LLAMA3_70B,
    "meta-llama/Llama-2-7b-chat-hf": LLAMA2_7B,  # the chat model has the base model's shape
}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_holds_its_models_kv_bytes(name: str) -> None:
    profile = PROFILES[name]
    shape = SHAPES[profile.model_name]
    assert profile.kv_bytes_per_token == 2 * shape.n_layers * shape.n_kv_heads * shape.head_dim * 2


def test_a_70b_deployment_moves_its_own_kv_over_the_link() -> None:
    # prefill on 4 x H100, decode on 4 x A100, both Llama-3-70B: 327,680 bytes a token (GQA: 8 KV heads of 128)
    trace = _trace(n=10, prompt=1_000, output=8, every_s=2.0)
    fleet = DisaggregatedFleet(
        DisaggConfig(
            prefill=FleetConfig(profile=PROFILES["llama3-70b-h100-tp4"], replicas=1, cold_start_s=0),
            decode=FleetConfig(profile=PROFILES["llama3-70b-a100-tp4"], replicas=1, cold_start_s=0),
        ),
        trace,
    )
    fleet.advance_to(trace.duration_s + 60)
    assert fleet.transfers.count == 10
    assert fleet.transfers.bytes_total == 10 * 1_000 * 327_680 == 10 * 1_000 * LLAMA3_70B.kv_bytes_per_token
    assert LLAMA3_70B.kv_bytes_per_token == 2.5 * LLAMA3_8B.kv_bytes_per_token
