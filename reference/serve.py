"""uvicorn, woken once a second instead of ten times when it has nothing to do.

uvicorn's main loop wakes every 0.1 s to refresh its Date header (once a second) and to look
for a requested exit. A cell on one host runs a hundred borglets: their wake-ups alone came to
a tenth of a core. This server waits a second between those looks and is woken at once by
the exit signal, so shutting down is as prompt as before.

Every server run here (masters, borglets, hollow borglets) speaks HTTP through
`wirelimits.LimitedProtocol`: uvicorn's httptools protocol with limits on header size, body
size, header-read time and connections per client. Given a certificate (`channel.ServerTLS`, from
the `--tls-cert-file`/`--tls-key-file` flags of `channel.add_tls_arguments`), a server speaks HTTPS only: a
plain HTTP request to its port fails the TLS handshake and gets no HTTP answer at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import sys
import time
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from reference import gctune, wirelimits
from reference.channel import ServerTLS

TICK_S = 1.0
# How long a server started on a port it had before (a cell resumed on its recorded ports)
# waits for that port to be free. A recorded port is one the kernel also hands out as the
# source port of outgoing connections; one of them may hold it for a moment (the masters
# poll the borglet's port while it is down, and a connection to a closed port on loopback can
# be given that very port and connect to itself). It lets go when that connection ends.
BIND_WAIT_S = 15.0


def wait_bindable(host: str, port: int, wait_s: float = BIND_WAIT_S) -> bool:
    """Wait until (`host`, `port`) can be bound for listening, as uvicorn binds it
    (SO_REUSEADDR), for at most `wait_s` seconds; whether it can. Port 0 always can."""
    deadline = time.monotonic() + wait_s
    while True:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return True
            except OSError as err:
                if err.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                    return err.errno != errno.EADDRINUSE
        time.sleep(0.2)


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit_asked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit_asked is not None:
            self._loop.call_soon_threadsafe(self._exit_asked.set)

    async def main_loop(self) -> None:
        self._loop, self._exit_asked = asyncio.get_running_loop(), asyncio.Event()
        # on_tick refreshes the Date header when its counter is a multiple of ten: every tick.
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_asked.wait(), TICK_S)


def run(
    app: Any, host: str, port: int, limits: wirelimits.WireLimits = wirelimits.MASTER, *, tls: ServerTLS | None = None,
    **options: Any,
) -> None:  # fmt: skip
    """uvicorn.run(app, ...) for an app object, through QuietServer, with `limits` on the wire
    (as the MINBORG_* variables of `wirelimits.ENV` change them), over HTTPS only with `tls`: a
    server that could not start (its port taken, say) ends the process with uvicorn's own exit
    status."""
    try:
        limits = wirelimits.from_env(limits)
    except ValueError as err:
        sys.exit(f"limits on the wire: {err}")
    config = uvicorn.Config(
        app, host=host, port=port, http=wirelimits.limited(limits), ws="none",
        **(tls.options() if tls else {}), **options,
    )  # fmt: skip
    server = QuietServer(config)
    if port and not wait_bindable(host, port):
        print(f"port {host}:{port} still in use after {BIND_WAIT_S:.0f} s", file=sys.stderr)
    gctune.tune()
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
