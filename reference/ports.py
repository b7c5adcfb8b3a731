"""Picking free TCP ports on loopback: the one picker for etcd members, masters, borglets, proxies and tasks."""

from __future__ import annotations

import socket
from collections.abc import Collection

HOST = "127.0.0.1"
# Tries per port before giving up on finding one outside `taken`: the kernel hands out
# ephemeral ports in a wide range, so more than a few collisions mean `taken` covers it.
ATTEMPTS = 50


def free_ports(count: int, *, taken: Collection[int] = frozenset(), host: str = HOST) -> list[int]:
    """`count` distinct ports on `host` that were free a moment ago and are not in `taken`
    (ports promised to processes that have not bound them yet). OSError if none is found."""
    sockets: list[socket.socket] = []
    chosen: list[int] = []
    try:
        # Every socket stays bound until all are chosen, so the kernel cannot hand out the
        # same port twice, nor one we skipped for being taken.
        for _ in range(count):
            for _attempt in range(ATTEMPTS):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((host, 0))
                port = sock.getsockname()[1]
                if port not in taken:
                    chosen.append(port)
                    break
            else:
                raise OSError(f"no free port found on {host} outside the {len(taken)} taken")
        return chosen
    finally:
        for sock in sockets:
            sock.close()


def free_port(taken: Collection[int] = frozenset(), *, host: str = HOST) -> int:
    """One port on `host` that was free a moment ago and is not in `taken`."""
    return free_ports(1, taken=taken, host=host)[0]
