"""A replica's role in a disaggregated deployment (prefill, decode or both) and the pool key it is grouped under.

Where the role comes from (first found wins; docs/disaggregated.md):

- kvpilot's own ``role`` (static-file field, ``kvpilot.io/role`` pod annotation);
- llm-d's pod label ``llm-d.ai/role`` (``prefill`` / ``decode`` / ``both``): llm-d/llm-d-inference-scheduler,
  pkg/plugins/filter/pd_role.go @ a943c427106817146747a3795eed056e44f8e100 (roleLabel, rolePrefill, roleDecode,
  roleBoth);
- Dynamo's pod labels ``nvidia.com/dynamo-sub-component-type`` (``prefill`` / ``decode``), else the component name in
  ``nvidia.com/dynamo-component`` (``VllmPrefillWorker``, ``VllmDecodeWorker``): ai-dynamo/dynamo,
  deploy/operator/internal/consts/consts.go @ d195d280e13e5532510a1004ad8d8d06f2f8266a (KubeLabelDynamoSubComponentType,
  KubeLabelDynamoComponent, ComponentTypePrefill, ComponentTypeDecode);
- the engine's page: Dynamo labels its workers' series with ``dynamo_component`` (ai-dynamo/dynamo @ 04070c7,
  lib/runtime/src/metrics/prometheus_names.rs, ``labels::COMPONENT``), whose value names the worker's component.

A replica with no role serves both phases: its pool is ``both``, and a co-located deployment is that one pool. A
pool other than ``both`` gets its own key, ``namespace/name@prefill``, so everything keyed by deployment (views,
history, decisions, findings, KEDA answers) is kept per pool without a second keying scheme; ``@`` cannot occur in
a Kubernetes name, so the split is unambiguous.
"""

from __future__ import annotations

from collections.abc import Mapping

PREFILL = "prefill"
DECODE = "decode"
BOTH = "both"
ROLES = (PREFILL, DECODE, BOTH)
POOL_SEPARATOR = "@"

KVPILOT_ROLE = "kvpilot.io/role"
LLM_D_ROLE = "llm-d.ai/role"
DYNAMO_SUB_COMPONENT_TYPE = "nvidia.com/dynamo-sub-component-type"
DYNAMO_COMPONENT = "nvidia.com/dynamo-component"
DYNAMO_METRIC_COMPONENT = "dynamo_component"  # label on a Dynamo worker's series


def parse_role(value: str) -> str:
    """One of ``ROLES`` from what an operator typed (case and spaces ignored); ``ValueError`` otherwise."""
    role = value.strip().lower()
    if role not in ROLES:
        raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {value[:40]!r}")
    return role


def role_from_component(name: str | None) -> str | None:
    """The role a Dynamo component name tells (``VllmPrefillWorker`` -> prefill, ``decode`` -> decode), else None:
    other names (``VllmWorker``, ``backend``, ``Frontend``) say nothing about the phase."""
    if not name:
        return None
    lowered = name.lower()
    if PREFILL in lowered:
        return PREFILL
    if DECODE in lowered:
        return DECODE
    return None


def role_from_pod(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """The role a pod's annotations and labels tell, or None. A value none of them allows raises ``ValueError``
    (only kvpilot's own annotation and llm-d's label carry ``both``)."""
    for source in (annotations.get(KVPILOT_ROLE), labels.get(LLM_D_ROLE)):
        if source:
            return parse_role(source)
    sub = labels.get(DYNAMO_SUB_COMPONENT_TYPE)
    if sub:
        role = role_from_component(sub)
        if role is None:
            raise ValueError(f"{DYNAMO_SUB_COMPONENT_TYPE}: expected prefill or decode, got {sub[:40]!r}")
        return role
    return role_from_component(labels.get(DYNAMO_COMPONENT))


def pool_of(role: str | None) -> str:
    """The pool a replica of this role belongs to: its role, ``both`` when it has none."""
    return role or BOTH


def pool_key(deployment_key: str, pool: str) -> str:
    """``namespace/name`` for the ``both`` pool (a co-located deployment keeps its key), else ``ns/name@pool``."""
    return deployment_key if pool == BOTH else f"{deployment_key}{POOL_SEPARATOR}{pool}"


def split_pool_key(key: str) -> tuple[str, str]:
    """``(deployment key, pool)`` of a pool key: ``"ns/llama@prefill"`` -> ``("ns/llama", "prefill")``."""
    base, sep, pool = key.rpartition(POOL_SEPARATOR)
    if sep and pool in (PREFILL, DECODE) and "/" in base:
        return base, pool
    return key, BOTH
