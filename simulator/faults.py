"""Faults that can be injected into a fleet, parsed from the control API's JSON with errors that name the field.

- `xid` (node, gpu, xid > 0): sets the GPU's last XID; 79 also drops the GPU from its exporter and hangs its
  replica; 119/120 hang it.
- `hung_gpu` (node, gpu): GPU pinned at 100 % utilisation, its replica makes no progress.
- `vanish_gpu` (node, gpu): the GPU disappears from dcgm-exporter.
- `crash` (replica): the engine dies with its requests and counters, then cold-starts.
- `kv_pressure` (count=50, prompt_tokens=30000, output_tokens=200, duration_s=10): a burst of long prompts.
- `routing` (routing: round_robin | least_loaded | prefix_affinity): the gateway's policy changes.
- `recover` (node, gpu): clears hung / vanished / XID on that GPU.
- `rollout` (wave_size=1, model_name="", speed=1, controller="deployment"): a rolling update (maxSurge 0,
  maxUnavailable wave_size) whose new replicas cold-start, optionally serving `model_name` with step times divided
  by `speed`. `controller` "deployment" runs it as Kubernetes' Deployment controller does: old replicas go only
  while more than the live count - wave_size stay ready, so a count raised before a wave keeps the fleet's
  availability; "waves" drains `wave_size` old replicas per wave whatever the count (the model before
  2026-12-04). Request level only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fault:
    type: str
    node: str = ""
    gpu: int = 0
    xid: int = 0
    replica: str = ""
    count: int = 50
    prompt_tokens: int = 30000
    output_tokens: int = 200
    duration_s: float = 10.0
    routing: str = ""
    wave_size: int = 1
    model_name: str = ""
    speed: float = 1.0
    controller: str = "deployment"


ROLLOUT_CONTROLLERS = ("deployment", "waves")
_REQUIRED: dict[str, tuple[str, ...]] = {
    "xid": ("node", "gpu", "xid"),
    "hung_gpu": ("node", "gpu"),
    "vanish_gpu": ("node", "gpu"),
    "recover": ("node", "gpu"),
    "crash": ("replica",),
    "kv_pressure": (),
    "routing": ("routing",),
    "rollout": (),
}
_TYPES: dict[str, type] = {
    "node": str,
    "gpu": int,
    "xid": int,
    "replica": str,
    "count": int,
    "prompt_tokens": int,
    "output_tokens": int,
    "duration_s": float,
    "routing": str,
    "wave_size": int,
    "controller": str,
    "model_name": str,
    "speed": float,
}


def parse_fault(body: Any) -> Fault:
    """Validate a JSON object into a Fault; ValueError names the offending field."""
    if not isinstance(body, dict):
        raise ValueError("fault must be a JSON object")
    kind = body.get("type")
    if not isinstance(kind, str) or kind not in _REQUIRED:
        raise ValueError(f"unknown fault type {kind!r} (known: {', '.join(_REQUIRED)})")
    unknown = set(body) - {"type"} - set(_TYPES)
    if unknown:
        raise ValueError(f"unknown field(s) for fault {kind!r}: {', '.join(sorted(unknown))}")
    missing = [f for f in _REQUIRED[kind] if f not in body]
    if missing:
        raise ValueError(f"fault {kind!r} needs field(s): {', '.join(missing)}")
    kwargs: dict[str, Any] = {}
    for key, value in body.items():
        if key == "type":
            continue
        want = _TYPES[key]
        ok = isinstance(value, str) if want is str else isinstance(value, int | float) and not isinstance(value, bool)
        if ok and want is not str and not math.isfinite(value):
            ok = False
        if want is int and ok and float(value) != int(value):
            ok = False
        if not ok:
            raise ValueError(f"fault field {key!r} must be {want.__name__}, got {value!r}")
        kwargs[key] = want(value)
    f = Fault(type=kind, **kwargs)
    if f.gpu < 0 or f.xid < 0 or f.count < 0 or f.prompt_tokens < 1 or f.output_tokens < 1 or not f.duration_s > 0:
        raise ValueError(f"fault {kind!r}: gpu, xid, count must be >= 0; token counts >= 1; duration_s > 0")
    if kind == "xid" and f.xid == 0:
        raise ValueError("fault 'xid' needs xid > 0")
    if kind == "rollout" and (f.wave_size < 1 or not f.speed > 0):
        raise ValueError("fault 'rollout': wave_size must be >= 1 and speed > 0")
    if kind == "rollout" and f.controller not in ROLLOUT_CONTROLLERS:
        raise ValueError(f"fault 'rollout': controller must be one of {', '.join(ROLLOUT_CONTROLLERS)}")
    if f.count > 100_000:
        raise ValueError("fault 'kv_pressure': count must be <= 100000")
    return f
