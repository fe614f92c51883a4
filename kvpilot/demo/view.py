"""The live terminal view of `kvpilot demo`: one rich layout built from the service's latest Snapshot.

Pure rendering: it reads a Snapshot (what the API serves) and an event log, and returns renderables, so it is
tested without a terminal and the demo loop only decides *when* to redraw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group
from rich.layout import Layout
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from detectors.finding import Severity
from kvpilot.runtime.snapshot import Snapshot

_SEVERITY_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # virtual (simulated) seconds
    text: str


def fmt(value: float | None, spec: str = ".1f", *, pct: bool = False, unknown: str = "–") -> str:
    """Format a possibly unknown value; unknown is shown as a dash, never as 0."""
    if value is None:
        return unknown
    return f"{value * 100:{spec}}%" if pct else f"{value:{spec}}"


def serving_replicas(snap: Snapshot, deployment: str | None = None) -> int:
    """Replicas that serve: ready, scraped, and making progress. A replica on a hung GPU passes its readiness
    probe and is ready to Kubernetes, but serves nobody; counting it would overstate the fleet."""
    from scaler.planner import making_no_progress

    return sum(
        1
        for r in snap.replicas
        if (deployment is None or r.deployment_key == deployment)
        and r.ready
        and r.target_up
        and not making_no_progress(r)
    )


def deployments_table(snap: Snapshot) -> Table:
    t = Table(title="Deployments", expand=True, title_justify="left")
    for col in ("deployment", "serving/desired", "warm pool", "waiting", "running", "KV mean/max", "prefix hit"):
        t.add_column(col, justify="left" if col == "deployment" else "right")
    t.add_column("arrivals/s now → forecast", justify="right")
    t.add_column("decision", justify="left", overflow="fold")
    for key, dep in sorted(snap.deployments.items()):
        decision = snap.decisions.get(key)
        desired = str(decision.desired_replicas) if decision else "–"
        warm = str(decision.warm_pool) if decision else "–"
        forecast = decision.forecast.get("arrival_rate") if decision else None
        upper = decision.forecast.get("arrival_rate_upper") if decision else None
        arrivals = f"{fmt(dep.arrival_rate, '.2f')} → {fmt(forecast, '.2f')} (≤{fmt(upper, '.2f')})"
        t.add_row(
            key,
            f"{serving_replicas(snap, key)}/{desired}",
            warm,
            fmt(dep.requests_waiting, ".0f"),
            fmt(dep.requests_running, ".0f"),
            f"{fmt(dep.kv_usage_mean, '.0f', pct=True)} / {fmt(dep.kv_usage_max, '.0f', pct=True)}",
            fmt(dep.prefix_hit_ratio, ".0f", pct=True),
            arrivals,
            decision.message if decision else "",
        )
    return t


def replicas_table(snap: Snapshot, *, limit: int = 12) -> Table:
    from scaler.planner import making_no_progress

    t = Table(title="Replicas", expand=True, title_justify="left")
    for col in ("replica", "node", "engine", "state", "waiting", "running", "KV", "prefix hit", "tok/s out"):
        t.add_column(col, justify="left" if col in ("replica", "node", "engine", "state") else "right")
    for r in snap.replicas[:limit]:
        s = r.sample
        if not (r.ready and r.target_up):
            state = "[yellow]not ready[/]"
        elif making_no_progress(r):
            state = "[bold red]no progress[/]"
        else:
            state = "[green]ready[/]"
        t.add_row(
            s.replica,
            s.node,
            s.engine,
            state,
            fmt(s.requests_waiting, ".0f"),
            fmt(s.requests_running, ".0f"),
            fmt(s.kv_usage, ".0f", pct=True),
            fmt(r.prefix_hit_ratio, ".0f", pct=True),
            fmt(r.generation_tokens_rate, ".0f"),
        )
    if len(snap.replicas) > limit:
        t.caption = f"… and {len(snap.replicas) - limit} more"
    return t


def gpus_table(snap: Snapshot, *, limit: int = 12) -> Table:
    t = Table(title="GPUs", expand=True, title_justify="left")
    for col in ("node/gpu", "model", "util", "memory", "temp", "power", "last XID", "drain"):
        t.add_column(col, justify="left" if col in ("node/gpu", "model", "drain") else "right")
    for g in snap.gpus[:limit]:
        s = g.sample
        mem = None
        if s.memory_used_bytes is not None and s.memory_free_bytes is not None:
            total = s.memory_used_bytes + s.memory_free_bytes
            mem = s.memory_used_bytes / total if total else None
        xid = f"[bold red]{s.last_xid}[/]" if s.last_xid else "–"
        name = f"{s.node}/{s.index}" if g.present else f"[red]{s.node}/{s.index} (missing)[/]"
        t.add_row(
            name,
            s.model_name or "–",
            fmt(s.utilisation, ".0f", pct=True),
            fmt(mem, ".0f", pct=True),
            fmt(s.temperature_c, ".0f"),
            fmt(s.power_w, ".0f"),
            xid,
            snap.node_drains.get(s.node, ""),
        )
    if len(snap.gpus) > limit:
        t.caption = f"… and {len(snap.gpus) - limit} more"
    return t


def findings_panel(snap: Snapshot) -> Panel:
    if not snap.findings:
        return Panel(Text("no open findings", style="green"), title="Findings", title_align="left")
    lines = []
    for f in sorted(snap.findings, key=lambda f: (f.severity != Severity.CRITICAL, f.kind)):
        style = _SEVERITY_STYLE.get(f.severity, "")
        lines.append(Text.assemble((f"{f.severity.value:<8}", style), f" {f.kind:<18} ", f.summary, f"  → {f.action}"))
    return Panel(Group(*lines), title=f"Findings ({len(snap.findings)})", title_align="left")


def events_panel(events: Sequence[Event], *, limit: int = 6) -> Panel:
    body = [Text(f"t={e.t:>7.0f}s  {e.text}") for e in events[-limit:]] or [Text("no events yet", style="dim")]
    return Panel(Group(*body), title="Injected faults and events", title_align="left")


def layout(snap: Snapshot | None, events: Sequence[Event], header: str) -> Layout:
    root = Layout()
    if snap is None:
        root.update(Panel(Text(f"{header}\n\nwaiting for the first complete tick…"), title="kvpilot demo"))
        return root
    root.split_column(
        Layout(Text(header, style="bold"), size=1),
        Layout(deployments_table(snap), size=5 + 2 * max(1, len(snap.deployments))),
        Layout(name="middle"),
        Layout(name="bottom", size=10),
    )
    root["middle"].split_row(Layout(replicas_table(snap)), Layout(gpus_table(snap)))
    root["bottom"].split_row(Layout(findings_panel(snap), ratio=3), Layout(events_panel(events), ratio=2))
    return root


def status_line(snap: Snapshot, header: str) -> str:
    """One line per deployment state, for when the output is not a terminal (CI logs, pipes)."""
    parts = []
    for key, dep in sorted(snap.deployments.items()):
        decision = snap.decisions.get(key)
        desired = decision.desired_replicas if decision else "–"
        parts.append(
            f"{key}: serving={serving_replicas(snap, key)} desired={desired} waiting={fmt(dep.requests_waiting, '.0f')}"
        )
    return f"{header.split(' · ')[-1]} | {' '.join(parts)} | findings={len(snap.findings)}"
