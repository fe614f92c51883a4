"""`kvpilot demo --plot FILE`: the run as one PNG, three panels on a shared time axis (simulated minutes).

Top: demand (requests arriving at the gateway per second, from the simulator) and kvpilot's forecast, each forecast
drawn at the time it is for (tick + horizon), so a forecast that leads the demand shows as a line ahead of it.
Middle: desired and ready replicas. Bottom: requests queued on the replicas. Every panel carries the injected
faults (dashed vertical lines, named on top) and the findings kvpilot opened (markers, named by kind).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvpilot.demo.replay import DemoSummary

# Findings by kind: one colour each, so that a kind's markers read as one story.
_FINDING_COLOURS = {
    "stuck_gpu": "tab:red",
    "kv_exhaustion": "tab:purple",
    "prefix_cache_miss": "tab:brown",
    "ttft_slo_burn": "tab:orange",
}


def plot_data(summary: DemoSummary) -> dict[str, Any]:
    """The series the PNG draws, as recorded by the run (times in simulated seconds since the start)."""
    s = summary.series
    return {
        "t": list(s.t),
        "demand_rps": list(s.demand_rps),
        "seen_rps": list(s.seen_rps),
        "forecast_t": list(s.forecast_t),
        "forecast_rps": list(s.forecast_rps),
        "desired": list(s.desired),
        "ready": list(s.ready),
        "waiting": list(s.waiting),
        "faults": list(s.faults),
        "findings": list(s.findings),
    }


def write_plot(summary: DemoSummary, path: str | Path, *, title: str = "kvpilot demo") -> Path:
    """Write the PNG; raises ValueError when the run recorded no tick (nothing to draw)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = plot_data(summary)
    if not d["t"]:
        raise ValueError("the demo recorded no tick: nothing to plot")
    minutes = [t / 60.0 for t in d["t"]]
    fig, (top, mid, bottom) = plt.subplots(
        3, 1, figsize=(12, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1.5]}
    )
    n = min(len(minutes), len(d["demand_rps"]))
    top.plot(minutes[:n], d["demand_rps"][:n], color="0.6", lw=0.6, label="demand (arrivals per s, per tick)")
    top.plot(minutes, d["seen_rps"], color="black", lw=1.0, label="arrival rate kvpilot measured")
    top.plot(
        [t / 60.0 for t in d["forecast_t"]],
        d["forecast_rps"],
        color="tab:blue",
        lw=1.0,
        label="kvpilot's forecast (drawn at the time it is for)",
    )
    top.set_ylabel("requests/s")
    top.legend(loc="upper left", fontsize=8)
    mid.step(minutes, d["desired"], where="post", color="tab:blue", lw=1.2, label="desired replicas (kvpilot)")
    mid.step(minutes, d["ready"], where="post", color="tab:green", lw=1.2, label="ready replicas")
    mid.set_ylabel("replicas")
    mid.set_ylim(bottom=0)
    mid.legend(loc="upper left", fontsize=8)
    bottom.plot(minutes, d["waiting"], color="tab:red", lw=0.8, label="requests waiting")
    bottom.set_ylabel("queued")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("simulated minutes")
    bottom.legend(loc="upper left", fontsize=8)
    for ax in (top, mid, bottom):
        for t, _ in d["faults"]:
            ax.axvline(t / 60.0, color="black", ls="--", lw=0.8, alpha=0.7)
        ax.grid(alpha=0.3)
    for t, kind in d["faults"]:
        top.annotate(
            f"fault: {kind}",
            (t / 60.0, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            fontsize=7,
            va="top",
            ha="right",
        )
    kinds: set[str] = set()
    for t, kind in d["findings"]:
        colour = _FINDING_COLOURS.get(kind, "tab:gray")
        mid.plot(
            [t / 60.0],
            [0.0],
            marker="^",
            ms=9,
            color=colour,
            clip_on=False,
            ls="none",
            label=f"finding: {kind}" if kind not in kinds else None,
        )
        kinds.add(kind)
    mid.legend(loc="upper left", fontsize=8)
    top.set_title(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
