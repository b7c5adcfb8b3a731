"""Toxiproxy on every link of a local cell: finding the server, planning and creating the proxies, and the addresses that go through them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx

import reference
from reference.launcher.cellfile import CellInfo, LauncherError, ProxyRecord, Role
from reference.launcher.processes import READY_TIMEOUT_S, spawn, wait_ready
from reference.ports import HOST, free_port

TOXIPROXY_ENV = "MINBORG_TOXIPROXY_SERVER"
TOXIPROXY_INSTALL = "chaos/install_toxiproxy.sh"


def find_toxiproxy_server(project: Path | None = None) -> str:
    """The Toxiproxy server binary: $MINBORG_TOXIPROXY_SERVER, else the project's
    tools/bin/toxiproxy-server (where chaos/install_toxiproxy.sh puts it), else PATH."""
    project = project or Path(reference.__file__).resolve().parent.parent
    candidates = [
        os.environ.get(TOXIPROXY_ENV),
        str(project / "tools" / "bin" / "toxiproxy-server"),
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("toxiproxy-server")
    if found:
        return found
    raise LauncherError(
        f"--toxiproxy needs the Toxiproxy server: no toxiproxy-server in {project / 'tools/bin'}, "
        f"${TOXIPROXY_ENV} or PATH; install it with `bash {TOXIPROXY_INSTALL}`"
    )


def plan_proxies(
    masters: Sequence[str], master_urls: dict[str, str], etcd_urls: Sequence[str],
    borglet_ports: Sequence[int],
) -> list[tuple[str, str]]:  # fmt: skip
    """(name, upstream host:port) of every link: client to each master, each master to each
    etcd member, the masters to each borglet."""
    plan = [(f"client-{name}", _hostport(master_urls[name])) for name in masters]
    plan += [
        (f"{name}-etcd{j}", _hostport(url)) for name in masters for j, url in enumerate(etcd_urls)
    ]
    plan += [(f"master-borglet{k}", f"{HOST}:{port}") for k, port in enumerate(borglet_ports)]
    return plan


def _reserve_port(reserved: set[int]) -> int:
    """A free port not in `reserved` (ports promised to processes that have not bound yet),
    reserved in turn."""
    try:
        port = free_port(reserved)
    except OSError as err:
        raise LauncherError(f"no free port found for toxiproxy: {err}") from None
    reserved.add(port)
    return port


def create_proxies(
    api: str, plan: Sequence[tuple[str, str]], reserved: set[int]
) -> list[ProxyRecord]:
    """Create each planned proxy on a free port (retrying a port taken meanwhile)."""
    records = []
    with httpx.Client(timeout=5.0) as http:
        for name, upstream in plan:
            for _attempt in range(5):
                listen = f"{HOST}:{_reserve_port(reserved)}"
                body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
                response = http.post(api + "/proxies", json=body)
                if response.status_code == 201:
                    records.append(ProxyRecord(name, listen, upstream))
                    break
            else:
                raise LauncherError(f"toxiproxy refused proxy {name}: {response.text}")
    return records


def recreate_proxies(api: str, proxies: Sequence[ProxyRecord]) -> None:
    """Create each recorded proxy again on its recorded address (a new server has none)."""
    with httpx.Client(timeout=5.0) as http:
        for p in proxies:
            body = {"name": p.name, "listen": p.listen, "upstream": p.upstream, "enabled": True}
            response = http.post(api + "/proxies", json=body)
            if response.status_code not in (201, 409):
                raise LauncherError(f"toxiproxy refused proxy {p.name} on {p.listen}: {response.text}")


def proxied_etcd_urls(proxies: Sequence[ProxyRecord], master: str, scheme: str = "http") -> list[str]:
    """The etcd URLs one master is given: its own master<i>-etcd<j> proxies, in member order.
    A proxy passes TLS through as bytes: on loopback, etcd's certificate (for 127.0.0.1)
    is valid at the proxy's address too."""
    mine = sorted(
        (p for p in proxies if p.name.startswith(f"{master}-etcd")),
        key=lambda p: int(p.name.rsplit("etcd", 1)[1]),
    )
    return [f"{scheme}://{p.listen}" for p in mine]


def client_url(proxies: Sequence[ProxyRecord], master: str, direct: str) -> str:
    found = [p for p in proxies if p.name == f"client-{master}"]
    return f"http://{found[0].listen}" if found else direct


def borglet_address(proxies: Sequence[ProxyRecord], k: int, direct: str) -> str:
    found = [p for p in proxies if p.name == f"master-borglet{k}"]
    return f"http://{found[0].listen}" if found else direct


def _hostport(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def start_toxiproxy(
    info: CellInfo, root: Path, server: str, workdir: str, env: dict[str, str], reserved: set[int]
) -> CellInfo:
    """Start the Toxiproxy server on a port outside `reserved`, record it in the cell file
    and wait until its API answers."""
    port = _reserve_port(reserved)
    url = f"http://{HOST}:{port}"
    command = [server, "-host", HOST, "-port", str(port)]
    record = spawn(Role.TOXIPROXY, "toxiproxy", command, url, root / "logs" / "toxiproxy.log",
                   workdir, env)  # fmt: skip
    info = replace(info, toxiproxy_url=url, processes=info.processes + (record,))
    info.save()
    wait_ready([record], "/version", READY_TIMEOUT_S)
    return info
