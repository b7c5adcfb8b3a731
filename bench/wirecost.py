"""`python -m bench.wirecost`: what the limits on the wire (reference/wirelimits.py) add to a request.

uvicorn's `HttpToolsProtocol` and the `LimitedProtocol` every cell server runs are driven in
one process, in alternation, with a transport that only collects what is written and an app
that reads the body and answers 200: a new connection with one request (connection_made,
the request, the answer, connection_lost) and a request on a kept-alive connection. The
request is a 300-byte `POST /v1/jobs?dry_run=true` with a bearer token, as the CLI sends.
CPU time of this process per request; the minimum and median over the rounds, since the
host's other work only ever adds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from bench.memtransport import MemoryTransport
from reference import wirelimits

REQUEST = (
    b"POST /v1/jobs?dry_run=true HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
    b"Connection: keep-alive\r\nUser-Agent: python-httpx/0.28.1\r\nAuthorization: Bearer " + b"t" * 48
    + b"\r\nContent-Type: application/json\r\nContent-Length: 300\r\n\r\n" + b"x" * 300
)  # fmt: skip


async def app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def measure(rounds: int, requests: int) -> dict[str, dict[str, list[float]]]:
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    config.load()
    state, loop = ServerState(), asyncio.get_running_loop()
    protocols = {"uvicorn": HttpToolsProtocol, "limited": wirelimits.limited(wirelimits.MASTER)}
    out: dict[str, dict[str, list[float]]] = {name: {"new connection": [], "kept alive": []} for name in protocols}
    for _ in range(rounds):
        for name, cls in protocols.items():
            started = time.process_time()
            for _ in range(requests):
                p = cls(config=config, server_state=state, app_state={}, _loop=loop)
                p.connection_made(MemoryTransport(peer="127.0.0.1", keep=False))
                p.data_received(REQUEST)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                p.connection_lost(None)
            out[name]["new connection"].append((time.process_time() - started) / requests * 1e6)
            p = cls(config=config, server_state=state, app_state={}, _loop=loop)
            p.connection_made(MemoryTransport(peer="127.0.0.1", keep=False))
            started = time.process_time()
            for _ in range(requests):
                p.data_received(REQUEST)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            out[name]["kept alive"].append((time.process_time() - started) / requests * 1e6)
            p.connection_lost(None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--requests", type=int, default=3000, help="requests per round and protocol")
    args = parser.parse_args()
    results = asyncio.run(measure(args.rounds, args.requests))
    for kind in ("new connection", "kept alive"):
        base, limited = results["uvicorn"][kind], results["limited"][kind]
        print(
            f"{kind}: uvicorn min {min(base):.1f} us, median {statistics.median(base):.1f} us; "
            f"limited min {min(limited):.1f} us, median {statistics.median(limited):.1f} us; "
            f"added (min) {min(limited) - min(base):+.1f} us per request"
        )


if __name__ == "__main__":
    main()
