"""Kills and restarts the cell's processes (masters, etcd members, tasks) for the chaos actions."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from chaos.events import run_dir
from reference import proctime
from reference.launcher import CellInfo, ProcessRecord, Role, is_alive
from reference.store.etcd_cluster import EtcdCluster

KILLED = "killed.json"


def _killed(run: str | None) -> list[dict[str, Any]]:
    path = run_dir(run) / KILLED
    return json.loads(path.read_text()) if path.exists() else []


def kill_master(info: CellInfo, record: ProcessRecord, run: str | None) -> None:
    """SIGKILL one master, keeping its command line so `restart_masters` can start it again."""
    proc = psutil.Process(record.pid)
    saved = {"name": record.name, "cmdline": proc.cmdline(), "cwd": proc.cwd(),
             "env": proc.environ(), "log": record.log, "url": record.url}  # fmt: skip
    path = run_dir(run) / KILLED
    path.write_text(json.dumps([*_killed(run), saved]))
    proc.kill()
    # The master is not our child: it turns into its parent's zombie, which is_alive counts as gone.
    deadline = time.monotonic() + 5.0
    while is_alive(record) and time.monotonic() < deadline:
        time.sleep(0.02)


def restart_masters(state_dir: str, run: str | None) -> list[str]:
    """Start again every master killed in this run that is still down; update the cell file
    so `cell down` stops the new process."""
    info = CellInfo.load(state_dir)
    started = []
    for saved in _killed(run):
        record = next(
            p for p in info.processes if p.role is Role.MASTER and p.name == saved["name"]
        )
        if is_alive(record):
            continue
        with open(saved["log"], "ab") as out:
            popen = subprocess.Popen(
                saved["cmdline"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=saved["cwd"], env=saved["env"], start_new_session=True,
            )  # fmt: skip
        new = replace(
            record, pid=popen.pid, create_time=psutil.Process(popen.pid).create_time(),
            start_ticks=proctime.start_ticks(popen.pid),
        )
        info = replace(info, processes=tuple(new if p is record else p for p in info.processes))
        info.save()
        started.append(saved["name"])
    (run_dir(run) / KILLED).write_text("[]")
    return started


def etcd(state_dir: str) -> EtcdCluster:
    return EtcdCluster.load(Path(state_dir) / "etcd")


def kill_etcd(state_dir: str, count: int) -> list[int]:
    """SIGKILL `count` more running members, the Raft leader first (the harder case)."""
    cluster = etcd(state_dir)
    running = [i for i, pid in enumerate(cluster.pids()) if pid is not None]
    lead = cluster.leader_index()
    order = sorted(running, key=lambda i: i != lead)
    victims = order[:count]
    for i in victims:
        cluster.kill_member(i)
    return victims


def restart_etcd(state_dir: str, timeout: float = 30.0) -> list[int]:
    cluster = etcd(state_dir)
    down = [i for i, pid in enumerate(cluster.pids()) if pid is None]
    # The first member back restores the quorum, so each restart can wait for health in turn.
    for i in down:
        cluster.restart_member(i, timeout)
    return down


def task_processes(info: CellInfo, job: str) -> list[tuple[str, psutil.Process]]:
    """(machine, process) of each running task of `job`: the borglets' direct children whose
    environment names the job's BNS name."""
    found = []
    suffix = "." + ".".join(reversed(job.split("/"))) + "."
    for record in info.of_role(Role.BORGLET):
        try:
            children = psutil.Process(record.pid).children()
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                bns = child.environ().get("BNS_NAME", "")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if suffix in bns:
                found.append((record.name, child))
    return found


def kill_tasks(info: CellInfo, job: str, count: int) -> list[int]:
    victims = task_processes(info, job)[:count]
    for _machine, proc in victims:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    time.sleep(0.1)
    return [p.pid for _m, p in victims]
