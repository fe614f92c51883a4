"""`scaler.default.capacity_rps` is requests/s at a reference token mix, converted to the mix kvpilot measures: its
description (docs/configuration-reference.md) and docs/quickstart.md give that mix, and it must be the one the
capacity model uses, so that an operator who sets 10 and reads `capacity 7.4 req/s/replica` knows why."""

from __future__ import annotations

from pathlib import Path

from kvpilot.settings.scaler import DeploymentScaling
from scaler.capacity import CapacityConfig, CapacityModel, TokenMix

REPO = Path(__file__).resolve().parents[2]


def _words(mix: TokenMix) -> str:
    return f"{mix.prompt_tokens:,.0f} prompt and {mix.output_tokens:,.0f} output tokens a request"


def test_the_stated_reference_mix_is_the_models() -> None:
    config = CapacityConfig(requests_per_s=10.0)
    description = DeploymentScaling.model_fields["capacity_rps"].description or ""
    assert _words(config.reference_mix) in description
    assert f"an output token weighs {config.output_weight / config.prompt_weight:.0f} prompt tokens" in description
    quickstart = " ".join((REPO / "docs" / "quickstart.md").read_text().split())
    assert f"`scaler.default.capacity_rps` (requests/s at {_words(config.reference_mix)}" in quickstart


def test_the_configured_rate_holds_at_the_reference_mix_and_scales_with_the_work() -> None:
    model = CapacityModel(CapacityConfig(requests_per_s=10.0))
    assert model.requests_per_s(TokenMix(1000.0, 200.0)) == 10.0
    # twice the work a request (2,000 prompt + 4 x 400 output = 3,600 units against 1,800): half the requests/s
    assert abs((model.requests_per_s(TokenMix(2000.0, 400.0)) or 0.0) - 5.0) < 1e-9
