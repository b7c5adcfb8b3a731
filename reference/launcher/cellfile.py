"""The local cell's file (cell.json) as the launcher writes it: every process and proxy of the cell, and whether a recorded process still runs.

Clients only read where the masters are (reference/cellfile.py, with the standard library
alone); the launcher records here everything it needs to stop, resume or restart the cell.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

from reference import proctime
from reference.cellfile import CELL_FILE, state_dir_path
from reference.launcher.netns import Network
from reference.store.tls import StoreTLS

# Process start times agree to within this many seconds between two psutil reads.
CREATE_TIME_TOLERANCE_S = 0.05


class LauncherError(RuntimeError):
    """The local cell could not be started, found or stopped as asked."""


class Role(StrEnum):
    ETCD = "etcd"
    MASTER = "master"
    BORGLET = "borglet"
    SCHEDULER = "scheduler"
    TOXIPROXY = "toxiproxy"
    AUTOSCALER = "autoscaler"


@dataclass(frozen=True)
class ProcessRecord:
    """One process of the cell. Its start tells it apart from a later process that reuses
    its pid, so `down` never signals an unrelated process: `start_ticks`, counted from boot
    (reference/proctime.py), which no step of the wall clock moves; `create_time` is the
    same start on the wall clock when it was recorded, the identity of records written
    without ticks. The command line is what `up` and `restart` run again to bring it back
    on its data."""

    role: Role
    name: str
    pid: int
    create_time: float
    url: str
    log: str
    command: tuple[str, ...] = ()
    start_ticks: int | None = None


@dataclass(frozen=True)
class ProxyRecord:
    """One Toxiproxy proxy of the cell: `listen` forwards to `upstream` (both host:port)."""

    name: str
    listen: str
    upstream: str


def live_process(pid: int, create_time: float, start_ticks: int | None = None) -> psutil.Process | None:
    """The process `pid` if it is still the one that started at `start_ticks` since boot (or,
    for a record without them, at `create_time` on the wall clock) and is not a zombie."""
    try:
        proc = psutil.Process(pid)
        if start_ticks is not None:
            same = proctime.is_started_at(pid, start_ticks)
        else:
            same = abs(proc.create_time() - create_time) <= CREATE_TIME_TOLERANCE_S
        if not same or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.NoSuchProcess:
        return None


def record_process(record: ProcessRecord) -> psutil.Process | None:
    """The recorded process if it still runs (not a zombie, not a reused pid)."""
    return live_process(record.pid, record.create_time, record.start_ticks)


def is_alive(record: ProcessRecord) -> bool:
    """Whether the recorded process still runs (a zombie or a reused pid does not count)."""
    return record_process(record) is not None


@dataclass(frozen=True)
class CellInfo:
    """What the cell file says: where every process of a local cell listens and runs."""

    cell: str
    state_dir: str
    workdir: str
    started_at: float
    master_urls: tuple[str, ...]
    etcd_urls: tuple[str, ...]
    borglet_urls: dict[str, str]
    processes: tuple[ProcessRecord, ...] = ()
    stopped_at: float | None = None
    version: int = 1
    # Set only for a cell started with --toxiproxy: the server's API and every named proxy.
    toxiproxy_url: str | None = None
    proxies: tuple[ProxyRecord, ...] = ()
    # Set only for a cell started with --replica-cpu: each master replica's CPU budget, in
    # cores, held by a cgroup of its own (cpubudget) and put back when a replica restarts.
    replica_cpu: float | None = None
    # Set when the cell's real borglets run in one CPU group of this weight (cpu.shares,
    # cpubudget.machines_group), made again when they restart.
    machine_shares: int | None = None
    # The files the cell's own processes and tools reach its store with (its etcd serves
    # https and takes only the cell CA's client certificate); None: a plain-http cell of before.
    etcd_tls: StoreTLS | None = None
    # What etcd's /version said when its members last started (`cell status` shows it).
    etcd_version: str | None = None
    # Set for a cell on hosts of its own (`--hosts netns`): its bridge, and each process's
    # namespace and address; None: every process on the host's loopback.
    network: Network | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["master_urls"], data["etcd_urls"] = list(self.master_urls), list(self.etcd_urls)
        data["processes"] = [asdict(p) for p in self.processes]
        if self.toxiproxy_url is None:
            # A cell without Toxiproxy keeps the cell file it always had.
            del data["toxiproxy_url"], data["proxies"]
        else:
            data["proxies"] = [asdict(p) for p in self.proxies]
        if self.replica_cpu is None:
            del data["replica_cpu"]
        if self.machine_shares is None:
            del data["machine_shares"]
        if self.etcd_version is None:
            del data["etcd_version"]
        if self.network is None:
            del data["network"]
        else:
            data["network"] = self.network.to_json()
        if self.etcd_tls is None:
            del data["etcd_tls"]
        else:
            data["etcd_tls"] = self.etcd_tls.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellInfo:
        procs = tuple(
            ProcessRecord(**{**p, "role": Role(p["role"]), "command": tuple(p.get("command") or ())})
            for p in data.get("processes", [])
        )
        return cls(
            cell=data["cell"],
            state_dir=data["state_dir"],
            workdir=data["workdir"],
            started_at=data["started_at"],
            master_urls=tuple(data["master_urls"]),
            etcd_urls=tuple(data["etcd_urls"]),
            borglet_urls=dict(data["borglet_urls"]),
            processes=procs,
            stopped_at=data.get("stopped_at"),
            version=data.get("version", 1),
            toxiproxy_url=data.get("toxiproxy_url"),
            proxies=tuple(ProxyRecord(**p) for p in data.get("proxies") or []),
            replica_cpu=data.get("replica_cpu"),
            machine_shares=data.get("machine_shares"),
            etcd_tls=StoreTLS.from_json(data.get("etcd_tls")),
            etcd_version=data.get("etcd_version"),
            network=Network.from_json(data.get("network")),
        )

    def save(self) -> None:
        path = Path(self.state_dir) / CELL_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(path)  # atomic: a client never reads half a cell file

    @classmethod
    def load(cls, state_dir: str | os.PathLike[str] | None = None) -> CellInfo:
        path = state_dir_path(state_dir) / CELL_FILE
        try:
            return cls.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            raise LauncherError(f"no cell in {path.parent}: {path} does not exist") from None
        except (ValueError, KeyError, TypeError) as err:
            raise LauncherError(f"unreadable cell file {path}: {err}") from None

    def of_role(self, role: Role) -> list[ProcessRecord]:
        return [p for p in self.processes if p.role is role]

    def address_of(self, name: str) -> str | None:
        """The address of process `name`'s host on a netns cell; None on a loopback cell."""
        return self.network.address(name) if self.network is not None else None

    def running(self) -> list[ProcessRecord]:
        return [p for p in self.processes if is_alive(p)]


def with_records(info: CellInfo, role: Role, records: Iterable[ProcessRecord]) -> CellInfo:
    """The cell file with the given records of `role` replacing those of the same name (and
    any new name added at the end); saved."""
    new = {r.name: r for r in records}
    processes = tuple(new.pop(p.name, p) if p.role is role else p for p in info.processes)
    info = replace(info, processes=processes + tuple(new.values()))
    info.save()
    return info
