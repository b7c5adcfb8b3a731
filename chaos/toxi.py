"""Drives the cell's Toxiproxy server with the toxiproxy-python client: cut, heal, latency."""

from __future__ import annotations

from urllib.parse import urlparse

from toxiproxy import Toxiproxy  # type: ignore[import-untyped]

from reference.launcher import CellInfo


def server(info: CellInfo) -> Toxiproxy:
    if not info.toxiproxy_url:
        raise RuntimeError("this cell was started without --toxiproxy")
    url = urlparse(info.toxiproxy_url)
    toxiproxy = Toxiproxy()
    # The client keeps its API address on a class; every call here sets it for this cell.
    toxiproxy.update_api_consumer(url.hostname, url.port)
    return toxiproxy


def set_enabled(info: CellInfo, names: list[str], enabled: bool) -> None:
    toxiproxy = server(info)
    for name in names:
        proxy = toxiproxy.get_proxy(name)
        if enabled:
            proxy.enable()
        else:
            proxy.disable()


def add_latency(info: CellInfo, names: list[str], latency_ms: int, jitter_ms: int) -> None:
    toxiproxy = server(info)
    for name in names:
        toxiproxy.get_proxy(name).add_toxic(
            type="latency", name=f"latency-{name}", stream="downstream",
            attributes={"latency": latency_ms, "jitter": jitter_ms},
        )  # fmt: skip


def reset(info: CellInfo) -> None:
    """Enable every proxy and remove every toxic (Toxiproxy's own /reset)."""
    server(info).reset()
