"""KV-transfer stalls in a disaggregated deployment: the prefill pool finishes prompts whose KV the decode pool
never receives (a NIXL/UCX link down, a misconfigured side channel, a decode pool that stopped pulling).

Read from the two pools' own rates over the same window (collector.roles keys them ``…@prefill``, ``…@decode``):
prefill's finished requests per second (a prefill worker finishes a request when its KV is ready to hand over)
against decode's arrivals (finished + the change in its queue and batch). When decode takes in less than
``1 - MAX_SHORTFALL`` of what prefill hands over, requests are stuck between the pools: their clients wait for a
first token that decode cannot produce. Quiet pools (prefill below ``MIN_PREFILL_RPS``) prove nothing.
"""

from __future__ import annotations

from collector.roles import DECODE, PREFILL, pool_key, split_pool_key
from collector.state import FleetState
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import Thresholds

KIND = "kv_transfer_stall"
MIN_PREFILL_RPS = 0.5  # below this a window holds too few hand-overs to tell a stall from noise
MAX_SHORTFALL = 0.5  # decode taking in under half of what prefill finished: not a lag, a stall


def detect(state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]:
    views = state.deployments()
    out: list[Finding] = []
    for key, prefill in views.items():
        deployment, pool = split_pool_key(key)
        decode = views.get(pool_key(deployment, DECODE))
        if pool != PREFILL or decode is None or not prefill.ready_replicas or not decode.ready_replicas:
            continue
        handed = sum(r.requests_finished_rate or 0.0 for r in prefill.replicas if r.ready)
        received = decode.arrival_rate
        if handed < MIN_PREFILL_RPS or received is None or received >= (1.0 - MAX_SHORTFALL) * handed:
            continue
        out.append(
            Finding(
                kind=KIND,
                severity=Severity.WARNING,
                subject=Subject(deployment=decode.key),
                since=now,
                summary=(
                    f"{decode.key} takes in {received:.2f} req/s of the {handed:.2f} req/s {prefill.key} prefilled: "
                    "KV is not arriving"
                ),
                evidence={"prefilled_rps": handed, "decode_arrivals_rps": received, "prefill_pool": prefill.key},
                action="notify",
            )
        )
    return out
