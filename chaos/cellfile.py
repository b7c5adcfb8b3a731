"""Reads a local cell's cell file for the chaos tools: masters, proxies, borglets, the leader."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reference.cellfile import auth_headers, read_admin_token
from reference.launcher import (
    CellInfo,
    ProcessRecord,
    ProxyRecord,
    Role,
    ask_leader,
    borglet_auth,
    is_alive,
)

STATE_DIR_ENV = "MINBORG_STATE_DIR"


def load(state_dir: str | None = None) -> CellInfo:
    return CellInfo.load(state_dir or os.environ.get(STATE_DIR_ENV))


@dataclass(frozen=True)
class Leader:
    name: str
    record: ProcessRecord


def borglet_state(info: CellInfo, machine: str, timeout: float = 1.0) -> dict[str, Any] | None:
    """A borglet's /v1/state, signed with the cell's channel key; None if it does not answer."""
    try:
        answer = httpx.get(
            info.borglet_urls[machine] + "/v1/state", timeout=timeout, auth=borglet_auth(Path(info.state_dir), machine)
        )
        return answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def live_task_ids(info: CellInfo, prefix: str = "", timeout: float = 1.0) -> list[str]:
    """The ids the borglets report STARTING or RUNNING and that start with `prefix`, one per
    borglet that runs it (spec.taskid.running_twice reads them); borglets that do not answer
    are left out."""
    return [
        entry["task_id"]
        for machine in info.borglet_urls
        for entry in (borglet_state(info, machine, timeout) or {}).get("tasks", [])
        if entry.get("state") in ("STARTING", "RUNNING") and entry["task_id"].startswith(prefix)
    ]


def master_record(info: CellInfo, name: str) -> ProcessRecord:
    for record in info.of_role(Role.MASTER):
        if record.name == name:
            return record
    raise KeyError(f"no master {name} in the cell file")


def proxy(info: CellInfo, name: str) -> ProxyRecord:
    for record in info.proxies:
        if record.name == name:
            return record
    raise KeyError(f"no proxy {name} in the cell file (was the cell started with --toxiproxy?)")


def master_index(name: str) -> int:
    return int(name.removeprefix("master"))


def admin_headers(info: CellInfo) -> dict[str, str]:
    """The Authorization header of the cell's admin token (from its state dir)."""
    return auth_headers(read_admin_token(info.state_dir))


def leader(info: CellInfo, not_named: str | None = None, timeout: float = 1.0) -> Leader | None:
    """The leader as the live masters say (launcher.ask_leader), only one believed alive."""
    live = [r.url for r in info.of_role(Role.MASTER) if is_alive(r)]
    with httpx.Client(timeout=timeout, headers=admin_headers(info)) as http:
        name = ask_leader(http, live, not_named)
    if name is None:
        return None
    record = master_record(info, name)
    return Leader(name, record) if is_alive(record) else None


def borglet_index(info: CellInfo, machine: str) -> int:
    return list(info.borglet_urls).index(machine)
