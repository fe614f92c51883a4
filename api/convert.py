"""Domain types and store rows → API bodies; one function per shape."""

from __future__ import annotations

import dataclasses
import json
import math

from api import schemas
from collector.roles import split_pool_key
from collector.state import SIGNALS, DeploymentView, GpuView, ReplicaView
from collector.urls import masked_in
from detectors.xid import triage
from scaler.cost import DeploymentCost, GpuOption
from scaler.decision import Decision
from store.models import DeploymentRow, DrainActionRow, DrainEventRow, FindingRow
from store.repo.decisions import finite


def _num(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def decision(d: Decision) -> schemas.DecisionOut:
    fields = dataclasses.asdict(d)
    fields["forecast"] = {k: _num(v) for k, v in d.forecast.items()}
    return schemas.DecisionOut(**fields)


def replica(r: ReplicaView) -> schemas.ReplicaOut:
    s = r.sample
    return schemas.ReplicaOut(
        key=r.key,
        deployment=s.deployment_key,
        replica=masked_in(s.replica),  # a replica on no pod is named by its page's URL: shown without its secrets
        node=s.node,
        engine=s.engine,
        model=s.model,
        ready=r.ready,
        target_up=r.target_up,
        last_seen=r.last_seen,
        requests_waiting=_num(s.requests_waiting),
        requests_running=_num(s.requests_running),
        kv_usage=_num(s.kv_usage),
        arrival_rate=_num(r.arrival_rate),
        prefix_hit_ratio=_num(r.prefix_hit_ratio),
        preemptions_rate=_num(r.preemptions_rate),
        prompt_tokens_rate=_num(r.prompt_tokens_rate),
        generation_tokens_rate=_num(r.generation_tokens_rate),
        gpus=[g.key for g in r.gpus],
    )


def deployment(
    key: str,
    view: DeploymentView | None,
    row: DeploymentRow | None,
    dec: Decision | None,
    cost_now: DeploymentCost | None = None,
) -> schemas.DeploymentSummary:
    base, pool = split_pool_key(key)
    ns, _, name = base.partition("/")
    return schemas.DeploymentSummary(
        key=key,
        namespace=ns,
        name=name,
        pool=pool,
        live=view is not None,
        replicas=view.known_replicas if view else 0,
        ready_replicas=view.ready_replicas if view else 0,
        **{name: _num(getattr(view, name)) if view else None for name in SIGNALS if name != "ready_replicas"},
        desired_replicas=dec.desired_replicas if dec else None,
        first_seen=row.first_seen if row else None,
        last_seen=row.last_seen if row else None,
        cost=cost(cost_now) if cost_now is not None else None,
    )


def _option(o: GpuOption | None) -> schemas.GpuOptionOut | None:
    if o is None:
        return None
    return schemas.GpuOptionOut(
        gpu_type=o.gpu_type,
        gpus_per_replica=o.gpus_per_replica,
        replicas=o.replicas,
        usd_per_hour=o.usd_per_hour,
        meets_slo=o.meets_slo,
        why=o.why,
    )


def cost(c: DeploymentCost) -> schemas.CostOut:
    r = c.recommendation
    rec = None
    if r is not None:
        rec = schemas.RecommendationOut(
            current=_option(r.current),
            recommended=_option(r.recommended),
            options=[o for o in map(_option, r.options) if o is not None],
            message=r.message,
        )
    return schemas.CostOut(
        pool=c.pool,
        gpu_type=c.gpu_type,
        gpu_type_source=c.gpu_type_source,
        gpus_per_replica=c.gpus_per_replica,
        gpus_per_replica_source=c.gpus_per_replica_source,
        replicas=c.replicas,
        price_per_gpu_hour_usd=c.price_per_gpu_hour_usd,
        usd_per_hour=_num(c.usd_per_hour),
        usd_per_million_tokens=_num(c.usd_per_million_tokens),
        power_w=_num(c.power_w),
        problem=c.problem,
        recommendation=rec,
    )


def finding(row: FindingRow) -> schemas.FindingOut:
    fields = {f: getattr(row, f) for f in schemas.FindingOut.model_fields}
    fields["evidence"] = _evidence(row.evidence)
    fields["replica"] = masked_in(row.replica)  # a replica on no pod: its page's URL, shown without its secrets
    fields["summary"] = masked_in(row.summary)  # rows stored before summaries were masked
    return schemas.FindingOut.model_validate(fields)


def _evidence(stored: object) -> dict[str, float | str | None]:
    """A finding's evidence as the API shows it. kvpilot stores finite numbers, text and null; a value of another kind
    (a row another version or a hand wrote) is shown as its JSON text, and evidence that is not an object as none, so
    that one such row never fails the page it is on."""
    if not isinstance(stored, dict):
        return {}
    numbers = finite(stored)
    return {
        k: numbers[k] if k in numbers else v if v is None or isinstance(v, str) else _json_text(v)
        for k, v in stored.items()
    }


def _json_text(v: object) -> str:
    return json.dumps(v, separators=(",", ":"), default=str)[:2000]


def gpu(g: GpuView) -> schemas.GpuOut:
    s = g.sample
    return schemas.GpuOut(
        key=g.key,
        node=s.node,
        index=s.index,
        uuid=s.uuid,
        model_name=s.model_name,
        present=g.present,
        last_seen=g.last_seen,
        replica=g.replica and masked_in(g.replica),
        utilisation=_num(s.utilisation),
        memory_used_bytes=_num(s.memory_used_bytes),
        memory_free_bytes=_num(s.memory_free_bytes),
        temperature_c=_num(s.temperature_c),
        power_w=_num(s.power_w),
        last_xid=s.last_xid,
        xid_class=triage(s).xid_class.value,
    )


def drain(row: DrainActionRow, events: list[DrainEventRow] | None = None) -> schemas.DrainOut:
    out = schemas.DrainOut.model_validate(row, from_attributes=True)
    if events:
        out.events = [schemas.DrainEventOut.model_validate(e, from_attributes=True) for e in events]
    return out
