"""A simulated LLM inference fleet that behaves like real engines and GPUs and exposes what they expose.

It shares no code with kvpilot's collector, detectors or scaler: it is what they are tested against.

Python API (the backtest and the live server use exactly this)::

    from simulator import load_trace, Fleet, FleetConfig, ReplicaProfile, parse_fault

    trace = load_trace(path, *, time_scale=1.0, rate_scale=1.0, seed=0, start_s=None, duration_s=None)
        # path: Azure .csv | Mooncake .jsonl | ServeGen directory | "synthetic[:k=v,...]"
        # trace.requests -> Sequence[Request(arrival_s, prompt_tokens, output_tokens, prefix_blocks)]
        # trace.rate_series(step_s) -> RateSeries(times_s, req_per_s, mean_prompt_tokens, mean_output_tokens)
        #     (unpacks as a 4-tuple); trace.duration_s
    fleet = Fleet(FleetConfig(profile=ReplicaProfile(...), replicas=N, cold_start_s=120,
                              routing="round_robin" | "least_loaded" | "prefix_affinity",
                              fidelity="request" | "fluid", seed=0), trace)
    fleet.set_replicas(n)          # new replicas cold-start; removed ones drain (loading ones go at once)
    fleet.advance_to(t)            # virtual seconds since trace start, forward only, deterministic
    fleet.snapshot(replicas=None) -> FleetSnapshot(time, arrivals_total, unrouted_waiting, routing,
                                      replicas=[ReplicaSnapshot], gpus=[GpuSnapshot])
                                   # replicas: optional names, to snapshot only those replicas
    fleet.finished() -> Sequence[FinishedRequest(arrival_s, ttft_s, e2e_s, prompt_tokens, output_tokens, replica)]
    fleet.ttft_quantiles((0.5, 0.9, 0.99)) -> {q: seconds};  fleet.slo_attainment(slo_s) -> 0..1
    fleet.inject(parse_fault({"type": "xid", "node": "node-0", "gpu": 0, "xid": 79}))

Requests that arrive while no replica is ready wait at the gateway (`unrouted_waiting`) and count in TTFT.
See docs/simulator.md for the model, its constants and their sources.
"""

from simulator.config import FleetConfig
from simulator.faults import Fault, parse_fault
from simulator.fleet import Fleet
from simulator.profile import PROFILES, GpuModel, ReplicaProfile
from simulator.replica import FinishedRequest
from simulator.snapshot import FleetSnapshot, GpuSnapshot, ReplicaSnapshot
from simulator.trace import RateSeries, Request, Trace, load_trace

__all__ = [
    "PROFILES",
    "Fault",
    "FinishedRequest",
    "Fleet",
    "FleetConfig",
    "FleetSnapshot",
    "GpuModel",
    "GpuSnapshot",
    "RateSeries",
    "ReplicaProfile",
    "ReplicaSnapshot",
    "Request",
    "Trace",
    "load_trace",
    "parse_fault",
]
