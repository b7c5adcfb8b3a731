"""Where the cell autoscaler gets machines: the MachineProvider protocol and LocalProvider (borglet processes on 127.0.0.1).

A provider starts a machine, registers it with the cell (`POST /v1/machines`), and on
removal drains and deregisters it (`DELETE /v1/machines/{name}`) before stopping it. A
cloud provider would create and delete VMs running a borglet behind the same three calls.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from reference import launcher
from reference.client import CellClient, ClientError
from reference.launcher import CellInfo, Role
from reference.launcher import tls as cell_tls
from reference.ports import free_port
from reference.resources import parse_pairs


@dataclass(frozen=True)
class MachineInfo:
    name: str
    address: str
    capacity: str
    attrs: dict[str, str] = field(default_factory=dict)
    failure_domain: str = ""


class MachineProvider(Protocol):
    def add(self) -> MachineInfo:
        """Start a machine, register it with the cell, and return it once registered."""
        ...

    def remove(self, name: str) -> None:
        """Drain and deregister the machine, then stop it."""
        ...

    def list(self) -> list[MachineInfo]:
        """The machines this provider manages."""
        ...


class LocalProvider:
    """Borglets started on this host and recorded in the local cell's cell file, as `cell up` does."""

    def __init__(self, state_dir: str | os.PathLike[str], client: CellClient, capacity: str = launcher.DEFAULT_CAPACITY) -> None:
        self.state_dir = str(state_dir)
        self.client = client
        self.capacity = capacity
        self._lock = threading.Lock()  # one cell-file edit at a time

    def list(self) -> list[MachineInfo]:
        info = CellInfo.load(self.state_dir)
        out = []
        for record in info.of_role(Role.BORGLET):
            if launcher.is_alive(record):
                i = _index(record.name)
                out.append(MachineInfo(record.name, record.url, self.capacity, {"rack": launcher.rack_of(i)}, launcher.rack_of(i)))
        return out

    def add(self) -> MachineInfo:
        info = CellInfo.load(self.state_dir)
        taken = {r.name for r in info.of_role(Role.BORGLET)} | {m["name"] for m in self.client.machines()}
        i = max((_index(n) for n in taken), default=-1) + 1
        name = f"machine{i}"
        port = free_port()
        env = launcher.child_env(info.workdir)
        # The launcher's own borglet start, so an added machine runs exactly as `cell up` starts one.
        tls = any(url.startswith("https://") for url in info.master_urls)  # a TLS cell's machines serve HTTPS too
        record = launcher.start_borglet(Path(self.state_dir), name, port, self.capacity, i, info.workdir, env, tls=tls)
        with self._lock:
            info = CellInfo.load(self.state_dir)
            info = replace(
                info,
                borglet_urls={**info.borglet_urls, name: record.url},
                processes=info.processes + (record,),
            )
            info.save()  # recorded before anything else, so `cell down` stops it whatever happens next
        launcher.wait_ready([record], "/healthz", launcher.READY_TIMEOUT_S, cell_tls.client_verify(self.state_dir))
        machine = MachineInfo(name, record.url, self.capacity, {"rack": launcher.rack_of(i)}, launcher.rack_of(i))
        self.client.add_machine(
            {
                "name": name,
                "address": record.url,
                "capacity": parse_pairs(self.capacity),
                "attrs": machine.attrs,
                "failure_domain": machine.failure_domain,
            }
        )
        return machine

    def remove(self, name: str) -> None:
        try:
            self.client.request("DELETE", f"/v1/machines/{name}")
        except ClientError as err:
            if err.status != 404:  # already gone from the cell: still stop the process
                raise
        info = CellInfo.load(self.state_dir)
        records = [r for r in info.of_role(Role.BORGLET) if r.name == name]
        launcher.stop_processes(records)
        with self._lock:
            info = CellInfo.load(self.state_dir)
            info = replace(
                info,
                borglet_urls={k: v for k, v in info.borglet_urls.items() if k != name},
                processes=tuple(p for p in info.processes if not (p.role is Role.BORGLET and p.name == name)),
            )
            info.save()


def _index(name: str) -> int:
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else 0
