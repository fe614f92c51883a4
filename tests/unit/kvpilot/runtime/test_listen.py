"""The HTTP API's listening socket: its connections send without Nagle's delay.

A keep-alive client (Prometheus, KEDA's metrics-api trigger, any HTTP library's pool) waited ~40 ms for every answer
when the socket was made with protocol 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, so the
body waited behind the headers for the client's delayed ACK (bench/fleet_scale.py: /healthz p50 44 ms -> 0.6 ms).
"""

from __future__ import annotations

import asyncio
import socket

from kvpilot.runtime.runner import _listen


async def test_accepted_connections_have_tcp_nodelay() -> None:
    sock = _listen("127.0.0.1", 0)
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted = transport.get_extra_info("socket")
            seen.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    try:
        _reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(seen, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
