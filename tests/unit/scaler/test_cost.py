"""scaler.cost: a deployment's dollars per hour and per million tokens from its GPU type, count and price, and the
advisory GPU-type recommendation, on a real FleetState fed with samples."""

from __future__ import annotations

import dataclasses

import pytest

from collector.samples import GpuSample, ReplicaSample
from collector.state import DeploymentView, FleetState
from scaler.capacity import ServingProfile
from scaler.cost import (
    DEFAULT_GPU_PRICES,
    Candidate,
    CostConfig,
    GpuAssignment,
    GpuPrice,
    deployment_cost,
    fleet_costs,
    gpu_type_of,
)

T0 = 1_000.0
MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"


def _view(
    *,
    replicas: int = 2,
    gpus_per_replica: int = 1,
    gpu_name: str | None = "NVIDIA H100 80GB HBM3",
    arrival_per_replica: float = 2.0,  # requests/s finished per replica
    prompt_tokens: float = 1000.0,
    output_tokens: float = 200.0,
) -> DeploymentView:
    state = FleetState(rate_window_s=60)
    for t in (T0, T0 + 30):
        samples, gpus = [], []
        for i in range(replicas):
            done = arrival_per_replica * (t - T0)
            samples.append(
                ReplicaSample(
                    namespace="llm", deployment="chat", replica=f"chat-{i}", node=f"node-{i}", engine="vllm",
                    model=MODEL, timestamp=t, requests_waiting=0, requests_running=4,
                    prompt_tokens=done * prompt_tokens, generation_tokens=done * output_tokens,
                    requests_finished=done,
                )
            )  # fmt: skip
            if gpu_name is not None:
                gpus += [
                    GpuSample(node=f"node-{i}", index=str(g), uuid=f"GPU-{i}-{g}", model_name=gpu_name, timestamp=t,
                              pod=f"chat-{i}", namespace="llm")
                    for g in range(gpus_per_replica)
                ]  # fmt: skip
        state.observe(samples, gpus, now=t)
    return state.deployments()["llm/chat"]


def test_gpu_type_from_product_names():
    known = DEFAULT_GPU_PRICES.keys() | {"L40S"}
    cases = [
        ("NVIDIA H100 80GB HBM3", "H100"),  # dcgm-exporter modelName
        ("NVIDIA-H100-80GB-HBM3", "H100"),  # node label nvidia.com/gpu.product
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),  # not L4: whole words only
        ("Tesla T4", None),  # no price known: unknown, not guessed
        (None, None),
    ]
    for name, want in cases:
        assert gpu_type_of(name, known) == want, name


def test_cost_is_replicas_times_gpus_times_price():
    view = _view(replicas=3, gpus_per_replica=2)
    cost = deployment_cost(view, CostConfig())
    assert (cost.gpu_type, cost.gpu_type_source) == ("H100", "gpu exporter")
    assert (cost.gpus_per_replica, cost.gpus_per_replica_source) == (2, "gpu exporter")
    assert cost.replicas == 3
    assert cost.usd_per_hour == pytest.approx(3 * 2 * 2.69)
    assert cost.power_w == pytest.approx(3 * 2 * 700.0)
    # 3 replicas x 2 req/s x 200 output tokens = 1,200 tokens/s = 4.32 M tokens/h
    assert cost.usd_per_million_tokens == pytest.approx(3 * 2 * 2.69 / 4.32)


def test_a_price_change_moves_the_cost():
    view = _view()
    cheap = CostConfig(gpus={**DEFAULT_GPU_PRICES, "H100": GpuPrice(1.0, 700.0)})
    dear = CostConfig(gpus={**DEFAULT_GPU_PRICES, "H100": GpuPrice(4.0, 700.0)})
    a, b = deployment_cost(view, cheap), deployment_cost(view, dear)
    assert a.usd_per_hour == pytest.approx(2.0)
    assert b.usd_per_hour == pytest.approx(8.0)
    assert b.usd_per_million_tokens == pytest.approx(4 * a.usd_per_million_tokens)


def test_settings_win_over_the_exporter():
    view = _view(gpus_per_replica=1)
    cfg = CostConfig(deployments={"llm/chat": GpuAssignment("A100", 4)})
    cost = deployment_cost(view, cfg)
    assert (cost.gpu_type, cost.gpu_type_source, cost.gpus_per_replica) == ("A100", "settings", 4)
    assert cost.usd_per_hour == pytest.approx(2 * 4 * 1.39)
    # the default assignment fills what the deployment's own leaves unset
    cfg = CostConfig(default=GpuAssignment(gpus_per_replica=2), deployments={"llm/chat": GpuAssignment("L4")})
    assert deployment_cost(view, cfg).gpus_per_replica == 2


def test_missing_gpu_type_says_so_and_prices_nothing():
    cases = [
        (_view(gpu_name=None), "scrape its GPUs' exporter"),  # no exporter joined
        (_view(gpu_name="Tesla T4"), "exporter names Tesla T4"),  # a product with no price
    ]
    for view, words in cases:
        cost = deployment_cost(view, CostConfig())
        assert cost.usd_per_hour is None
        assert cost.usd_per_million_tokens is None
        assert cost.gpu_type_source == "unknown"
        assert cost.problem is not None
        assert "GPU type unknown for llm/chat" in cost.problem
        assert words in cost.problem
        assert "cost.deployments['llm/chat'].gpu_type" in cost.problem


def test_no_generation_no_cost_per_token():
    view = dataclasses.replace(_view(), generation_tokens_rate=0.0)
    cost = deployment_cost(view, CostConfig())
    assert cost.usd_per_hour is not None
    assert cost.usd_per_million_tokens is None


def test_bad_config_is_refused_with_the_field():
    with pytest.raises(ValueError, match="'H300' has no price"):
        CostConfig(deployments={"llm/chat": GpuAssignment("H300")})
    with pytest.raises(ValueError, match="price_per_hour_usd must be a finite number > 0"):
        GpuPrice(0.0, 700.0)
    with pytest.raises(ValueError, match="recommend_margin"):
        CostConfig(recommend_margin=1.0)


def _profile(speed: float, *, kv_tokens: float = 500_000) -> ServingProfile:
    """A replica `speed` times as fast as the base one in every term."""
    return ServingProfile(
        prefill_tokens_per_s=20_000 * speed, decode_step_s=0.01 / speed, decode_tokens_per_s=5_000 * speed,
        kv_tokens=kv_tokens, max_num_seqs=256,
    )  # fmt: skip


def _candidates(*options: Candidate) -> dict[str, tuple[Candidate, ...]]:
    return {MODEL.lower(): options}


def test_recommends_a_cheaper_type_that_meets_the_slo():
    # H100 at $2.69 vs a type half as fast at $1.00: per request/s the slow one costs 2/2.69 = 74 % as much
    cfg = CostConfig(
        gpus={"H100": GpuPrice(2.69, 700), "SLOW": GpuPrice(1.0, 300)},
        candidates=_candidates(Candidate("H100", 1, _profile(1.0)), Candidate("SLOW", 1, _profile(0.5))),
        slo_ttft_s=2.0,
    )
    rec = deployment_cost(_view(replicas=4, arrival_per_replica=3.0), cfg).recommendation
    assert rec is not None
    assert rec.current is not None
    assert rec.recommended is not None
    assert rec.current.gpu_type == "H100"
    assert rec.recommended.gpu_type == "SLOW"
    assert rec.recommended.replicas >= 2 * rec.current.replicas - 1  # half as fast: about twice the replicas
    assert rec.recommended.usd_per_hour < 0.9 * rec.current.usd_per_hour
    assert "advisory" in rec.message


def test_no_recommendation_when_the_cheaper_type_misses_the_slo_or_saves_too_little():
    cases = [
        # the cheap type's prefill of a 1,000-token prompt alone takes 2 s: over a 1 s SLO
        (_profile(0.01), 1.0, "over the 1 s TTFT SLO"),
        # a 1,200-token request does not fit a 1,000-token KV pool
        (_profile(1.0, kv_tokens=1_000), 2.0, "exceeds the KV pool"),
    ]
    for slow, slo, why in cases:
        cfg = CostConfig(
            gpus={"H100": GpuPrice(2.69, 700), "SLOW": GpuPrice(0.01, 300)},
            candidates=_candidates(Candidate("H100", 1, _profile(1.0)), Candidate("SLOW", 1, slow)),
            slo_ttft_s=slo,
        )
        rec = deployment_cost(_view(), cfg).recommendation
        assert rec is not None
        assert rec.recommended is None
        slow_option = next(o for o in rec.options if o.gpu_type == "SLOW")
        assert not slow_option.meets_slo
        assert why in slow_option.why
    # the same speed at 95 % of the price: 5 % is inside the 10 % margin
    cfg = CostConfig(
        gpus={"H100": GpuPrice(2.0, 700), "SAME": GpuPrice(1.9, 700)},
        candidates=_candidates(Candidate("H100", 1, _profile(1.0)), Candidate("SAME", 1, _profile(1.0))),
    )
    rec = deployment_cost(_view(), cfg).recommendation
    assert rec is not None
    assert rec.recommended is None
    assert "inside the 10 % margin" in rec.message


def test_no_recommendation_without_profiles_of_the_model_or_of_the_current_type():
    assert deployment_cost(_view(), CostConfig()).recommendation is None  # no profiles at all
    cfg = CostConfig(candidates={"other/model": (Candidate("H100", 1, _profile(1.0)),)})
    assert deployment_cost(_view(), cfg).recommendation is None
    cfg = CostConfig(candidates=_candidates(Candidate("A100", 1, _profile(1.0))))
    rec = deployment_cost(_view(), cfg).recommendation
    assert rec is not None
    assert rec.current is None
    assert "no profile of" in rec.message


def test_fleet_costs_cover_every_deployment():
    view = _view()
    costs = fleet_costs({view.key: view}, CostConfig())
    assert set(costs) == {"llm/chat"}
    assert costs["llm/chat"].pool is None


def test_a_pool_takes_its_own_settings_then_its_deployments_then_the_default():
    cfg = CostConfig(
        default=GpuAssignment(gpus_per_replica=1),
        deployments={"llm/chat": GpuAssignment("H100", 2), "llm/chat@decode": GpuAssignment("H200")},
    )
    cases = [
        ("llm/chat@decode", GpuAssignment("H200", 2)),  # its own type, the deployment's count
        ("llm/chat@prefill", GpuAssignment("H100", 2)),  # nothing of its own: the deployment's
        ("llm/chat", GpuAssignment("H100", 2)),
        ("llm/other", GpuAssignment(None, 1)),  # the default only
    ]
    for key, want in cases:
        assert cfg.for_deployment(key) == want, key


def test_gpu_type_of_reads_a_product_name_once(monkeypatch):
    """The cost stage asks for every GPU of every replica each tick, of a few names: worked out once per name."""
    import scaler.cost as cost_module

    calls = []
    search = cost_module.re.search
    monkeypatch.setattr(cost_module.re, "search", lambda *a, **k: calls.append(a) or search(*a, **k))
    name, known = "NVIDIA H100 80GB HBM3 (asked twice)", ("H100", "A100")
    assert gpu_type_of(name, known) == "H100"
    assert calls
    asked = len(calls)
    assert gpu_type_of(name, known) == "H100"
    assert len(calls) == asked
