"""The one seam to the simulator: loading traces and building fleets. Only `scaler.backtest` may import it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def load_trace(path: str, **options: Any) -> Any:
    import simulator

    return simulator.load_trace(path, **options)


def replica_profile() -> Any:
    """The simulated replica (the simulator's default profile)."""
    import simulator.profile

    return simulator.profile.ReplicaProfile()


def serving_profile_fields(profile: Any = None) -> dict[str, float | int]:
    """A simulated replica as an operator would configure it from a benchmark of one replica
    (`scaler.default.profile`, `scaler.capacity.ServingProfile`): prefill tokens/s with full chunks, the decode
    step alone and with a full batch of short sequences, the KV pool, and KV tokens read per second. The one
    derivation the backtest and the demo share."""
    p = profile if profile is not None else replica_profile()
    chunk, full = p.max_num_batched_tokens, p.max_num_seqs
    return {
        "prefill_tokens_per_s": chunk / p.step_time(chunk, 0, 0),
        "decode_step_s": p.step_time(0, 1, 0),
        "decode_tokens_per_s": full / p.step_time(0, full, 0),
        "kv_tokens": float(p.kv_capacity_tokens),
        "max_num_seqs": full,
        "kv_read_tokens_per_s": 1.0 / p.kv_read_s_per_token,
    }


def render_page(replica: Any, engine: str) -> bytes:
    """The `/metrics` page the live simulator serves for this replica snapshot."""
    from simulator.exposition import render_replica

    return render_replica(replica, engine)


def make_fleet(trace: Any, *, replicas: int, cold_start_s: float, fidelity: str, seed: int, routing: str) -> Any:
    """A simulated fleet for this trace; `fidelity` "request" or "fluid"."""
    import simulator

    config = simulator.FleetConfig(
        replicas=replicas, cold_start_s=cold_start_s, fidelity=fidelity, seed=seed, routing=routing, start_ready=True
    )
    return simulator.Fleet(config, trace)


def replica_count(fleet: Any) -> int:
    """Replicas the fleet holds now, loading and draining included, as ``len(fleet.snapshot().replicas)`` counts
    them but without building the snapshot: every fleet a replay drives (`simulator.Fleet`, the pool frontier's
    `OnePool`) says it through ``replica_count()``."""
    return int(fleet.replica_count())


def stationary_trace(trace: Any, *, rate: float, duration_s: float, seed: int) -> Any:
    """A Poisson stream at ``rate`` req/s of requests drawn from ``trace`` (its token and prefix mix).

    ``trace`` must hold its requests (a request-level trace, or a short window of a long one)."""
    from simulator import Trace
    from simulator.trace.model import RequestColumns

    cols = trace.columns
    if len(cols) == 0:
        raise ValueError(f"trace {getattr(trace, 'name', '?')!r} holds no requests to profile a replica with")
    rng = np.random.default_rng(seed)
    n = max(1, int(rng.poisson(rate * duration_s)))
    pick = rng.integers(0, len(cols), n)
    arrivals = np.sort(rng.uniform(0.0, duration_s, n))
    sample = RequestColumns(
        arrivals, cols.prompt_tokens[pick], cols.output_tokens[pick], [cols.prefix_blocks[i] for i in pick]
    )
    return Trace(f"{getattr(trace, 'name', 'trace')}@{rate:.3g}rps", duration_s, _columns=sample)


ROLLOUT_MODEL = "next"  # the model name the new version's replicas report


def rolled(replicas: Sequence[Any]) -> bool:
    """Every replica serves the new version and is ready: where a rollout's window ends (the backtest's and the
    demo's)."""
    return bool(replicas) and all(r.model_name == ROLLOUT_MODEL and r.state == "ready" for r in replicas)


def rollout_controllers() -> tuple[str, ...]:
    """The simulator's models of the rollout's controller (its `rollout` fault's ``controller``)."""
    from simulator.faults import ROLLOUT_CONTROLLERS

    return tuple(ROLLOUT_CONTROLLERS)


def rollout_fault(
    *, wave_size: int, speed: float, model_name: str = ROLLOUT_MODEL, controller: str = "deployment"
) -> Any:
    """The simulator's `rollout` fault: a rolling update (maxSurge 0) in waves of ``wave_size`` to a new version
    named ``model_name`` whose step times are divided by ``speed``, run by ``controller`` (the Deployment
    controller's fenceposts, the simulator's default, or fixed ``waves``)."""
    from simulator import parse_fault

    return parse_fault(
        {"type": "rollout", "wave_size": wave_size, "model_name": model_name, "speed": speed, "controller": controller}
    )


def xid_fault(snapshot: Any, replica: str, xid: int) -> Any:
    """The simulator's `xid` fault (the one `kvpilot demo` injects through the control API) on the GPU that
    ``replica`` runs on in ``snapshot`` (its first, for a replica of several GPUs)."""
    from simulator import parse_fault

    gpu = next((g for g in snapshot.gpus if g.pod == replica), None)
    if gpu is None:
        raise KeyError(f"replica {replica!r} holds no GPU in the snapshot")
    return parse_fault({"type": "xid", "node": gpu.node, "gpu": gpu.index, "xid": xid})
