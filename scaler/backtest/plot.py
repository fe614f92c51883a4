"""One PNG: demand and forecast on top, replicas per policy below, sharing the time axis."""

from __future__ import annotations

from pathlib import Path

from scaler.backtest.run import Report


def plot(report: Report, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    first = next(iter(report.policies.values()))
    hours = [t / 3600.0 for t in first.times]
    top.plot(hours, first.demand, color="black", lw=1.0, label="arrival rate (60 s window)")
    for name, r in report.policies.items():
        if r.forecasts:
            xs = [(f.t + f.horizon_s) / 3600.0 for f in r.forecasts]
            top.plot(xs, [f.point for f in r.forecasts], lw=0.8, label=f"{name} forecast (at its horizon)")
            top.fill_between(xs, [f.point for f in r.forecasts], [f.upper for f in r.forecasts], alpha=0.15)
    top.set_ylabel("requests/s")
    top.legend(loc="upper left", fontsize=8)
    top.set_title(f"{report.trace}: {report.fidelity} level, capacity {report.capacity_rps:.2f} req/s per replica")
    for name, r in report.policies.items():
        bottom.step(
            [t / 3600.0 for t in r.times],
            r.replicas,
            where="post",
            lw=1.0,
            label=f"{name} ({r.replica_hours:.1f} replica-h, {100 * r.slo_attainment:.1f} % in SLO, "
            f"peak {max(r.replicas, default=0)})",
        )
    # A policy that runs away (hundreds of replicas) must not flatten the others: clip the axis at the busiest
    # well-behaved policy and say so in the legend of the one clipped.
    peaks = sorted(max(r.replicas, default=0) for r in report.policies.values())
    if len(peaks) > 1 and peaks[-1] > 3 * max(peaks[-2], 1):
        bottom.set_ylim(0, 1.5 * max(peaks[-2], 1))
    bottom.set_ylabel("replicas (incl. loading)")
    bottom.set_xlabel("hours since trace start")
    bottom.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
