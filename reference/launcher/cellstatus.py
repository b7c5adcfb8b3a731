"""`status`: a local cell's processes (alive or not, their CPU) and, when a master answers, its /v1/cell."""

from __future__ import annotations

import os
from typing import Any

import psutil

from reference.cellfile import read_admin_token
from reference.client import CellClient, ClientError
from reference.launcher import cpubudget
from reference.launcher import tls as cell_tls
from reference.launcher.cellfile import (
    CellInfo,
    ProcessRecord,
    Role,
    is_alive,
    record_process,
)


def status(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The local cell's processes (alive or not) and, when a master answers, its /v1/cell."""
    info = CellInfo.load(state_dir)
    processes = [
        {
            "role": str(p.role),
            "name": p.name,
            "pid": p.pid,
            "alive": is_alive(p),
            "url": p.url,
            "log": p.log,
            **_cpu(info, p),
        }
        for p in info.processes
    ]
    result: dict[str, Any] = {
        "cell": info.cell,
        "state_dir": info.state_dir,
        "running": any(p["alive"] for p in processes),
        "stopped_at": info.stopped_at,
        "master_urls": list(info.master_urls),
        "etcd_urls": list(info.etcd_urls),
        "etcd_version": info.etcd_version,
        "etcd_tls": info.etcd_tls is not None,
        "hosts": {h.name: h.address for h in info.network.hosts} if info.network is not None else None,
        "replica_cpu": info.replica_cpu,
        "machine_shares": info.machine_shares,
        "processes": processes,
        "api": None,
        "api_error": None,
    }
    if result["running"] and info.master_urls:
        try:
            token = read_admin_token(info.state_dir)
            with CellClient(list(info.master_urls), timeout=2.0, retry_s=3.0, token=token,
                            ca=str(cell_tls.ca_file(info.state_dir))) as client:  # fmt: skip
                result["api"] = client.cell()
        except ClientError as err:
            result["api_error"] = str(err)
    return result


def _cpu(info: CellInfo, record: ProcessRecord) -> dict[str, Any]:
    """A process's CPU seconds used and, for a master replica of a cell with a budget, the
    budget its group holds (cores): from the group's cpuacct (children included), else the
    process's own times."""
    if info.replica_cpu is not None and record.role in (Role.MASTER, Role.SCHEDULER):
        group = cpubudget.process_group(info.cell, info.state_dir, record.name)
        return {"cpu_s": cpubudget.cpu_used_s(group), "cpu_budget": cpubudget.quota_of(group)}
    proc = record_process(record)
    try:
        times = proc.cpu_times() if proc is not None else None
    except psutil.Error:
        times = None
    return {"cpu_s": times.user + times.system if times is not None else None}
