"""`kvpilot gpu-agent`: serve this node's GPUs, read through NVML, as a dcgm-exporter page (docs/gpu-agent.md)."""

from __future__ import annotations

from typing import Annotated

import typer


def command(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port (dcgm-exporter's by default).", min=0, max=65535)] = 9400,
    node: Annotated[
        str | None, typer.Option(help="Node name on the page; default $NODE_NAME, else the host name.")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one page to stdout and exit (1 if NVML fails).")] = False,
) -> None:
    """Serve GET /metrics (every GPU of this node through NVML, in dcgm-exporter's names) and GET /healthz, for
    nodes without dcgm-exporter; kvpilot scrapes it like dcgm-exporter."""
    from collector.gpus.agent import default_node, run

    raise typer.Exit(code=run(host, port, node or default_node(), once=once))
